"""TTS serving metrics, pure functions over ``TtsRequestRecord`` files (docs/tts.md).

Per request (client clock, seconds from just before the request was sent):

- TTFA: arrival of the first non-empty audio payload (``chunks[0]``); None without audio.
- E2E: the end of the response body (``end_s``).
- audio duration: PCM bytes / (2 x channels x the declared sample rate).
- RTF: arrival of the last audio chunk / audio duration (the Drama 3 table's definition); None
  without audio. vllm-omni divides the E2E latency instead; the two differ by the tail after the
  last audio only.
- gaps: time between consecutive audio arrivals; ``max_gap_s`` is the largest.
- playback underrun: the worst deficit of a real-time player that starts playing at the first
  arrival and plays every chunk as soon as the audio before it has played: max over chunks of
  arrival - (first arrival + audio before it), never below 0 (``scorers.serving.buffer_needed_s``).
  A request *underruns* when this exceeds the playback reserve (default 80 ms).
- stop condition: ``audio_after_done_s`` is audio that arrived after the server declared the end
  (SSE ``speech.audio.done``, ``finish_reason`` or ``[DONE]``); ``overrun_s`` is audio beyond the
  request's ``max_audio_s`` bound when one was given. ``stop_violation`` is true when either is
  above 0, false when a check was possible and found nothing, None when neither check applies.

Per level (warm-ups excluded; ``failed`` requests stay in the request count):

- wall time: the first measured send to the last measured body end;
- throughput: audio seconds of the ``ok`` requests / wall time; frames/s = that x --frame-rate;
- TTFA p50/p95 and E2E p50/p95 over the requests with audio, RTF mean over the same; the
  quantile is the ceil(qN)-th smallest value (``fdb.stats.ceil_quantile``), no interpolation.

Per level entry recorded in several rounds (``--rounds``): ``mean_row`` is the mean of each value
over the measured rounds (counts summed), ``level_stats`` its mean, sample sd, min and max; the
cold round is not among them.
"""

from __future__ import annotations

import statistics

from pydantic import BaseModel, Field

from fdb.records.tts import DEFAULT_RESERVE_S, LevelRow, LevelStats, MetricStats
from fdb.speech_formats import server_text
from fdb.stats import P50, P95, quantile_ms
from fdb.tts_records import TtsRequestRecord
from scorers.serving import Reply, buffer_needed_s


class RequestMetrics(BaseModel):
    """The metrics of one request; None where a value cannot be measured, never 0."""

    id: str
    index: int
    status: str
    error: str | None = None
    sample_rate: int | None = None
    chunks: int = 0
    ttfa_s: float | None = None
    e2e_s: float | None = None
    last_audio_s: float | None = None
    audio_s: float | None = None
    rtf: float | None = None
    gaps_s: list[float] = Field(default_factory=list)
    max_gap_s: float | None = None
    playback_underrun_s: float | None = None
    underrun: bool | None = None
    audio_after_done_s: float | None = None
    overrun_s: float | None = None
    stop_violation: bool | None = None
    partial_frame_bytes: int = 0


def _bytes_to_s(nbytes: int, record: TtsRequestRecord) -> float | None:
    if not record.sample_rate:
        return None
    return nbytes / (2.0 * (record.channels or 1) * record.sample_rate)


def chunk_seconds(record: TtsRequestRecord) -> list[tuple[float, float]]:
    """(arrival, audio seconds) of each chunk."""
    return [(t, _bytes_to_s(n, record) or 0.0) for t, n in record.chunks]


def stop_check(
    record: TtsRequestRecord, audio_s: float | None
) -> tuple[float | None, float | None, bool | None]:
    """(audio after the declared end, audio beyond max_audio_s, violation) as defined above."""
    after = _bytes_to_s(record.bytes_after_done, record) if record.done_s is not None else None
    over = None
    if record.max_audio_s is not None and audio_s is not None:
        over = round(max(0.0, audio_s - record.max_audio_s), 6)
    checks = [value for value in (after, over) if value is not None]
    return after, over, (any(value > 1e-9 for value in checks) if checks else None)


def request_metrics(
    record: TtsRequestRecord, reserve_s: float = DEFAULT_RESERVE_S
) -> RequestMetrics:
    audio_bytes = record.audio_bytes - record.partial_frame_bytes
    seconds = _bytes_to_s(audio_bytes, record) if audio_bytes > 0 else None
    audio_s = None if seconds is None else round(seconds, 6)
    error = (
        None if record.error is None else server_text(record.error, 600)
    )  # an older record may hold bytes
    out = RequestMetrics(
        id=record.id,
        index=record.index,
        status=record.status,
        error=error,
        sample_rate=record.sample_rate,
        chunks=len(record.chunks),
        e2e_s=record.end_s if record.status == "ok" else None,
        audio_s=audio_s,
        partial_frame_bytes=record.partial_frame_bytes,
    )
    out.audio_after_done_s, out.overrun_s, out.stop_violation = stop_check(record, audio_s)
    if not record.chunks or audio_s is None:
        return out
    times = [t for t, _ in record.chunks]
    out.ttfa_s, out.last_audio_s = times[0], times[-1]
    out.rtf = round(times[-1] / audio_s, 6)
    out.gaps_s = [round(b - a, 6) for a, b in zip(times, times[1:], strict=False)]
    out.max_gap_s = max(out.gaps_s) if out.gaps_s else None
    need = buffer_needed_s(Reply(response_id=record.id, chunks=chunk_seconds(record)))
    out.playback_underrun_s = None if need is None else round(max(0.0, need), 6)
    out.underrun = None if need is None else need > reserve_s + 1e-9
    return out


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _wall(records: list[TtsRequestRecord]) -> float | None:
    spans = [
        (r.start_s, r.start_s + r.end_s)
        for r in records
        if r.start_s is not None and r.end_s is not None
    ]
    if not spans:
        return None
    return max(end for _, end in spans) - min(start for start, _ in spans)


