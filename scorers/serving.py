"""Serving metrics of one concurrency level, computed only from what the client recorded.

A level is a directory of recorded sessions (``session.json`` + ``trace.jsonl`` each). Every
time here is a client-side time on the trace clock of its session (seconds from the first
packet's send start); ``level_row`` turns one level into one ``ServingRow`` and ``capacity``
reads the rows of a sweep. A value that cannot be measured is None, never 0.
"""

from __future__ import annotations

import math
from datetime import datetime
from pathlib import Path

from pydantic import BaseModel, Field

from fdb.dialects import Dialect, get_dialect
from fdb.playout import audio_delta
from fdb.records.serving import CLIENT_CPU_SATURATED, DEFAULT_RESERVE_MS, Capacity, ServingRow
from fdb.session_records import SessionRecord, TraceEvent, read_trace
from fdb.stats import P50, P90, P95, ceil_quantile, quantile_ms

UNIT_MISS_TARGET = 0.01
APPEND = "input_audio_buffer.append"


class Reply(BaseModel):
    """One response: when response.created arrived and each audio chunk's (arrival, seconds)."""

    response_id: str | None
    created_t: float | None = None
    chunks: list[tuple[float, float]] = Field(default_factory=list)


class Session(BaseModel):
    """One recorded session of a level."""

    record: SessionRecord
    trace: list[TraceEvent]


def _packets(trace: list[TraceEvent], input_rate: int) -> list[tuple[float, float]]:
    """(cumulative input end in ms, t_end) of each paced append, in send order."""
    total, out = 0.0, []
    for ev in trace:
        if ev.dir == "send" and ev.type == APPEND:
            total += int(ev.event.get("audio_bytes", 0)) / 2 / (input_rate / 1000.0)
            out.append((total, ev.t_end if ev.t_end is not None else ev.t))
    return out


def unit_readiness(
    trace: list[TraceEvent], profile: Dialect
) -> tuple[list[tuple[float, float]], int]:
    """(receipt of sglang.unit.done, t_end of the packet holding the unit's last audio) per unit,
    the input end standing in for a short or padded last unit; and the expected unit count."""
    packets = _packets(trace, profile.formats.input_rate)
    if not packets:
        return [], 0
    input_ms = packets[-1][0]
    expected = math.ceil(input_ms / profile.units.unit_ms - 1e-9)
    units = []
    for ev in trace:
        if ev.dir != "recv" or ev.type != "sglang.unit.done":
            continue
        media = (ev.event.get("sglang") or {}).get("media_time") or {}
        start, duration = media.get("t_start_ms"), media.get("duration_ms")
        if not isinstance(start, int | float) or not isinstance(duration, int | float):
            continue
        units.append((ev.t, _ready(packets, min(start + duration, input_ms))))
    return units, expected


def _ready(packets: list[tuple[float, float]], input_ms: float) -> float:
    """t_end of the packet holding input time ``input_ms`` (the last packet past the input end)."""
    return next((t_end for cum, t_end in packets if cum >= input_ms - 1e-6), packets[-1][1])


def speech_end_first_audio_s(
    trace: list[TraceEvent], profile: Dialect, output_rate: int, speech_end_s: float
) -> float | None:
    """First audio after the user's speech end: the speech end (an input time, e.g. a dataset's
    turn-end annotation) is ready when the packet holding it was sent; the reply to it is the first
    response created after that. Its first audio's receipt minus that moment; None when no reply
    with audio was created after the speech end."""
    packets = _packets(trace, profile.formats.input_rate)
    if not packets:
        return None
    ready = _ready(packets, speech_end_s * 1000.0)
    for reply in replies(trace, profile, output_rate):
        if reply.created_t is not None and reply.created_t >= ready:
            return reply.chunks[0][0] - ready if reply.chunks else None
    return None


def unit_lags(trace: list[TraceEvent], profile: Dialect) -> tuple[list[float], int]:
    """Lag (s) of each unit: its sglang.unit.done receipt minus its input being ready."""
    units, expected = unit_readiness(trace, profile)
    return [done - ready for done, ready in units], expected


def native_first_audio_s(reply: Reply, units: list[tuple[float, float]]) -> float | None:
    """Native: from the input of the unit that carried the reply's first audio (the last unit
    done at or before that audio) being ready to the audio's receipt."""
    if not reply.chunks:
        return None
    arrival = reply.chunks[0][0]
    carried = [ready for done, ready in units if done <= arrival]
    return arrival - carried[-1] if carried else None


def replies(trace: list[TraceEvent], profile: Dialect, output_rate: int) -> list[Reply]:
    """Responses in order of response.created (or of their first audio), with their chunks."""
    found: dict[str | None, Reply] = {}
    for ev in trace:
        if ev.dir != "recv":
            continue
        if ev.type == "response.created":
            rid = (ev.event.get("response") or {}).get("id")
            found.setdefault(rid, Reply(response_id=rid)).created_t = ev.t
        elif (delta := audio_delta(ev, profile)) is not None:
            reply = found.setdefault(delta.response_id, Reply(response_id=delta.response_id))
            reply.chunks.append((delta.t, delta.size / 2 / output_rate))
    return list(found.values())


