"""Typed records of one recorded session (docs/formats.md, "Recording").

``session.json`` holds a ``SessionRecord`` (schema ``fdb-session-1``); ``trace.jsonl`` holds one
``TraceEvent`` per line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from fdb.io import Record

SESSION_SCHEMA = "fdb-session-1"

SessionStatus = Literal["ok", "error", "timeout", "disconnected", "admission_denied"]
Direction = Literal["send", "recv", "note"]


class TraceEvent(BaseModel):
    """One line of trace.jsonl.

    ``t`` is seconds on the client's monotonic clock from the send start of the first input
    packet (negative before it). A paced ``input_audio_buffer.append`` also carries
    ``scheduled`` (its slot on the absolute 80 ms schedule) and ``t_end`` (when its write
    completed), so pacing can be re-checked from the trace alone.
    """

    t: float
    dir: Direction
    type: str
    event: dict[str, Any]
    scheduled: float | None = None
    t_end: float | None = None

    def line(self) -> str:
        data = self.model_dump(mode="json", exclude_none=True)
        return json.dumps(data, sort_keys=True, ensure_ascii=False, allow_nan=False)


def read_trace(path: str | Path) -> list[TraceEvent]:
    """Parse trace.jsonl; a malformed line raises ValueError naming the line."""
    events: list[TraceEvent] = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                events.append(TraceEvent.model_validate_json(line))
            except ValueError as exc:
                raise ValueError(f"{path}:{number}: not a trace event ({exc})") from exc
    return events


class PacketSend(BaseModel):
    """Send receipt of one input packet; times on the trace clock (seconds from t0)."""

    seq: int
    samples: int
    scheduled: float
    start: float
    end: float

    @property
    def lateness_s(self) -> float:
        return self.start - self.scheduled


class PacingStats(BaseModel):
    """Input pacing: a packet whose send starts more than ``tolerance_ms`` off its slot
    (t0 + seq * packet_ms) is a violation and makes the session ineligible."""

    packets: int = 0
    packet_ms: int = 80
    tolerance_ms: float = 80.0
    max_lateness_ms: float | None = None
    p99_lateness_ms: float | None = None
    mean_lateness_ms: float | None = None
    max_send_ms: float | None = None
    violations: int = 0
    violation_seqs: list[int] = Field(default_factory=list)  # first 20


class LoopLagStats(BaseModel):
    """The recorder's own event-loop lag while the session ran: how late a ticker that sleeps
    ``interval_ms`` woke up. A large lag means the load generator (this process) fell behind;
    pacing violations then belong to the client, not the server (``client_behind``)."""

    interval_ms: float = 20.0
    ticks: int = 0
    max_ms: float | None = None
    p99_ms: float | None = None
    mean_ms: float | None = None
    over_tolerance: int = 0  # ticks later than the pacing tolerance (whole session)
    client_behind: bool = False  # some tick during the input was later than the tolerance


class Verdict(BaseModel):
    """The protocol oracle's verdict: ``fail`` when any rule is violated."""

    status: Literal["pass", "fail"]
    violations: list[str] = Field(default_factory=list)


class InputInfo(BaseModel):
    rate: int = 16000
    samples: int
    duration_s: float
    pcm_sha256: str  # sha256 of the PCM16 stream as sent
    source_rate: int


class ResponseCounts(BaseModel):
    created: int = 0
    completed: int = 0
    cancelled: int = 0
    other: int = 0
    audio_deltas: int = 0
    output_bytes: int = 0
    output_duration_s: float = 0.0


class SessionRecord(Record):
    """session.json: what was requested, granted, sent and received, and how it ended."""

    schema_: str = Field(SESSION_SCHEMA, alias="schema")
    sample_id: str
    variant: str
    profile: str
    trace_format: str
    url: str
    model: str | None = None
    instructions: str | None = None
    turn_detection_requested: dict[str, Any] | None = None
    turn_detection_granted: dict[str, Any] | None = None
    granted: dict[str, Any] | None = None  # session.updated's session.sglang.granted
    input: InputInfo | None = None
    output_rate: int
    t0_wall: str | None = None  # ISO wall time of the first packet's slot (log only)
    elapsed_s: float | None = None
    timeout_s: float
    pacing: PacingStats = Field(default_factory=PacingStats)
    status: SessionStatus
    failure: str | None = None
    close_code: int | None = None
    close_reason: str | None = None
    admission_denials: int = 0
    verdict: Verdict
    responses: ResponseCounts = Field(default_factory=ResponseCounts)
    drain_s: float | None = None  # sglang.input_audio.end sent -> drained received
    loop_lag: LoopLagStats = Field(default_factory=LoopLagStats)
    files: dict[str, str] = Field(default_factory=dict)  # name -> sha256
    extra: dict[str, Any] = Field(default_factory=dict)

    model_config = {"populate_by_name": True}

    @property
    def eligible(self) -> bool:
        return self.status == "ok" and self.verdict.status == "pass" and self.pacing.violations == 0
