"""Typed records of the v1.5 timing outputs: ``intervals.jsonl`` rows and ``summary.json``
(schema ``fdb-v1.5-timing-1``). Seconds; null where a set is empty, never 0."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from fdb.records import FileRecord
from fdb.records.judge import JudgeSummary

TIMING_SCHEMA = "fdb-v1.5-timing-1"
TREE_SCORES_SCHEMA = "fdb-v1.5-tree-scores-1"
Interval = tuple[float, float]
ANCHORED_LABEL = "fdb event-anchored, not official"
RESCORE = (
    "rescore the v1.5 timing: python -m fdb asr --run-name RUN --repeat N (or score v15 timing)"
)


class SessionIntervals(BaseModel):
    """One session (pair x variant): VAD spans, merged spans, intervals and latencies."""

    sample_id: str
    category: str
    id: str
    variant: Literal["overlap", "clean"]
    status: Literal["ok", "failed", "ineligible"]
    error: str | None = None
    reasons: list[str] = Field(default_factory=list)
    input_sha256: str | None = None
    output_sha256: str | None = None
    user_vad: list[Interval] = Field(default_factory=list)
    model_vad: list[Interval] = Field(default_factory=list)
    user_spans: list[Interval] = Field(default_factory=list)
    model_spans: list[Interval] = Field(default_factory=list)
    stop_intervals: list[Interval] = Field(default_factory=list)
    response_intervals: list[Interval] = Field(default_factory=list)
    stop_latencies_s: list[float] = Field(default_factory=list)
    response_latencies_s: list[float] = Field(default_factory=list)
    # fdb event-anchored, not official (scorers/v15_intervals.py): overlap variant only
    overlap_span: Interval | None = None  # metadata.json "timestamps"
    event_span: Interval | None = None
    anchored_stop_interval: Interval | None = None
    anchored_response_interval: Interval | None = None
    anchored_stop_latency_s: float | None = None
    anchored_response_latency_s: float | None = None

    @property
    def timed(self) -> bool:
        return self.status == "ok" and bool(self.stop_intervals or self.response_intervals)


class LatencyStats(BaseModel):
    """Pooled mean and median of a latency over sessions, with sample-cluster bootstrap 95%
    intervals (2000 resamples of pairs, default_rng(0); ceil(0.025 B)-th / ceil(0.975 B)-th)."""

    intervals: int
    sessions: int
    mean_s: float | None
    median_s: float | None
    mean_bootstrap95: Interval | None
    median_bootstrap95: Interval | None
    valid_resamples: int


class CategoryTiming(BaseModel):
    category: str
    pairs: int
    eligible_pairs: int
    timed_overlap_sessions: int
    timed_clean_sessions: int
    failed_sessions: int
    stop_latency: LatencyStats
    response_latency: LatencyStats
    clean_stop_latency: LatencyStats
    clean_response_latency: LatencyStats
    # "fdb event-anchored, not official": one interval per overlap session at most
    anchored_label: str = ANCHORED_LABEL
    anchored_event_sessions: int = 0
    anchored_stop_latency: LatencyStats | None = None
    anchored_response_latency: LatencyStats | None = None


class TimingVad(BaseModel):
    name: str
    version: str | None
    model_sha256: str | None
    settings: dict[str, object]


class TimingSummary(FileRecord):
    """A v1.5 timing ``summary.json``."""

    FIX = RESCORE

    schema_: str = Field(TIMING_SCHEMA, alias="schema")
    definitions: dict[str, object]
    manifest_sha256: str
    vad: TimingVad
    categories: dict[str, CategoryTiming]
    provenance: dict[str, object] = Field(default_factory=dict)

    model_config = {"populate_by_name": True}


# ``python -m fdb score v15 summarize``: exported trees scored outside the run layout.


class Population(BaseModel):
    declared: int | None  # the dataset's size of the category; None when the dataset is not known
    selected: int
    eligible: int
    ineligible: int


class AsrCoverage(BaseModel):
    backend: str | None
    pairs: dict[str, int]  # pair status (ok / failed / skipped) -> count, over the selected pairs
    note: str | None = None


class CohortScores(BaseModel):
    engine: str
    tree: str
    manifest_sha256: str
    dataset_revision: str | None
    trace_format: str | None
    only: list[str] | None
    declared_note: str | None
    populations: dict[str, Population]  # "all" first, then per category
    verdicts: dict[str, int]  # protocol verdict -> selected pairs
    ineligible_reasons: dict[str, int]
    asr: AsrCoverage | None  # None: the tree has no asr.json
    timing_coverage: dict[
        str, int
    ]  # timed overlap / clean sessions, failed sessions (all categories)
    not_evaluated: dict[
        str, str
    ]  # "category/id" -> why it gives no timing (ineligible, failed session)
    timing: TimingSummary  # timing/summary.json
    judge: JudgeSummary | None  # judge.json; None: not judged
    inputs: dict[str, str]  # file -> sha256


class TreeScores(FileRecord):
    """``OUT/summary.json`` of ``score v15 summarize``: per cohort (an exported tree scored
    outside the run layout) its populations, coverage, timing summary and judge summary."""

    FIX = "rerun `python -m fdb score v15 summarize`, whose --out directory holds it"

    schema_: Literal["fdb-v1.5-tree-scores-1"] = Field(alias="schema")  # required when read
    cohorts: dict[str, CohortScores]
    provenance: dict[str, Any] = Field(default_factory=dict)

    model_config = {"populate_by_name": True}
