"""The official Full-Duplex-Bench v1.0 takeover and latency rules, reimplemented clean-room
(``fdb-official-scoring.md`` §3.1-3.2; the official code is not vendored or run here).

- takeover(W), W the output.json chunks in file order: ``fdb.takeover.official_takeover`` (0 for
  an empty transcript; otherwise 1 iff the span e(W[-1]) - s(W[0]) is at least 1 s or there are
  more than 3 words; a null last end falls back to its start, the pause-handling guard, applied
  to every task here, where the official turn-taking and interruption scripts would crash).
- pause handling reads the whole transcript and never pause.json;
- latency (turn-taking: E = turn_taking.json[0].timestamp[0]; interruption: R =
  interrupt.json[0].timestamp[1]) = s(W[0]) - boundary clamped at 0, averaged over takeover
  samples only; no takeover gives null.
- interruption input is the transcript cut at R (§3.1: "the ASR of the output cropped at the
  interrupt end"). A sample whose transcript has a word starting before R (microsecond-rounded,
  as the unified loader checks it) is not an official input: it is left out of ``evaluated`` and
  named with its problem in ``not_evaluated`` and the note; the other samples are scored.
Times are the raw floats of the files (no microsecond rounding), as the official scripts use
them. Backchannel TOR, frequency and JSD follow ``scorers.v10_backchannel`` (rule variants in
``BackchannelOptions``, recorded under ``rules``; the JSD needs the ICC ground truth, else it is
null with a note). Relevance (an LLM judge) is not computed here: null.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

import fdb.models.vad  # the module, so that tests can stand in for SileroVad
from fdb.datasets.types import V10_ANNOTATION, V10_TASK
from fdb.errors import SampleError
from fdb.io import atomic_write_json
from fdb.provenance import current
from fdb.records.v10_reference import (
    AudioRate,
    BackchannelResult,
    IccInfo,
    OfficialRules,
    OfficialSubset,
    OfficialSummary,
    VadRecord,
)
from fdb.takeover import official_takeover
from scorers import v10_backchannel as bc
from scorers.segmenter import SegmentMemo, SpeechSegmenter, prefetch_blocks
from scorers.times import to_us
from scorers.v10_inputs import WordSpan, check_words_after, transcript_times
from scorers.v10_tree import (
    TreeInputs,
    check_fresh,
    id_key,
    load_tree,
    read_native_window,
    read_sample_json,
    subset_key,
)


def chunk_times(
    sample_id: str, transcript: Any, raw: bool = False
) -> list[tuple[float | None, float | None]]:
    """(start, end) of every output.json chunk in file order, checked by
    ``scorers.v10_inputs.transcript_times`` (numbers, finite, non-negative, end >= start, starts
    in time order: the first chunk is the first word). A null start is an error unless ``raw``
    (the backchannel rule skips such a word itself)."""
    return transcript_times(sample_id, transcript, allow_null_start=raw)


def official_latency(words: Sequence[tuple[float, float | None]], boundary: float) -> float:
    """§3.2: first chunk's start minus the boundary, negative values clamped to 0."""
    return max(words[0][0] - boundary, 0.0)


def _boundary(sample_id: str, task: str, annotation: Any) -> float | None:
    """E (turn taking) or R (interruption) from the annotation; malformed is a SampleError."""
    if task not in ("turn_taking", "user_interruption"):
        return None
    name = V10_ANNOTATION[task]
    try:
        value = annotation[0]["timestamp"][0 if task == "turn_taking" else 1]
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise TypeError(f"{value!r} is not a finite number")
    except (KeyError, IndexError, TypeError, OverflowError) as exc:
        raise SampleError(
            sample_id,
            f"{name} has no numeric [0]['timestamp'] ({exc})",
            "re-export the tree from the dataset's annotation",
        ) from exc
    return float(value)


def summarize_subset(
    subset: str,
    selected: int,
    eligible: int,
    samples: Sequence[tuple[list[tuple[float, float | None]], float | None]],
    not_evaluated: dict[str, str] | None = None,
) -> OfficialSubset:
    """Pure: takeover rate and mean takeover latency from (words, boundary) per evaluated sample;
    ``not_evaluated`` names the eligible samples left out, with the reason."""
    task = V10_TASK[subset]
    left_out = dict(not_evaluated or {})
    note = None
    if left_out:
        note = f"{len(left_out)} eligible sample(s) not evaluated: " + "; ".join(
            f"{sid}: {why}" for sid, why in left_out.items()
        )
    base = {
        "subset": subset,
        "task": task,
        "selected": selected,
        "eligible": eligible,
        "not_evaluated": left_out,
        "note": note,
    }
    flags = [official_takeover(words) for words, _b in samples]
    lats = [
        official_latency(w, b)
        for (w, b), f in zip(samples, flags, strict=True)
        if f and b is not None
    ]
    has_latency = task != "pause_handling"
    return OfficialSubset(
        **base,
        evaluated=len(samples),
        takeovers=sum(flags),
        takeover_rate=sum(flags) / len(flags) if flags else None,
        latency_s=(sum(lats) / len(lats) if lats else None) if has_latency else None,
        latency_n=len(lats) if has_latency else None,
    )


def backchannel_subset(subset: str, selected: int, result: BackchannelResult) -> OfficialSubset:
    """Pure: the subset row of the official backchannel numbers (TOR mean as the takeover rate)."""
    return OfficialSubset(
        subset=subset,
        task="backchannel",
        selected=selected,
        eligible=result.n,
        evaluated=result.n,
        takeovers=sum(r.tor for r in result.samples),
        takeover_rate=result.tor_mean,
        latency_s=None,
        latency_n=None,
        backchannel_frequency=result.frequency_mean,
        backchannel_jsd=result.jsd_mean,
        backchannel=result,
        note=result.note,
    )


