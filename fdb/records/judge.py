"""Typed records of the judge phase (docs/formats.md, "Judges"): the v1.5 behavior labels
(``judge-<name>/summary.json``, ``fdb-v1.5-behavior-1``), the semantic grades
(``semantic-<name>/summary.json``, ``fdb-v1.5-semantic-1``), the v1.0 interruption relevance
(``relevance.json``, ``fdb-v1.0-relevance-1``) and the repeat's ``judge.json`` (``fdb-judge-1``)
that holds the three. A label share is a count over judged pairs with its Wilson 95% interval;
null where nothing was judged, never 0. The judges package writes them; reports reads them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from fdb.datasets.types import INTERRUPTION
from fdb.records import FileRecord

BEHAVIOR_SCHEMA = "fdb-v1.5-behavior-1"
SEMANTIC_SCHEMA = "fdb-v1.5-semantic-1"
RELEVANCE_SCHEMA = "fdb-v1.0-relevance-1"
JUDGE_SCHEMA = "fdb-judge-1"
REJUDGE = "judge the repeat again: python -m fdb judge --run-name RUN --repeat N"
LABELS = ("C_RESPOND", "C_RESUME", "C_UNCERTAIN_HANDLING", "C_UNKNOWN")
SCOPE = "fdb semantic judge (fdb's own rubric, not part of the paper)"
PairOutcome = Literal[
    "valid",
    "invalid_label",
    "model_mismatch",
    "failed",
    "pending",
    "ineligible",
    "missing_transcript",
]
OUTCOMES: tuple[str, ...] = PairOutcome.__args__  # type: ignore[attr-defined]
SampleOutcome = Literal[
    "valid",
    "invalid_label",
    "model_mismatch",
    "failed",
    "pending",
    "ineligible",
    "missing_transcript",
    "no_takeover",
]


class Share(BaseModel):
    count: int
    share: float | None  # null when nothing was judged
    ci95: tuple[float, float] | None


# --- v1.5 behavior labels


class BehaviorSample(BaseModel):
    sample_id: str
    category: str
    outcome: PairOutcome
    label: str | None = None
    attempts: int = 0
    reason: str | None = None


class BehaviorCell(BaseModel):
    selected: int = 0
    eligible: int = 0
    outcomes: dict[str, int] = Field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    judged: int = 0  # valid labels: the denominator of the shares
    labels: dict[str, Share] = Field(default_factory=dict)


class BehaviorSummary(BaseModel):
    schema_: str = Field(BEHAVIOR_SCHEMA, alias="schema")
    status: Literal[
        "complete", "has_failures", "pending", "blocked", "not_run"
    ]  # not_run: no checkout
    message: str | None = None
    judge: dict[str, Any] | None = None
    params: dict[str, Any] | None = None
    source: dict[str, Any] | None = (
        None  # the prompt's checkout check: label and CheckoutCheck (None: not run)
    )
    denominator: str = (
        "judged pairs (valid labels); every selected pair is counted under its outcome"
    )
    interval: str = "Wilson 95%: dataset sampling only, not judge agreement or generation variance"
    categories: dict[str, BehaviorCell]
    all: BehaviorCell
    attempts: int = 0
    retries: int = 0
    samples: list[BehaviorSample]

    model_config = {"populate_by_name": True}


# --- v1.5 semantic grades


class AxisCell(BaseModel):
    selected: int
    accepted: int
    failed: int
    unresolved: int
    quality: float | None  # A / (A + F)
    coverage: float | None  # (A + F) / N


class SemanticSample(BaseModel):
    sample_id: str
    category: str
    # valid / invalid_label / model_mismatch / failed / pending / ineligible / missing_transcript
    outcome: str
    axes: dict[str, str]  # axis (and joint) -> accept / fail / unresolved
    reason: str | None = None


class SemanticSummary(BaseModel):
    schema_: str = Field(SEMANTIC_SCHEMA, alias="schema")
    scope: str = SCOPE
    status: Literal["complete", "has_failures", "control_failed", "pending", "not_run"]
    message: str | None = None
    judge: dict[str, Any] | None = None
    params: dict[str, Any] | None = None
    controls: dict[str, Any] | None = None
    denominator: str = (
        "N = every selected pair; ineligible, missing and failed pairs count as unresolved"
    )
    categories: dict[str, dict[str, AxisCell]]
    all: dict[str, AxisCell]
    samples: list[SemanticSample]

    model_config = {"populate_by_name": True}


# --- v1.0 interruption relevance


class RelevanceSample(BaseModel):
    sample_id: str
    outcome: SampleOutcome
    takeover: int | None = None
    rating: int | None = None
    attempts: int = 0
    reason: str | None = None


class RelevanceSummary(BaseModel):
    schema_: str = Field(RELEVANCE_SCHEMA, alias="schema")
    subset: str = INTERRUPTION
    status: Literal["complete", "failed", "incomplete", "pending", "blocked"]
    message: str | None = None
    rubric: dict[str, Any] | None = None
    judge: dict[str, Any] | None = None
    params: dict[str, Any] | None = None
    selected: int
    eligible: int
    evaluated: int  # eligible with both files; the takeover denominator
    missing_transcript: int
    takeovers: int  # each sample once, whatever its retries
    takeover_rate: float | None
    rated: int
    relevance: float | None  # mean rating over takeover samples; null unless every one is rated
    requests: int
    # extra requests after the first, summed; the official loop would inflate takeover by this
    retries: int
    failed_samples: list[str]
    samples: list[RelevanceSample]

    model_config = {"populate_by_name": True}


# --- judge.json


class JudgeSummary(FileRecord):
    """A repeat's ``judge.json``."""

    FIX = REJUDGE

    schema_: str = Field(JUDGE_SCHEMA, alias="schema")
    repeat_dir: str
    judge: dict[str, Any]
    dirs: dict[
        str, str | None
    ]  # task -> output directory relative to the repeat (None: nothing written)
    behavior: BehaviorSummary | None  # None: v1.5 not in this repeat
    semantic: SemanticSummary | None
    relevance: RelevanceSummary | None  # None: no v1.0 interruption samples
    # judge.json holds no timestamps: the same inputs give the same bytes (the ledgers log times)
    ok: bool
    provenance: dict[str, Any] = Field(default_factory=dict)

    model_config = {"populate_by_name": True}

    def statuses(self) -> dict[str, str | None]:
        return {
            name: getattr(self, name).status if getattr(self, name) else None
            for name in ("behavior", "semantic", "relevance")
        }