def level_row(
    concurrency: int,
    records: list[TtsRequestRecord],
    reserve_s: float = DEFAULT_RESERVE_S,
    frame_rate_hz: float | None = None,
) -> LevelRow:
    """The row of one level from all of its records (warm-ups are counted, then left out)."""
    measured = [r for r in records if not r.warmup]
    metrics = [request_metrics(r, reserve_s) for r in measured]
    ok = [m for m in metrics if m.status == "ok"]
    heard = [m for m in ok if m.ttfa_s is not None]
    wall = _wall(measured)
    audio = sum(m.audio_s or 0.0 for m in ok) if ok else None
    row = LevelRow(
        concurrency=concurrency,
        requests=len(measured),
        warmups=len(records) - len(measured),
        ok=len(ok),
        failed=len(metrics) - len(ok),
        empty=len(ok) - len(heard),
        wall_s=None if wall is None else round(wall, 6),
        audio_s=None if audio is None else round(audio, 6),
        frame_rate_hz=frame_rate_hz,
        playback_reserve_ms=round(reserve_s * 1000.0, 3),
    )
    if wall and wall > 0 and audio is not None:
        row.throughput_audio_s_per_s = round(audio / wall, 4)
        row.requests_per_s = round(len(ok) / wall, 4)
        if frame_rate_hz:
            row.throughput_frames_per_s = round(audio / wall * frame_rate_hz, 2)
    ttfa = [m.ttfa_s for m in heard]
    mean_ttfa = _mean(ttfa)
    row.ttfa_p50_ms, row.ttfa_p95_ms = quantile_ms(ttfa, P50), quantile_ms(ttfa, P95)
    row.ttfa_mean_ms = None if mean_ttfa is None else round(mean_ttfa * 1000.0, 3)
    e2e = [m.e2e_s for m in heard if m.e2e_s is not None]
    row.e2e_p50_ms, row.e2e_p95_ms = quantile_ms(e2e, P50), quantile_ms(e2e, P95)
    rtf = _mean([m.rtf for m in heard if m.rtf is not None])
    row.rtf_mean = None if rtf is None else round(rtf, 4)
    row.max_gap_p95_ms = quantile_ms([m.max_gap_s for m in heard if m.max_gap_s is not None], P95)
    under = [m.playback_underrun_s for m in heard if m.playback_underrun_s is not None]
    row.underrun_p95_ms = quantile_ms(under, P95)
    row.underrun_requests = sum(1 for m in heard if m.underrun) if heard else None
    checked = [m for m in metrics if m.stop_violation is not None]
    row.stop_checked, row.stop_violations = (
        len(checked),
        sum(1 for m in checked if m.stop_violation),
    )
    row.sample_rates = sorted({m.sample_rate for m in metrics if m.sample_rate})
    row.errors = list(dict.fromkeys(m.error for m in metrics if m.error))[:5]
    return row


# --- several rounds of one level entry (tts-bench --rounds) ---------------------------------------

STAT_METRICS = (
    "throughput_audio_s_per_s",
    "throughput_frames_per_s",
    "ttfa_p50_ms",
    "ttfa_p95_ms",
    "ttfa_mean_ms",
    "rtf_mean",
    "e2e_p50_ms",
)
_COUNTS = ("requests", "warmups", "ok", "failed", "empty", "stop_checked", "stop_violations")
_MEANS = (
    "wall_s",
    "audio_s",
    "throughput_audio_s_per_s",
    "throughput_frames_per_s",
    "requests_per_s",
    "ttfa_p50_ms",
    "ttfa_p95_ms",
    "ttfa_mean_ms",
    "e2e_p50_ms",
    "e2e_p95_ms",
    "rtf_mean",
    "max_gap_p95_ms",
    "underrun_p95_ms",
)


def metric_stats(values: list[float | None]) -> MetricStats:
    found = [v for v in values if v is not None]
    if not found:
        return MetricStats()
    sd = round(statistics.stdev(found), 6) if len(found) >= 2 else None
    return MetricStats(
        mean=round(statistics.fmean(found), 6), sd=sd, min=min(found), max=max(found), n=len(found)
    )


def level_stats(entry: int, rows: list[LevelRow]) -> LevelStats:
    """The spread of STAT_METRICS over the measured rounds ``rows`` of one level entry."""
    return LevelStats(
        entry=entry,
        concurrency=rows[0].concurrency,
        rounds=len(rows),
        metrics={name: metric_stats([getattr(r, name) for r in rows]) for name in STAT_METRICS},
    )


def mean_row(rows: list[LevelRow]) -> LevelRow:
    """One row for an entry's measured rounds: every measured value the mean over the rounds that
    have one (None when none has), every count summed; one round is its own row."""
    if len(rows) == 1:
        return rows[0]
    update: dict = {name: sum(getattr(r, name) for r in rows) for name in _COUNTS}
    update |= {name: metric_stats([getattr(r, name) for r in rows]).mean for name in _MEANS}
    under = [r.underrun_requests for r in rows if r.underrun_requests is not None]
    update["underrun_requests"] = sum(under) if under else None
    update["sample_rates"] = sorted({rate for r in rows for rate in r.sample_rates})
    update["errors"] = list(dict.fromkeys(e for r in rows for e in r.errors))[:5]
    return rows[0].model_copy(update=update)
