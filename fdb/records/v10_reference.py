"""Typed records of the v1.0 reference columns next to the unified metrics, and their reader:
``official.json`` (``fdb-v1.0-official-cleanroom-2``: the official rules, clean-room, with the
backchannel numbers of ``scorers.v10_backchannel``) and ``evaluator.json``
(``fdb-v1.0-evaluator-2``: the original evaluator run from the user's checkout). Each is shown
only when it was computed from the same manifest.json and asr.json as the unified numbers (spec
"Run": if either hash differs, the column is left out and a line says which input changed):
``load_reference`` reads them so. ``scorers.v10_official`` and ``scorers.v10_evaluator`` write
them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from fdb.io import Record, read_json, sha256_file
from fdb.official_source import ICC_GT, PINNED_FILES, PINNED_REVISION, CheckoutCheck
from fdb.records import FileRecord
from fdb.records.v10 import RESCORE_FIX

OFFICIAL_SCHEMA = "fdb-v1.0-official-cleanroom-2"
OFFICIAL_LABEL = "official rules, clean-room reimplementation (not the official evaluator)"
EVALUATOR_SCHEMA = "fdb-v1.0-evaluator-2"  # -2: checkout_check (accepted revision, differences)
EVALUATOR_LABEL = "original Full-Duplex-Bench evaluator, run unchanged from the user's checkout"
# official.json's field -> the [Result] labels evaluate.py
# prints for it (the first one present counts)
EVALUATOR_METRICS = {
    "takeover_rate": ("Average take turn", "TOR mean"),
    "latency_s": ("Average latency",),
    "backchannel_frequency": ("Frequency mean",),
    "backchannel_jsd": ("JSD mean",),
}
ICC_GT_SHA256 = PINNED_FILES[ICC_GT]  # the one pin table (fdb.official_source)

BackchannelRule = Literal["since-2026-02-22", "before-2026-02-22"]
AudioRate = Literal["assume-16k", "resample"]
Segment = tuple[float, float]


# --- official.json


class IccInfo(BaseModel):
    path: str
    sha256: str
    pinned_sha256: str = ICC_GT_SHA256
    matches_pin: bool


class BackchannelRow(BaseModel):
    sample_id: str
    duration_s: float
    rate: int
    segments: list[Segment]
    tor: int
    tor_carried_over: bool = False
    predictions: list[Segment]
    frequency: float
    jsd: float | None


class BackchannelResult(BaseModel):
    """Official backchannel numbers of a subset: mean and population std over samples."""

    rule: BackchannelRule
    audio_rate: AudioRate
    n: int
    tor_mean: float | None
    tor_std: float | None
    frequency_mean: float | None
    frequency_std: float | None
    jsd_mean: float | None
    jsd_std: float | None
    without_backchannel: int
    icc_gt: IccInfo | None
    note: str | None = None
    samples: list[BackchannelRow] = Field(default_factory=list)


class OfficialSubset(BaseModel):
    subset: str
    task: str
    selected: int
    eligible: int
    evaluated: int
    takeovers: int | None
    takeover_rate: float | None
    latency_s: float | None
    latency_n: int | None
    relevance: float | None = None
    backchannel_frequency: float | None = None
    backchannel_jsd: float | None = None
    backchannel: BackchannelResult | None = None
    note: str | None = None
    not_evaluated: dict[str, str] = Field(
        default_factory=dict
    )  # eligible sample id -> why it is left out


class VadRecord(BaseModel):
    name: str
    version: str | None
    model_sha256: str | None
    settings: dict[str, object]


class OfficialRules(BaseModel):
    """The rules official.json was computed with (scorers.v10_official, scorers.v10_backchannel)."""

    takeover: str = "span e(W[-1]) - s(W[0]) >= 1 s or more than 3 words (null last end: its start)"
    latency: str = "s(W[0]) - boundary, clamped at 0, mean over takeover samples"
    backchannel_rule: BackchannelRule = "since-2026-02-22"
    backchannel_audio_rate: AudioRate = "assume-16k"
    backchannel_vad: VadRecord | None = None
    icc_gt: IccInfo | None = None


class OfficialSummary(FileRecord):
    """An ``official.json``."""

    FIX = RESCORE_FIX

    schema_: str = Field(OFFICIAL_SCHEMA, alias="schema")
    label: Literal["official rules, clean-room reimplementation (not the official evaluator)"] = (
        OFFICIAL_LABEL
    )
    manifest_sha256: str
    asr_sha256: str
    rules: OfficialRules = Field(default_factory=OfficialRules)
    subsets: dict[str, OfficialSubset]
    provenance: dict[str, object] = Field(default_factory=dict)

    model_config = {"populate_by_name": True}


# --- evaluator.json


class EvaluatorSubset(BaseModel):
    subset: str
    task: str
    selected: int
    eligible: int
    evaluated: int
    status: Literal["ok", "failed", "not_run"]
    result: dict[str, float | None] = Field(default_factory=dict)
    log: str | None = None
    note: str | None = None


class EvaluatorSummary(Record):
    schema_: str = Field(EVALUATOR_SCHEMA, alias="schema")
    label: str = EVALUATOR_LABEL
    checkout: str
    pinned_revision: str = PINNED_REVISION
    checkout_revision: str | None
    files: dict[str, str]
    python: str
    manifest_sha256: str
    asr_sha256: str
    subsets: dict[str, EvaluatorSubset]
    checkout_check: CheckoutCheck | None = (
        None  # None in -1 files (written before revisions could be accepted)
    )
    provenance: dict[str, object] = Field(default_factory=dict)

    model_config = {"populate_by_name": True}

    def revision_label(self) -> str:
        """The revision the evaluator ran at, as RESULTS.md and `score v10` show it."""
        if self.checkout_check is not None:
            return self.checkout_check.label()
        return f"Full-Duplex-Bench {self.pinned_revision[:7]} (pinned)"


def evaluator_metric(result: dict[str, float | None], key: str) -> float | None:
    """The evaluator's number for official.json's field ``key`` (None when it printed none)."""
    return next((result[label] for label in EVALUATOR_METRICS[key] if label in result), None)


# --- the reader


@dataclass
class ReferenceColumns:
    official: OfficialSummary | None = None
    evaluator: EvaluatorSummary | None = None
    notes: list[str] = field(default_factory=list)


def _changed(
    name: str, doc_manifest: str, doc_asr: str, manifest_sha: str, asr_sha: str
) -> str | None:
    changed = [
        what
        for what, a, b in (
            ("manifest.json", doc_manifest, manifest_sha),
            ("asr.json", doc_asr, asr_sha),
        )
        if a != b
    ]
    if not changed:
        return None
    return (
        f"{name} left out: {' and '.join(changed)} changed since it was written (rerun it on this "
        "tree)"
    )


def load_reference(tree: Path, manifest_sha: str, asr_sha: str) -> ReferenceColumns:
    """The reference files of ``tree`` that match the given input hashes, and notes for the rest."""
    columns = ReferenceColumns()
    for name, model, attr in (
        ("official.json", OfficialSummary, "official"),
        ("evaluator.json", EvaluatorSummary, "evaluator"),
    ):
        path = Path(tree) / name
        if not path.exists():
            continue
        try:
            doc = model.model_validate(read_json(path))
        except ValueError as exc:
            columns.notes.append(f"{name} left out: it does not parse ({str(exc).splitlines()[0]})")
            continue
        note = _changed(name, doc.manifest_sha256, doc.asr_sha256, manifest_sha, asr_sha)
        if note:
            columns.notes.append(note)
        else:
            setattr(columns, attr, doc)
    return columns


def current_reference(tree: Path) -> ReferenceColumns | None:
    """``load_reference`` against the tree's current manifest.json and asr.json (None when
    either is missing)."""
    tree = Path(tree)
    if not all((tree / name).exists() for name in ("manifest.json", "asr.json")):
        return None
    return load_reference(tree, sha256_file(tree / "manifest.json"), sha256_file(tree / "asr.json"))