def first_audio_s(reply: Reply) -> float | None:
    if reply.created_t is None or not reply.chunks:
        return None
    return reply.chunks[0][0] - reply.created_t


def buffer_needed_s(reply: Reply) -> float | None:
    """The smallest startup buffer with which the reply plays without a gap: the largest
    lateness of a chunk against playback that started at the first chunk's arrival."""
    if not reply.chunks:
        return None
    first, before, need = reply.chunks[0][0], 0.0, 0.0
    for arrival, seconds in reply.chunks:
        need = max(need, arrival - (first + before))
        before += seconds
    return need


def reply_rtf(reply: Reply) -> float | None:
    """(last arrival - first arrival) / audio before the last chunk; None under two chunks."""
    if len(reply.chunks) < 2:
        return None
    audio = sum(seconds for _, seconds in reply.chunks[:-1])
    return (reply.chunks[-1][0] - reply.chunks[0][0]) / audio if audio > 0 else None


def _wall(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value).timestamp()
    except ValueError:
        return None


def session_span(session: Session) -> tuple[float, float] | None:
    """Wall-clock (start, end) of a session: its first and last trace event around t0_wall."""
    t0 = _wall(session.record.t0_wall)
    if t0 is None or not session.trace:
        return None
    times = [ev.t for ev in session.trace]
    return t0 + min(times), t0 + max(times)


def mean_open(spans: list[tuple[float, float]]) -> float | None:
    """Sessions open at once, averaged over the level (first start to last end)."""
    if not spans:
        return None
    length = max(end for _, end in spans) - min(start for start, _ in spans)
    if length <= 0:
        return None
    return round(sum(end - start for start, end in spans) / length, 3)


def is_failed(record: SessionRecord) -> bool:
    """Replay failed or broke off; a session denied admission is counted as a 503 instead."""
    if record.status == "admission_denied":
        return False
    return record.status != "ok" or record.verdict.status != "pass"


def denials(record: SessionRecord) -> int:
    return max(record.admission_denials, 1 if record.status == "admission_denied" else 0)


def _unit_columns(sessions: list[Session], profile: Dialect) -> dict:
    """Unit miss and lag over the level; every unit of a failed session is a miss."""
    lags: list[float] = []
    units = misses = 0
    unit_s = profile.units.unit_ms / 1000.0
    for session in sessions:
        found, expected = unit_lags(session.trace, profile)
        lags += found
        units += expected
        if is_failed(session.record) or session.record.status == "admission_denied":
            misses += expected
            continue
        misses += sum(1 for lag in found if lag > unit_s) + max(expected - len(found), 0)
    return {
        "units": units,
        "unit_misses": misses,
        "unit_miss_rate": round(misses / units, 6) if units else None,
        "unit_lag_p50_ms": quantile_ms(lags, P50),
        "unit_lag_p95_ms": quantile_ms(lags, P95),
    }


def _reply_columns(
    sessions: list[Session], profile: Dialect, native: bool, reserve_ms: float
) -> dict:
    all_replies = [r for s in sessions for r in replies(s.trace, profile, s.record.output_rate)]
    heard = [r for r in all_replies if r.chunks]
    buffers = [b for b in (buffer_needed_s(r) for r in heard) if b is not None]
    firsts = (
        _first_audio(sessions, profile)
        if native
        else [f for f in (first_audio_s(r) for r in heard) if f is not None]
    )
    rtfs = [] if native else [x for x in (reply_rtf(r) for r in heard) if x is not None]
    rtf = ceil_quantile(rtfs, P90) if rtfs else None
    return {
        "replies": len(all_replies),
        "empty_replies": len(all_replies) - len(heard),
        "first_audio_p50_ms": quantile_ms(firsts, P50),
        "first_audio_p95_ms": quantile_ms(firsts, P95),
        "buffer_needed_p90_ms": quantile_ms(buffers, P90),
        "underrun_replies": sum(1 for b in buffers if b * 1000.0 > reserve_ms) if heard else None,
        "rtf_p90": None if rtf is None else round(rtf, 4),
    }


def _first_audio(sessions: list[Session], profile: Dialect) -> list[float]:
    found = []
    for session in sessions:
        units, _ = unit_readiness(session.trace, profile)
        for reply in replies(session.trace, profile, session.record.output_rate):
            value = native_first_audio_s(reply, units)
            if value is not None:
                found.append(value)
    return found


