"""Typed records of ``unified.json`` and ``unified-samples.jsonl`` (schema fdb-v1.0-unified-4).

Seconds everywhere. A latency quantile that falls on a sample without a response (or a stop
time on a segment that runs to T) is the string ``"not_reached"``; a quantity that cannot be
computed (no samples, zero denominator) is ``null``, never 0.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationError

from fdb.errors import FdbError
from fdb.records import FileRecord

UNIFIED_SCHEMA = "fdb-v1.0-unified-4"
NOT_REACHED = "not_reached"
RESCORE_FIX = "rescore the tree: python -m fdb score v10 --tree DIR"

Better = Literal["lower", "higher", "context"]
Quantile = float | Literal["not_reached"]
Task = Literal["pause_handling", "turn_taking", "user_interruption"]


class Share(BaseModel):
    """A share of samples: count / n with a 95% Wilson interval and the selected bounds
    [count / selected, (count + unknown) / selected]."""

    value: float | None
    count: int
    n: int
    wilson95: tuple[float, float] | None
    selected_bounds: tuple[float, float] | None
    unknown: int
    better: Better


class PooledRatio(BaseModel):
    """A pooled ratio sum(numerator) / sum(denominator) with a 95% percentile bootstrap
    interval over resampled samples (2000 resamples, seed 0)."""

    value: float | None
    numerator: float
    denominator: float
    bootstrap95: tuple[float, float] | None
    valid_resamples: int
    better: Better


class LatencyQuantiles(BaseModel):
    """Median (with a bootstrap interval) and p90 of a latency where a sample without the
    event counts as infinite; ceil(qN)-th smallest, no interpolation."""

    n: int
    observed: int
    median_s: Quantile | None
    median_bootstrap95: tuple[Quantile, Quantile] | None
    valid_resamples: int
    p90_s: Quantile | None
    better: Better = "lower"


class Counts(BaseModel):
    declared: int | None  # the dataset's subset size; null when the dataset is not known
    selected: int
    eligible: int
    ineligible: int
    ineligible_reasons: dict[str, int] = Field(default_factory=dict)
    exercised: int | None = None
    not_exercised: int | None = None


class PauseMetrics(BaseModel):
    task: Literal["pause_handling"] = "pause_handling"
    pause_intrusion_rate: Share
    pause_intrusion_per_pause: PooledRatio
    intrusion_s_per_pause_s: PooledRatio
    inside_pause_onset_rate: Share
    pre_pause_speech_rate: Share
    carry_in_rate: Share
    any_speech_rate: Share
    pauses: int
    pause_s: float


class TurnMetrics(BaseModel):
    task: Literal["turn_taking"] = "turn_taking"
    early_start_rate: Share
    response_rate_1s: Share
    response_rate_2s: Share
    response_rate_5s: Share
    no_response_rate: Share
    response_latency_s: LatencyQuantiles
    min_observable_s: float | None


class InterruptMetrics(BaseModel):
    task: Literal["user_interruption"] = "user_interruption"
    exercised_rate: Share
    speaking_at_end_rate: Share
    response_rate_1s: Share
    response_rate_2s: Share
    response_rate_5s: Share
    no_response_rate: Share
    response_latency_s: LatencyQuantiles
    stop_latency_s: LatencyQuantiles
    speech_s_per_interruption_s: PooledRatio
    restart_rate: Share
    min_observable_s: float | None


class SubsetResult(BaseModel):
    subset: str
    task: Task
    counts: Counts
    coverage: float | None
    metrics: PauseMetrics | TurnMetrics | InterruptMetrics = Field(discriminator="task")


class VadInfo(BaseModel):
    name: str
    version: str | None
    model_sha256: str | None
    settings: dict[str, object]


class UnifiedInputs(BaseModel):
    manifest_sha256: str
    asr_sha256: str
    asr_backend: dict[str, object]


class UnifiedResult(FileRecord):
    """A ``unified.json`` of this schema."""

    FIX = RESCORE_FIX

    schema_: str = Field(UNIFIED_SCHEMA, alias="schema")
    definitions: str = UNIFIED_SCHEMA
    inputs: UnifiedInputs
    vad: VadInfo | None
    subsets: dict[str, SubsetResult]
    not_scored: dict[str, str] = Field(default_factory=dict)
    provenance: dict[str, object] = Field(default_factory=dict)

    model_config = {"populate_by_name": True}


class StampInputs(BaseModel):
    manifest_sha256: str | None = None
    asr_sha256: str | None = None


class UnifiedStamp(FileRecord):
    """What a ``unified.json`` of any version names about itself: its schema, definitions, VAD
    and input hashes. Read before the ``UnifiedResult``, so a file of an older schema (which
    that record does not read) or one computed from other inputs is told apart from a damaged
    one, and a comparison of runs still names the definitions an older file was scored under."""

    FIX = RESCORE_FIX

    schema_: str | None = Field(None, alias="schema")
    definitions: str | None = None
    vad: dict[str, object] | None = None
    inputs: StampInputs | None = None

    model_config = {"populate_by_name": True}

    def stale(self, manifest_sha256: str, asr_sha256: str) -> str | None:
        """The input (``manifest.json`` or ``asr.json``) whose hash differs from the one this
        file was computed from, or None when both match."""
        inputs = self.inputs or StampInputs()
        if inputs.manifest_sha256 != manifest_sha256:
            return "manifest.json"
        if inputs.asr_sha256 != asr_sha256:
            return "asr.json"
        return None


class RowBase(BaseModel):
    sample_id: str
    subset: str
    task: Task
    eligible: bool
    reasons: list[str] = Field(default_factory=list)


class IneligibleRow(RowBase):
    eligible: bool = False


class PauseRow(RowBase):
    T_s: float
    words: int
    first_pause_s: float
    pauses: int
    pause_s: float
    pause_intrusion: bool
    inside_pause_onset: bool
    pre_pause_speech: bool
    carry_in: bool
    any_speech: bool
    intrusion_words: int
    intruded_pauses: int
    intrusion_s: float


class TurnRow(RowBase):
    T_s: float
    E_s: float
    words: int
    first_word_s: float | None
    outcome: Literal["early_start", "response", "no_response"]
    latency_s: float | None
    observable_s: float


class InterruptRow(RowBase):
    T_s: float
    S_s: float
    R_s: float
    words: int
    first_word_s: float | None
    vad_segments: list[tuple[float, float]]
    speech_at_onset: bool
    speech_at_end: bool
    speech_before_onset: bool
    outcome: Literal["not_exercised", "speaking_at_end", "response", "no_response"]
    latency_s: float | None
    stop_s: Quantile | None
    speech_in_interruption_s: float
    interruption_s: float
    restarts: int
    observable_s: float


SampleRow = IneligibleRow | PauseRow | TurnRow | InterruptRow
ROW_BY_TASK: dict[str, type[RowBase]] = {
    "pause_handling": PauseRow,
    "turn_taking": TurnRow,
    "user_interruption": InterruptRow,
}


def sample_row(raw: dict, fix: str = RESCORE_FIX) -> SampleRow:
    """One line of unified-samples.jsonl as its row: an ineligible sample's by ``eligible``, the
    others' by ``task``; an unknown task is an error naming the sample (``fix`` says what to do)."""
    model = ROW_BY_TASK.get(raw.get("task")) if raw.get("eligible") else IneligibleRow
    if model is None:
        raise FdbError(
            f"unified-samples.jsonl row {raw.get('sample_id')!r} has the unknown task "
            f"{raw.get('task')!r}",
            fix,
        )
    return model.model_validate(raw)


def read_sample_rows(path: Path, fix: str = RESCORE_FIX) -> list[SampleRow]:
    """The rows of a unified-samples.jsonl, in file order; a line that is not a row is an error
    naming the file."""
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    try:
        return [sample_row(json.loads(line), fix) for line in lines]
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise FdbError(f"{path}: {where}: {first['msg']}", fix) from exc
    except ValueError as exc:
        raise FdbError(f"{path} is not valid JSON lines ({exc})", fix) from exc
