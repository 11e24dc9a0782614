"""Unified v1.0 pause handling (spec "Pause handling"; rulings 3-5).

The window is a non-yielding user turn: from the first pause start a1 to T, a model word onset
takes the floor too early. Per sample, with pauses [a_i, b_i] and word spans [s, e]:

- pause_intrusion: a word starts at or after a1 (intrusion_words counts those onsets);
- intruded pause i: a word starts in its owned time [a_i, a_{i+1}), the last pause owning
  [a_last, T] (ruling 5; a zero-length pause owns time but [a, a) holds no onset, ruling 4);
- intrusion_s: pause seconds covered by the union of word spans (ruling 3);
- inside_pause_onset: a word starts inside some [a_i, b_i);
- pre_pause_speech: a word starts before a1; carry_in: such a word ends after a1;
- any_speech: the transcript holds a word.
"""

from __future__ import annotations

from collections.abc import Sequence

from fdb.records.v10 import PauseMetrics, PauseRow
from scorers.times import US_PER_S, to_s
from scorers.v10_common import pooled_ratio, share
from scorers.v10_inputs import PauseSample, Span, WordSpan


def word_union(words: Sequence[WordSpan]) -> list[Span]:
    """Union of the word spans [s, e] with positive length, merged where they overlap or touch."""
    merged: list[list[int]] = []
    for start, end in sorted((w.start, w.end) for w in words if w.end > w.start):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(s, e) for s, e in merged]


def covered_us(union: Sequence[Span], pauses: Sequence[Span]) -> int:
    """Microseconds of annotated pause time covered by the (disjoint) union of word spans."""
    total = 0
    for a, b in pauses:
        for s, e in union:
            total += max(0, min(b, e) - max(a, s))
    return total


def owned_intervals(pauses: Sequence[Span], T: int) -> list[tuple[int, int, bool]]:
    """(start, end, end_closed): pause i owns [a_i, a_{i+1}); the last owns [a_last, T]."""
    owned = [(a, pauses[i + 1][0], False) for i, (a, _b) in enumerate(pauses[:-1])]
    owned.append((pauses[-1][0], T, True))
    return owned


def _holds(onsets: Sequence[int], start: int, end: int, closed: bool) -> bool:
    return any(start <= t < end or (closed and t == end) for t in onsets)


def score_pause_sample(sample: PauseSample, subset: str) -> PauseRow:
    """Per-sample pause flags and pooled-ratio parts of one eligible sample."""
    a1 = sample.pauses[0][0]
    onsets = [w.start for w in sample.words]
    intruded = sum(_holds(onsets, s, e, c) for s, e, c in owned_intervals(sample.pauses, sample.T))
    pause_us = sum(b - a for a, b in sample.pauses)
    return PauseRow(
        sample_id=sample.sample_id,
        subset=subset,
        task="pause_handling",
        eligible=True,
        T_s=to_s(sample.T),
        words=len(sample.words),
        first_pause_s=to_s(a1),
        pauses=len(sample.pauses),
        pause_s=to_s(pause_us),
        pause_intrusion=any(t >= a1 for t in onsets),
        inside_pause_onset=any(a <= t < b for t in onsets for a, b in sample.pauses),
        pre_pause_speech=any(t < a1 for t in onsets),
        carry_in=any(w.start < a1 < w.end for w in sample.words),
        any_speech=bool(sample.words),
        intrusion_words=sum(1 for t in onsets if t >= a1),
        intruded_pauses=intruded,
        intrusion_s=to_s(covered_us(word_union(sample.words), sample.pauses)),
    )


def pause_metrics(rows: Sequence[PauseRow], selected: int) -> PauseMetrics:
    """Subset metrics over eligible rows (ordered by numeric id for the bootstrap).

    Shares are over eligible samples; the unknown outcomes of the selected bounds are the
    ineligible samples. The pooled ratios divide by the pauses and pause seconds.
    """
    n = len(rows)
    unknown = selected - n

    def rate(flag: str, better: str):
        return share(sum(1 for r in rows if getattr(r, flag)), n, selected, unknown, better)

    pause_us = [round(r.pause_s * US_PER_S) for r in rows]
    return PauseMetrics(
        pause_intrusion_rate=rate("pause_intrusion", "lower"),
        pause_intrusion_per_pause=pooled_ratio(
            [r.intruded_pauses for r in rows], [r.pauses for r in rows], "lower"
        ),
        intrusion_s_per_pause_s=pooled_ratio(
            [round(r.intrusion_s * US_PER_S) for r in rows], pause_us, "lower", scale=US_PER_S
        ),
        inside_pause_onset_rate=rate("inside_pause_onset", "context"),
        pre_pause_speech_rate=rate("pre_pause_speech", "context"),
        carry_in_rate=rate("carry_in", "context"),
        any_speech_rate=rate("any_speech", "context"),
        pauses=sum(r.pauses for r in rows),
        pause_s=to_s(sum(pause_us)),
    )
