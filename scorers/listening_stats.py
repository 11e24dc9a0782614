"""Per-group listening summaries (per v1.5 category and v1.0 subset, plus "all" per dataset)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fdb.datasets.types import V15_CATEGORIES
from fdb.records.listening import GroupSummary, ReplyRow, ReplyScores


def _mean_p10(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    return float(np.mean(values)), float(np.percentile(values, 10))


def group(
    dataset: str, category: str, rows: Sequence[ReplyRow], scores: Sequence[ReplyScores]
) -> GroupSummary:
    counted = [s.counts for s in scores if s.counts is not None]
    ref = sum(c.reference_words for c in counted)
    omitted = sum(c.deletions for c in counted)
    wer_ref = ref  # the spec's WER: the same alignment, pooled over the same replies
    wer_err = sum(c.substitutions + c.deletions + c.insertions for c in counted)
    mos = [s.mos for s in scores if s.mos is not None]
    voice = [s.voice_similarity for s in scores if s.voice_similarity is not None]
    mos_mean, mos_p10 = _mean_p10(mos)
    voice_mean, voice_p10 = _mean_p10(voice)
    return GroupSummary(
        dataset=dataset,
        category=category,
        replies=len(rows),
        short_replies=sum(r.short for r in rows),
        compared_replies=len(counted),
        cancelled_replies=sum(r.status == "cancelled" for r in rows),
        reference_words=ref,
        omitted_words=omitted,
        omission_rate=omitted / ref if ref else None,
        wer=wer_err / wer_ref if wer_ref else None,
        wer_reference_words=wer_ref,
        mos_n=len(mos),
        mos_mean=mos_mean,
        mos_p10=mos_p10,
        voice_n=len(voice),
        voice_mean=voice_mean,
        voice_p10=voice_p10,
    )


def _order(category: str) -> tuple[int, str]:
    known = list(V15_CATEGORIES)
    return (known.index(category) if category in known else len(known), category)


def group_summaries(
    rows: Sequence[ReplyRow], scores: Sequence[ReplyScores]
) -> dict[str, dict[str, GroupSummary]]:
    out: dict[str, dict[str, GroupSummary]] = {}
    for dataset in sorted({r.dataset for r in rows}, reverse=True):  # v1.5 first
        idx = [k for k, r in enumerate(rows) if r.dataset == dataset]
        groups = {"all": group(dataset, "all", [rows[k] for k in idx], [scores[k] for k in idx])}
        for category in sorted({rows[k].category for k in idx}, key=_order):
            sel = [k for k in idx if rows[k].category == category]
            groups[category] = group(
                dataset, category, [rows[k] for k in sel], [scores[k] for k in sel]
            )
        out[dataset] = groups
    return out
