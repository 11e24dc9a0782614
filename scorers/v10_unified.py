"""Unified v1.0 metrics over a transcribed reference tree (spec "Full-Duplex-Bench v1.0 unified
metrics", definitions ``fdb-v1.0-unified-4`` with ``unified-v10-rulings.md``).

``score_unified`` reads manifest.json, asr.json, output.json and the annotations (and for
interruption runs Silero VAD on the full output.wav: threshold 0.5, min speech 250 ms, min
silence 100 ms, no padding), then writes ``unified.json`` and ``unified-samples.jsonl``. The
metric math lives in pure functions (``score_subset`` and the per-task modules) so it can be
tested on parsed inputs; the same inputs always give the same bytes.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import asdict
from pathlib import Path

import fdb.models.vad  # the module, so that tests can stand in for SileroVad
from fdb.datasets.types import V10_ANNOTATION, V10_TASK
from fdb.errors import FdbError
from fdb.io import atomic_write_json, atomic_write_jsonl
from fdb.models.vad import VadSettings
from fdb.provenance import current
from fdb.records import ExportSample
from fdb.records.v10 import (
    IneligibleRow,
    SampleRow,
    SubsetResult,
    UnifiedInputs,
    UnifiedResult,
    VadInfo,
)
from scorers import v10_inputs as parse
from scorers.segmenter import SegmentMemo, SpeechSegmenter, prefetch_blocks
from scorers.v10_common import counts
from scorers.v10_inputs import InterruptSample, PauseSample, TurnSample
from scorers.v10_interrupt import interrupt_metrics, score_interrupt_sample
from scorers.v10_pause import pause_metrics, score_pause_sample
from scorers.v10_tree import (
    TreeInputs,
    check_fresh,
    id_key,
    load_tree,
    read_sample_json,
    read_window,
    subset_key,
    window_us,
)
from scorers.v10_turn import score_turn_sample, turn_metrics

UNIFIED_VAD_SETTINGS = VadSettings(
    threshold=0.5, min_speech_duration_ms=250, min_silence_duration_ms=100, speech_pad_ms=0
)
BACKCHANNEL_NOTE = "no unified metric; the official backchannel frequency and JSD are the reference"
Parsed = PauseSample | TurnSample | InterruptSample


def load_sample(inputs: TreeInputs, sample: ExportSample, vad: SpeechSegmenter | None) -> Parsed:
    """Parse and check one eligible sample's transcript, annotation (and VAD segments)."""
    check_fresh(inputs, sample)
    sid, folder, task = (
        sample.sample_id,
        inputs.root / sample.subset / sample.id,
        V10_TASK[sample.subset],
    )
    T = window_us(sample)
    words = parse.parse_words(sid, read_sample_json(sample, folder, "output.json"), T, strict=True)
    annotation = read_sample_json(sample, folder, V10_ANNOTATION[task])
    if task == "pause_handling":
        return PauseSample(sid, T, parse.parse_pauses(sid, annotation, T), words)
    if task == "turn_taking":
        return TurnSample(sid, T, parse.parse_turn_end(sid, annotation, T), words)
    S, R = parse.parse_interrupt(sid, annotation, T)
    parse.check_words_after(sid, words, R)
    if vad is None:
        raise FdbError("interruption scoring needs a VAD")
    raw = vad.segments(read_window(sample, folder), UNIFIED_VAD_SETTINGS)
    return InterruptSample(sid, T, S, R, words, parse.parse_segments(sid, raw, T))


def score_subset(
    subset: str,
    samples: Sequence[ExportSample],
    parsed: dict[str, Parsed],
    declared: int | None = None,
) -> tuple[SubsetResult, list[SampleRow]]:
    """Pure: one subset's result and rows from its selected samples and their parsed inputs.

    ``parsed`` holds every eligible sample; rows come out ordered by numeric id.
    """
    task = V10_TASK[subset]
    ordered = sorted(samples, key=lambda s: id_key(s.id))
    scorer = {
        "pause_handling": score_pause_sample,
        "turn_taking": score_turn_sample,
        "user_interruption": score_interrupt_sample,
    }[task]
    rows: list[SampleRow] = []
    scored = []
    for sample in ordered:
        if not sample.eligible:
            rows.append(
                IneligibleRow(
                    sample_id=sample.sample_id,
                    subset=subset,
                    task=task,
                    reasons=list(sample.reasons),
                )
            )
            continue
        row = scorer(parsed[sample.sample_id], subset)
        rows.append(row)
        scored.append(row)
    tally = counts(ordered, declared)
    aggregate = {
        "pause_handling": pause_metrics,
        "turn_taking": turn_metrics,
        "user_interruption": interrupt_metrics,
    }[task]
    metrics = aggregate(scored, tally.selected)
    if task == "user_interruption":
        tally.exercised = metrics.exercised_rate.count
        tally.not_exercised = tally.eligible - tally.exercised
    coverage = tally.eligible / tally.selected if tally.selected else None
    return SubsetResult(
        subset=subset, task=task, counts=tally, coverage=coverage, metrics=metrics
    ), rows


