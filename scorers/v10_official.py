"""The official Full-Duplex-Bench v1.0 takeover and latency rules, reimplemented clean-room
(``fdb-official-scoring.md`` §3.1-3.2; the official code is not vendored or run here).

- takeover(W), W the output.json chunks in file order: 0 for an empty transcript; otherwise 1
  iff the span e(W[-1]) - s(W[0]) is at least 1 s or there are more than 3 words. A null last
  end falls back to its start (the pause-handling guard; applied to every task here, where the
  official turn-taking and interruption scripts would crash).
- pause handling reads the whole transcript and never pause.json;
- latency (turn-taking: E = turn_taking.json[0].timestamp[0]; interruption: R =
  interrupt.json[0].timestamp[1]) = s(W[0]) - boundary clamped at 0, averaged over takeover
  samples only; no takeover gives null.
Times are the raw floats of the files (no microsecond rounding), as the official scripts use
them. Relevance (an LLM judge) and backchannel (VAD rules) are not computed: null.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from fdb.datasets.types import V10_ANNOTATION, V10_TASK
from fdb.errors import SampleError
from fdb.io import atomic_write_json
from fdb.provenance import current
from scorers.v10_tree import check_fresh, id_key, load_tree, read_sample_json, subset_key

OFFICIAL_SCHEMA = "fdb-v1.0-official-cleanroom-1"
OFFICIAL_LABEL = "official rules, clean-room reimplementation (not the official evaluator)"
TURN_DURATION_S = 1.0
TURN_WORDS = 3


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
    note: str | None = None


class OfficialSummary(BaseModel):
    schema_: str = Field(OFFICIAL_SCHEMA, alias="schema")
    label: Literal["official rules, clean-room reimplementation (not the official evaluator)"] = OFFICIAL_LABEL
    manifest_sha256: str
    asr_sha256: str
    subsets: dict[str, OfficialSubset]
    provenance: dict[str, object] = Field(default_factory=dict)

    model_config = {"populate_by_name": True}

    def dump(self) -> dict:
        return self.model_dump(mode="json", by_alias=True)


def chunk_times(sample_id: str, transcript: Any) -> list[tuple[float, float | None]]:
    """(start, end) of every output.json chunk in file order; a null start is an error."""
    out = []
    for i, chunk in enumerate(transcript.get("chunks") or []):
        start, end = chunk["timestamp"]
        if start is None:
            raise SampleError(sample_id, f"output.json chunk {i} has a null start")
        out.append((float(start), None if end is None else float(end)))
    return out


def official_takeover(words: Sequence[tuple[float, float | None]]) -> int:
    """§3.1: 1 iff the transcript spans >= 1 s or has more than 3 words; 0 when empty."""
    if not words:
        return 0
    last_start, last_end = words[-1]
    span = (last_start if last_end is None else last_end) - words[0][0]
    if span < TURN_DURATION_S and len(words) <= TURN_WORDS:
        return 0
    return 1


def official_latency(words: Sequence[tuple[float, float | None]], boundary: float) -> float:
    """§3.2: first chunk's start minus the boundary, negative values clamped to 0."""
    return max(words[0][0] - boundary, 0.0)


def _boundary(task: str, annotation: Any) -> float | None:
    if task == "turn_taking":
        return float(annotation[0]["timestamp"][0])
    if task == "user_interruption":
        return float(annotation[0]["timestamp"][1])
    return None


def summarize_subset(subset: str, selected: int, eligible: int,
                     samples: Sequence[tuple[list[tuple[float, float | None]], float | None]]) -> OfficialSubset:
    """Pure: takeover rate and mean takeover latency from (words, boundary) per sample."""
    task = V10_TASK[subset]
    base = {"subset": subset, "task": task, "selected": selected, "eligible": eligible}
    if task == "backchannel":
        return OfficialSubset(**base, evaluated=0, takeovers=None, takeover_rate=None, latency_s=None,
                              latency_n=None, note="backchannel takeover, frequency and JSD are not computed here")
    flags = [official_takeover(words) for words, _b in samples]
    lats = [official_latency(w, b) for (w, b), f in zip(samples, flags, strict=True) if f and b is not None]
    has_latency = task != "pause_handling"
    return OfficialSubset(
        **base, evaluated=len(samples), takeovers=sum(flags),
        takeover_rate=sum(flags) / len(flags) if flags else None,
        latency_s=(sum(lats) / len(lats) if lats else None) if has_latency else None,
        latency_n=len(lats) if has_latency else None,
    )


def score_official(tree: Path) -> OfficialSummary:
    """Official takeover / latency per subset over the eligible samples; writes official.json."""
    tree = Path(tree)
    inputs = load_tree(tree)
    groups: dict[str, list] = {}
    for sample in inputs.manifest.samples:
        groups.setdefault(sample.subset, []).append(sample)
    subsets = {}
    for subset in sorted(groups, key=subset_key):
        samples = sorted(groups[subset], key=lambda s: id_key(s.id))
        task = V10_TASK[subset]
        parsed = []
        for sample in (s for s in samples if s.eligible and task != "backchannel"):
            check_fresh(inputs, sample)
            folder = tree / sample.subset / sample.id
            words = chunk_times(sample.sample_id, read_sample_json(sample, folder, "output.json"))
            annotation = read_sample_json(sample, folder, V10_ANNOTATION[task]) if task != "pause_handling" else None
            parsed.append((words, _boundary(task, annotation)))
        subsets[subset] = summarize_subset(subset, len(samples), sum(s.eligible for s in samples), parsed)
    summary = OfficialSummary(manifest_sha256=inputs.manifest_sha256, asr_sha256=inputs.receipt_sha256,
                              subsets=subsets, provenance=current().model_dump(mode="json"))
    atomic_write_json(tree / "official.json", summary.dump())
    return summary
