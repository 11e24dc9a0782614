"""Eligibility and window of one recorded session, as the export sees it.

Reasons a session is ineligible (each a string in the manifest):

- ``missing``: no session directory for the sample.
- ``unreadable``: session.json, trace.jsonl or output.pcm cannot be read or parsed.
- ``status``: the recorder ended the session with a failure (error, timeout, disconnected,
  admission_denied).
- ``protocol``: the oracle, re-run on the stored trace, found violations.
- ``pacing``: some input packet started more than 80 ms off its schedule.
- ``input``: the recorded input is not the dataset input resampled to 16 kHz.
- ``files``: a stored file's sha256 differs from the one the recorder wrote in session.json.
- ``trace_format``: the session was recorded in another protocol than the export's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from fdb.audio import read_wav
from fdb.dialects import Dialect, dialect_for_trace_format
from fdb.errors import FdbError
from fdb.io import read_json, sha256_bytes, sha256_file
from fdb.playout import playout_window, trace_playout_inputs
from fdb.session_records import SessionRecord, TraceEvent, read_trace
from recorders.oracle import judge_trace
from recorders.pacing import pacing_stats, sends_from_trace
from recorders.recording import SESSION_FILES
from recorders.session import input_pcm16

MAX_PROTOCOL_REASONS = 5
EXPORT_RATE = 16000


@dataclass
class VariantResult:
    eligible: bool
    reasons: list[str]
    verdict: Literal["pass", "fail", "missing"]
    T_s: float | None = None
    input_samples: int | None = None
    input_pcm: bytes | None = None  # the dataset input at 16 kHz, PCM16
    window: np.ndarray | None = None
    barge_in_cuts: int = 0

    @classmethod
    def missing(cls, reason: str, verdict: Literal["fail", "missing"] = "missing") -> VariantResult:
        return cls(eligible=False, reasons=[reason], verdict=verdict)


def dataset_input(path: Path, label: str) -> bytes:
    """The dataset input as the recorder sends it (16 kHz PCM16); SampleError when unreadable."""
    return input_pcm16(read_wav(path, label), EXPORT_RATE)


def source_hashes(session_dir: Path | None) -> dict[str, str | None] | None:
    if session_dir is None:
        return None
    return {name: _sha_or_none(session_dir / name) for name in SESSION_FILES}


def _sha_or_none(path: Path) -> str | None:
    return sha256_file(path) if path.is_file() else None


def analyze_variant(
    session_dir: Path | None,
    expected_pcm: bytes,
    label: str,
    input_at_rate: Callable[[int], bytes] | None = None,
    trace_format: str | None = None,
) -> VariantResult:
    """Judge one session for export and, when it is eligible, build its window.

    ``expected_pcm`` is the dataset input at 16 kHz; ``input_at_rate(rate)`` gives it at the
    rate a profile sends (24 kHz for the OpenAI profiles), for the integrity check."""
    n = len(expected_pcm) // 2
    result = VariantResult(
        eligible=False,
        reasons=[],
        verdict="fail",
        T_s=n / EXPORT_RATE,
        input_samples=n,
        input_pcm=expected_pcm,
    )
    if session_dir is None:
        result.verdict, result.reasons = "missing", ["missing: no recording"]
        return result
    try:
        record = SessionRecord.model_validate(read_json(session_dir / "session.json"))
    except (OSError, ValueError) as exc:
        result.reasons = [f"unreadable: {label}: session.json: {exc}"]
        return result
    try:
        trace, output = (
            read_trace(session_dir / "trace.jsonl"),
            (session_dir / "output.pcm").read_bytes(),
        )
        profile = dialect_for_trace_format(record.trace_format)
    except (OSError, ValueError, FdbError) as exc:
        result.reasons = _status_reasons(record) or [f"unreadable: {label}: {exc}"]
        return result
    input_ms = (record.input.samples if record.input else 0) * 1000.0 / profile.formats.input_rate
    verdict = judge_trace(trace, profile, record.turn_detection_requested, input_ms)
    sent_pcm = expected_pcm
    if profile.formats.input_rate != EXPORT_RATE:  # the integrity check compares the stream as sent
        sent_pcm = input_at_rate(profile.formats.input_rate) if input_at_rate else b""
    result.verdict = verdict.status if record.status == "ok" else "fail"
    result.reasons = (
        _status_reasons(record)
        + _protocol_reasons(verdict.violations)
        + _pacing_reasons(trace, profile)
        + _integrity_reasons(session_dir, record, sent_pcm)
    )
    if trace_format is not None and record.trace_format != trace_format:
        result.reasons.insert(
            0, f"trace_format: recorded as {record.trace_format}, the export is {trace_format}"
        )
    if result.reasons:
        return result
    try:
        deltas, cancels = trace_playout_inputs(
            trace, output, profile, record.turn_detection_requested
        )
    except ValueError as exc:
        result.reasons = [f"unreadable: {label}: {exc}"]
        return result
    window = playout_window(deltas, cancels, record.output_rate, n / EXPORT_RATE, EXPORT_RATE, n)
    result.window, result.barge_in_cuts, result.eligible = (
        window.samples,
        window.barge_in_cuts,
        True,
    )
    return result


def _status_reasons(record: SessionRecord) -> list[str]:
    if record.status == "ok":
        return []
    return [f"status: {record.status}: {record.failure}"]


def _protocol_reasons(violations: list[str]) -> list[str]:
    reasons = [f"protocol: {v}" for v in violations[:MAX_PROTOCOL_REASONS]]
    if len(violations) > MAX_PROTOCOL_REASONS:
        reasons.append(f"protocol: and {len(violations) - MAX_PROTOCOL_REASONS} more violations")
    return reasons


def _pacing_reasons(trace: list[TraceEvent], profile: Dialect) -> list[str]:
    stats = pacing_stats(
        sends_from_trace(trace), profile.pacing.packet_ms, profile.pacing.tolerance_ms
    )
    if stats.violations == 0:
        return []
    return [
        f"pacing: {stats.violations} of {stats.packets} packets started more than "
        f"{stats.tolerance_ms:g} ms off schedule (max {stats.max_lateness_ms} ms)"
    ]


def _integrity_reasons(session_dir: Path, record: SessionRecord, expected_pcm: bytes) -> list[str]:
    reasons = []
    if record.input is None or record.input.pcm_sha256 != sha256_bytes(expected_pcm):
        reasons.append("input: the recorded input is not the dataset input")
    for name in ("input.wav", "trace.jsonl", "output.pcm"):
        want = record.files.get(name)
        if want is None or _sha_or_none(session_dir / name) != want:
            reasons.append(f"files: {name} differs from the recording")
    return reasons