def vad_info(vad: SpeechSegmenter | None) -> VadInfo | None:
    """The VAD identity and exact settings recorded at the top of unified.json."""
    if vad is None:
        return None
    ident = vad.identity
    return VadInfo(
        name=ident.name,
        version=ident.version,
        model_sha256=ident.checkpoint_sha256,
        settings={**asdict(UNIFIED_VAD_SETTINGS), "sampling_rate": 16000, "return_seconds": False},
    )


def _group(inputs: TreeInputs) -> dict[str, list[ExportSample]]:
    groups: dict[str, list[ExportSample]] = {}
    for sample in inputs.manifest.samples:
        if sample.subset not in V10_TASK:
            raise FdbError(
                f"manifest.json lists unknown v1.0 subset {sample.subset!r} ({sample.sample_id})"
            )
        groups.setdefault(sample.subset, []).append(sample)
    return {k: groups[k] for k in sorted(groups, key=subset_key)}


def _needs_vad(groups: dict[str, list[ExportSample]]) -> bool:
    return any(
        V10_TASK[k] == "user_interruption" and any(s.eligible for s in v) for k, v in groups.items()
    )


def _vad_blocks(
    inputs: TreeInputs, subset: str, eligible: list[ExportSample], vad: SegmentMemo | None
) -> Iterator[list[ExportSample]]:
    """The eligible samples in blocks; for interruption, each block's VAD is computed batched."""
    if vad is None or V10_TASK[subset] != "user_interruption":
        yield eligible
        return
    yield from prefetch_blocks(
        vad,
        eligible,
        lambda s: [read_window(s, inputs.root / s.subset / s.id)],
        UNIFIED_VAD_SETTINGS,
    )


def score_unified(
    tree: Path, vad: SpeechSegmenter | None = None, declared: dict[str, int] | None = None
) -> UnifiedResult:
    """Score a v1.0 reference tree and write unified.json and unified-samples.jsonl into it.

    ``vad`` defaults to Silero VAD (loaded only when an eligible interruption sample exists);
    ``declared`` maps subset to its size in the dataset; a subset it does not name (or no
    ``declared`` at all) gets a null ``declared`` count, never the selected count.
    """
    tree = Path(tree)
    inputs = load_tree(tree)
    groups = _group(inputs)
    if vad is None and _needs_vad(groups):
        vad = fdb.models.vad.SileroVad()
    vad = SegmentMemo(vad) if vad is not None else None
    subsets, rows, not_scored = {}, [], {}
    for subset, samples in groups.items():
        if V10_TASK[subset] == "backchannel":
            not_scored[subset] = BACKCHANNEL_NOTE
            continue
        parsed = {}
        for block in _vad_blocks(inputs, subset, [s for s in samples if s.eligible], vad):
            parsed.update({s.sample_id: load_sample(inputs, s, vad) for s in block})
        result, subset_rows = score_subset(subset, samples, parsed, (declared or {}).get(subset))
        subsets[subset] = result
        rows.extend(subset_rows)
    unified = UnifiedResult(
        inputs=UnifiedInputs(
            manifest_sha256=inputs.manifest_sha256,
            asr_sha256=inputs.receipt_sha256,
            asr_backend=inputs.receipt.backend,
        ),
        vad=vad_info(vad),
        subsets=subsets,
        not_scored=not_scored,
        provenance=current().model_dump(mode="json"),
    )
    atomic_write_json(tree / "unified.json", unified.dump())
    atomic_write_jsonl(tree / "unified-samples.jsonl", rows)
    return unified
