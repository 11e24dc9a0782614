"""Writing a session directory: input.wav, trace.jsonl, output.pcm and (last) session.json."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fdb.audio import Audio, float_to_pcm16, pcm16_to_float, wav_bytes
from fdb.dialects import Dialect, views
from fdb.io import atomic_write_bytes, atomic_write_json, atomic_write_text, sha256_bytes
from fdb.session_records import (
    InputInfo,
    LoopLagStats,
    ResponseCounts,
    SessionRecord,
    SessionStatus,
    TraceEvent,
)
from recorders.oracle import judge_trace
from recorders.pacing import pacing_stats, sends_from_trace

SESSION_FILES = ("session.json", "trace.jsonl", "input.wav", "output.pcm")


def input_pcm16(audio: Audio, rate: int = 16000) -> bytes:
    """The input stream exactly as sent: mono PCM16 at ``rate`` (soxr HQ resampling)."""
    return float_to_pcm16(audio.resample(rate).samples)


def drain_seconds(trace: Sequence[TraceEvent]) -> float | None:
    """Seconds from the sent sglang.input_audio.end to the received drained (None if either is
    absent)."""
    end = next((e.t for e in trace if e.dir == "send" and e.type == "sglang.input_audio.end"), None)
    drained = next(
        (e.t for e in trace if e.dir == "recv" and e.type == "sglang.input_audio.drained"), None
    )
    return None if end is None or drained is None else round(drained - end, 6)


def write_input_wav(out_dir: Path, pcm: bytes, rate: int) -> str:
    """Write input.wav (the PCM16 stream exactly as sent); returns its sha256."""
    data = wav_bytes(pcm16_to_float(pcm), rate)  # PCM16 -> float -> PCM16 is exact
    atomic_write_bytes(out_dir / "input.wav", data)
    return sha256_bytes(data)


def response_counts(
    trace: Sequence[TraceEvent], profile: Dialect, output_bytes: int
) -> ResponseCounts:
    counts = ResponseCounts(output_bytes=output_bytes)
    counts.output_duration_s = round(output_bytes / 2 / profile.formats.output_rate, 6)
    for ev in trace:
        if ev.dir != "recv":
            continue
        if ev.type == "response.created":
            counts.created += 1
        elif ev.type in profile.events.audio_delta:
            counts.audio_deltas += 1
        elif ev.type == "response.done":
            status = views.lenient(views.ResponseEvent, ev.event).body.shown("status")
            if status == "completed":
                counts.completed += 1
            elif status == "cancelled":
                counts.cancelled += 1
            else:
                counts.other += 1
    return counts


@dataclass
class SessionOutcome:
    """What a finished session run hands to ``write_recording``."""

    trace: list[TraceEvent]
    output: bytes
    status: SessionStatus
    failure: str | None
    close_code: int | None
    close_reason: str | None
    admission_denials: int
    granted_session: dict[str, Any] | None
    t0_wall: str | None
    elapsed_s: float
    extra: dict[str, Any] = field(default_factory=dict)
    loop_lag: LoopLagStats | None = None


def write_recording(
    out_dir: Path,
    outcome: SessionOutcome,
    *,
    base: dict[str, Any],
    profile: Dialect,
    pcm: bytes,
    source_rate: int,
    input_wav_sha256: str,
    turn_detection: dict[str, Any] | None,
) -> SessionRecord:
    """Write trace.jsonl and output.pcm, judge the trace, then write session.json atomically."""
    trace_text = "".join(ev.line() + "\n" for ev in outcome.trace)
    atomic_write_text(out_dir / "trace.jsonl", trace_text)
    atomic_write_bytes(out_dir / "output.pcm", outcome.output)
    samples = len(pcm) // 2
    input_ms = samples * 1000.0 / profile.formats.input_rate
    granted = outcome.granted_session or {}
    granted_sglang = views.at(granted, "sglang", "granted")
    record = SessionRecord(
        **base,
        profile=profile.name,
        trace_format=profile.trace_format,
        turn_detection_requested=turn_detection,
        turn_detection_granted=profile.session.echoed_turn_detection(granted),
        granted=granted_sglang if isinstance(granted_sglang, dict) else None,
        input=InputInfo(
            rate=profile.formats.input_rate,
            samples=samples,
            duration_s=samples / profile.formats.input_rate,
            pcm_sha256=sha256_bytes(pcm),
            source_rate=source_rate,
        ),
        output_rate=profile.formats.output_rate,
        t0_wall=outcome.t0_wall,
        elapsed_s=round(outcome.elapsed_s, 3),
        pacing=pacing_stats(
            sends_from_trace(outcome.trace), profile.pacing.packet_ms, profile.pacing.tolerance_ms
        ),
        status=outcome.status,
        failure=outcome.failure,
        close_code=outcome.close_code,
        close_reason=outcome.close_reason,
        admission_denials=outcome.admission_denials,
        verdict=judge_trace(outcome.trace, profile, turn_detection, input_ms),
        drain_s=drain_seconds(outcome.trace),
        loop_lag=outcome.loop_lag or LoopLagStats(),
        responses=response_counts(outcome.trace, profile, len(outcome.output)),
        files={
            "input.wav": input_wav_sha256,
            "trace.jsonl": sha256_bytes(trace_text.encode("utf-8")),
            "output.pcm": sha256_bytes(outcome.output),
        },
        extra=outcome.extra,
    )
    atomic_write_json(out_dir / "session.json", record.dump())
    return record