def _backchannel_inputs(
    inputs: TreeInputs, samples: Sequence, vad: SpeechSegmenter, audio_rate: AudioRate
) -> list[bc.BackchannelInput]:
    items = []
    memo = SegmentMemo(vad)

    def load(sample) -> list[np.ndarray]:
        return [
            bc.vad_samples(
                read_native_window(sample, inputs.root / sample.subset / sample.id), audio_rate
            )
        ]

    for sample in (
        s
        for block in prefetch_blocks(memo, samples, load, bc.BACKCHANNEL_VAD_SETTINGS)
        for s in block
    ):
        check_fresh(inputs, sample)
        folder = inputs.root / sample.subset / sample.id
        chunks = tuple(
            chunk_times(sample.sample_id, read_sample_json(sample, folder, "output.json"), raw=True)
        )
        audio = read_native_window(sample, folder)
        segments = tuple(bc.official_segments(memo, audio, audio_rate))
        items.append(
            bc.BackchannelInput(
                sample.sample_id, sample.id, chunks, segments, len(audio.samples), audio.rate
            )
        )
    return items


def not_cut_at_R(
    sample_id: str, words: Sequence[tuple[float, float | None]], R: float
) -> str | None:
    """Why an interruption transcript is not the official input (a word starts before R), or
    None."""
    try:
        check_words_after(
            sample_id, tuple(WordSpan(to_us(s), to_us(s)) for s, _e in words), to_us(R)
        )
    except SampleError as exc:
        return exc.one_line().removeprefix(f"{sample_id}: ")
    return None


def _takeover_inputs(
    inputs: TreeInputs, samples: Sequence, task: str
) -> tuple[list, dict[str, str]]:
    """(words, boundary) of every evaluated sample, and the eligible samples left out with the
    reason."""
    parsed, left_out = [], {}
    for sample in samples:
        check_fresh(inputs, sample)
        folder = inputs.root / sample.subset / sample.id
        words = chunk_times(sample.sample_id, read_sample_json(sample, folder, "output.json"))
        annotation = (
            read_sample_json(sample, folder, V10_ANNOTATION[task])
            if task != "pause_handling"
            else None
        )
        boundary = _boundary(sample.sample_id, task, annotation)
        problem = (
            not_cut_at_R(sample.sample_id, words, boundary) if task == "user_interruption" else None
        )
        if problem is not None:
            left_out[sample.sample_id] = problem
            continue
        parsed.append((words, boundary))
    return parsed, left_out


def _vad_record(vad: SpeechSegmenter | None) -> VadRecord | None:
    if vad is None:
        return None

    ident = vad.identity
    settings = {
        **asdict(bc.BACKCHANNEL_VAD_SETTINGS),
        "sampling_rate": 16000,
        "return_seconds": True,
        "time_resolution": 1,
    }
    return VadRecord(
        name=ident.name,
        version=ident.version,
        model_sha256=ident.checkpoint_sha256,
        settings=settings,
    )


def score_official(
    tree: Path,
    icc_gt: str | Path | bc.IccGroundTruth | None = None,
    vad: SpeechSegmenter | None = None,
    options: bc.BackchannelOptions | None = None,
) -> OfficialSummary:
    """Official takeover / latency / backchannel per subset over the eligible samples; writes
    official.json. ``icc_gt`` (a file, a checkout or a loaded ground truth) enables the
    backchannel JSD; ``vad`` defaults to Silero, loaded only for eligible backchannel samples."""
    tree, options = Path(tree), options or bc.BackchannelOptions()
    gt = bc.load_icc_gt(icc_gt) if isinstance(icc_gt, str | Path) else icc_gt
    inputs = load_tree(tree)
    groups: dict[str, list] = {}
    for sample in inputs.manifest.samples:
        groups.setdefault(sample.subset, []).append(sample)
    subsets = {}
    for subset in sorted(groups, key=subset_key):
        samples = sorted(groups[subset], key=lambda s: id_key(s.id))
        task, eligible = V10_TASK[subset], [s for s in samples if s.eligible]
        if task == "backchannel":
            if vad is None and eligible:
                vad = fdb.models.vad.SileroVad()
            # no eligible sample: nothing to segment, so no
            # VAD is loaded (an empty subset, not a crash)
            rows = (
                bc.score_rows(
                    _backchannel_inputs(inputs, eligible, vad, options.audio_rate), options, gt
                )
                if eligible
                else []
            )
            subsets[subset] = backchannel_subset(
                subset, len(samples), bc.summarize(rows, options, gt)
            )
            continue
        parsed, left_out = _takeover_inputs(inputs, eligible, task)
        subsets[subset] = summarize_subset(subset, len(samples), len(eligible), parsed, left_out)
    rules = OfficialRules(
        backchannel_rule=options.rule,
        backchannel_audio_rate=options.audio_rate,
        backchannel_vad=_vad_record(vad),
        icc_gt=None
        if gt is None
        else IccInfo(path=gt.path, sha256=gt.sha256, matches_pin=gt.matches_pin),
    )
    summary = OfficialSummary(
        manifest_sha256=inputs.manifest_sha256,
        asr_sha256=inputs.receipt_sha256,
        rules=rules,
        subsets=subsets,
        provenance=current().model_dump(mode="json"),
    )
    atomic_write_json(tree / "official.json", summary.dump())
    return summary
