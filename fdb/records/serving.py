"""Typed records of the duplex serving sweep (docs: "Serving metrics"): one ``ServingRow`` per
concurrency level of ``serving.json`` (``rows`` and ``repeat_rows``), its ``Capacity``, and the
file itself (``SweepReport``, schema ``fdb-serving-2``). Times in milliseconds; a value that
cannot be measured is None, never 0. ``scorers.serving`` computes the rows from the recorded
sessions; ``runs.sweep`` writes serving.json through ``SweepReport``, reports read it back."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from fdb.records import FileRecord

SERVING_SCHEMA = "fdb-serving-2"
DEFAULT_RESERVE_MS = 80.0
CLIENT_CPU_SATURATED = 0.9  # share of one core: the recorder's single event loop is saturated


class ServingRow(BaseModel):
    """One level of a sweep (docs: "Serving metrics"); times in milliseconds."""

    concurrency: int
    profile: str
    native: bool
    sessions: int
    mean_open: float | None = None
    sessions_failed: int = 0
    admission_denied: int = 0
    pacing_violations: int = 0
    client_behind: int = 0  # sessions whose recorder loop fell behind (load generator limit)
    client_limited_sessions: int = (
        0  # sessions with a pacing violation while the client loop lagged
    )
    client_cpu: float | None = (
        None  # the level's client process: CPU seconds / wall seconds (one core = 1)
    )
    client_limited: bool = False  # the load generator, not the server, broke the pacing
    server_max_sessions: int | None = None  # as the server reported it before the level
    repeats: int = 1
    units: int | None = None
    unit_misses: int | None = None
    unit_miss_rate: float | None = None
    unit_lag_p50_ms: float | None = None
    unit_lag_p95_ms: float | None = None
    replies: int = 0
    empty_replies: int = 0
    first_audio_p50_ms: float | None = None
    first_audio_p95_ms: float | None = None
    buffer_needed_p90_ms: float | None = None
    playback_reserve_ms: float = DEFAULT_RESERVE_MS
    underrun_replies: int | None = None
    rtf_p90: float | None = None
    meets_targets: bool = False
    missed_targets: list[str] = Field(default_factory=list)


class Capacity(BaseModel):
    """The highest level below the first that misses; ``at_least`` when every level meets."""

    sessions: int | None
    at_least: bool = False
    first_miss: int | None = None
    client_limited: bool = False  # the first miss is the load generator's, not the server's

    def line(self) -> str:
        if self.sessions is None and self.first_miss is None:
            return "Capacity: no level recorded"
        if self.client_limited:
            floor = f"at least {self.sessions} sessions" if self.sessions else "not measured"
            return (
                f"Capacity: {floor} (at level {self.first_miss} the load generator, not the "
                "server, fell behind its pacing: that level does not measure the server)"
            )
        if self.sessions is None:
            return (
                f"Capacity: below the lowest level recorded ({self.first_miss} sessions miss the "
                "targets)"
            )
        if self.at_least:
            return (
                f"Capacity: at least {self.sessions} sessions (every level meets the targets; "
                "record a higher one)"
            )
        return f"Capacity: {self.sessions} sessions ({self.first_miss} sessions miss the targets)"


class SweepCapacity(Capacity):
    """serving.json ``capacity``: the Capacity and its sentence (``line``, as Capacity.line() wrote
    it)."""

    sentence: str | None = Field(None, alias="line")

    model_config = {"populate_by_name": True}


class SweepReport(FileRecord):
    """serving.json. A sweep written by an older fdb lacks the fields marked None (client-limited
    levels and warnings before the --search sweeps, repeat rows, provenance and tables before
    the table objects, server before external servers were recorded)."""

    FIX = "rebuild the sweep report (python -m fdb sweep report), or pass another sweep"

    schema_: str = Field(SERVING_SCHEMA, alias="schema")
    playback_reserve_ms: float
    capacity: SweepCapacity
    client_limited_levels: list[int] | None = None
    warnings: list[str] | None = None
    server: dict[str, Any] | None = (
        None  # fdb.run_manifest.ServerReport as dumped; None: a bundled system
    )
    levels: dict[str, str]  # concurrency -> level directory
    rows: list[ServingRow]
    repeat_rows: dict[str, list[ServingRow]] | None = None  # concurrency -> each repeat's own row
    provenance: dict[str, Any] | None = None
    tables: list[dict[str, Any]] | None = None  # SERVING.md's tables (fdb.tables.Table.dump)

    model_config = {"populate_by_name": True}