def missed_targets(row: ServingRow) -> list[str]:
    """Targets: no failed session, no 503, no pacing violation, unit miss <= 1% (native) or
    reply RTF p90 < 1 (turn-based)."""
    missed = []
    if row.sessions == 0:
        missed.append("no sessions recorded")
    if row.sessions_failed:
        missed.append(f"{row.sessions_failed} failed sessions")
    if row.admission_denied:
        missed.append(f"{row.admission_denied} admission denials (503)")
    if row.pacing_violations:
        who = " (client-limited: the load generator fell behind)" if row.client_limited else ""
        missed.append(f"{row.pacing_violations} pacing violations{who}")
    if row.native:
        if row.unit_miss_rate is None or row.unit_miss_rate > UNIT_MISS_TARGET:
            missed.append(f"unit miss {_pct(row.unit_miss_rate)} > 1%")
    elif row.rtf_p90 is None or row.rtf_p90 >= 1.0:
        missed.append(f"reply RTF p90 {'-' if row.rtf_p90 is None else row.rtf_p90} not < 1")
    return missed


def _pct(rate: float | None) -> str:
    return "-" if rate is None else f"{rate * 100:.2f}%"


def client_limited_sessions(sessions: list[Session]) -> int:
    """Sessions whose pacing violations coincide with the recorder's own loop lag during the
    input."""
    return sum(
        1 for s in sessions if s.record.pacing.violations > 0 and s.record.loop_lag.client_behind
    )


def is_client_limited(row: ServingRow) -> bool:
    """The load generator limited the level: a session's pacing broke while its client loop lagged,
    or pacing broke while the client process used at least 90% of a core (a saturated loop)."""
    saturated = row.client_cpu is not None and row.client_cpu >= CLIENT_CPU_SATURATED
    return row.client_limited_sessions > 0 or (row.pacing_violations > 0 and saturated)


def level_row(
    concurrency: int,
    sessions: list[Session],
    profile: str | Dialect = "turn-based",
    reserve_ms: float = DEFAULT_RESERVE_MS,
    client_cpu: float | None = None,
) -> ServingRow:
    """The serving row of one level. The profile is the sessions' own when they name one;
    ``client_cpu`` is the client process's CPU share of one core while it recorded the level."""
    dialect = get_dialect(sessions[0].record.profile if sessions else profile)
    native = dialect.units.tail_policy == "pad"
    spans = [span for span in (session_span(s) for s in sessions) if span is not None]
    row = ServingRow(
        concurrency=concurrency,
        profile=dialect.name,
        native=native,
        sessions=len(sessions),
        mean_open=mean_open(spans),
        sessions_failed=sum(1 for s in sessions if is_failed(s.record)),
        admission_denied=sum(denials(s.record) for s in sessions),
        pacing_violations=sum(1 for s in sessions if s.record.pacing.violations > 0),
        client_behind=sum(1 for s in sessions if s.record.loop_lag.client_behind),
        client_limited_sessions=client_limited_sessions(sessions),
        client_cpu=client_cpu,
        playback_reserve_ms=reserve_ms,
        **(_unit_columns(sessions, dialect) if native else {}),
        **_reply_columns(sessions, dialect, native, reserve_ms),
    )
    row.client_limited = is_client_limited(row)
    row.missed_targets = missed_targets(row)
    row.meets_targets = not row.missed_targets
    return row


def combine_repeats(pooled: ServingRow, repeats: list[ServingRow]) -> ServingRow:
    """One row for a level recorded several times: the columns pool every repeat's sessions
    (``pooled`` is the row over all of them), mean open is the mean of the repeats', the client
    CPU the highest, and the level meets the targets only when every repeat does (each miss
    names its repeat)."""
    if len(repeats) < 2:
        return repeats[0] if repeats else pooled
    opens = [r.mean_open for r in repeats if r.mean_open is not None]
    cpus = [r.client_cpu for r in repeats if r.client_cpu is not None]
    missed = [
        f"repeat {k}: {miss}" for k, r in enumerate(repeats, start=1) for miss in r.missed_targets
    ]
    return pooled.model_copy(
        update={
            "repeats": len(repeats),
            "mean_open": round(sum(opens) / len(opens), 3) if opens else None,
            "client_cpu": max(cpus) if cpus else None,
            "client_limited": any(r.client_limited for r in repeats),
            "missed_targets": missed,
            "meets_targets": not missed,
        }
    )


def capacity(rows: list[ServingRow]) -> Capacity:
    """The highest level below the first that misses; "at least N" when all meet. When the first
    miss is client-limited the level did not measure the server, so the capacity is "at least"."""
    ordered = sorted(rows, key=lambda r: r.concurrency)
    best = None
    for row in ordered:
        if not row.meets_targets:
            return Capacity(
                sessions=best,
                first_miss=row.concurrency,
                at_least=row.client_limited,
                client_limited=row.client_limited,
            )
        best = row.concurrency
    return Capacity(sessions=best, at_least=True)


def load_level(directory: str | Path) -> list[Session]:
    """Every recorded session under ``directory`` (any depth), in path order."""
    sessions = []
    for path in sorted(Path(directory).rglob("session.json")):
        record = SessionRecord.model_validate_json(path.read_text(encoding="utf-8"))
        trace_path = path.with_name("trace.jsonl")
        trace = read_trace(trace_path) if trace_path.is_file() else []
        sessions.append(Session(record=record, trace=trace))
    return sessions
