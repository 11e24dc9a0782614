"""Unified v1.0 user interruption (spec "User interruption"; rulings 7, 8, 10).

S, R = interrupt.json[0].timestamp. Silero VAD segments of the whole output.wav give
speech_at_onset (a segment with start <= S < end), speech_at_end (start < R < end) and
speech_before_onset (a segment starts before S). The outcome, in this order:
not_exercised (no speech at S), speaking_at_end (speech at S and R), response (a word starts at
or after R; latency = earliest word start - R), no_response. stop_s is the end of the segment
covering S minus S, infinite when that segment runs to T; speech_in_interruption_s is the
detected speech inside [S, R]; restarts counts segments starting inside (S, R).
Every metric except exercised_rate is over exercised samples, and a not_exercised sample is an
unknown outcome in their selected bounds, like an ineligible one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from fdb.records.v10 import NOT_REACHED, InterruptMetrics, InterruptRow
from scorers.times import US_PER_S, to_s
from scorers.v10_common import latency_quantiles, min_observable, pooled_ratio, response_rate, share
from scorers.v10_inputs import InterruptSample


def _outcome(at_onset: bool, at_end: bool, has_words: bool) -> str:
    if not at_onset:
        return "not_exercised"
    if at_end:
        return "speaking_at_end"
    return "response" if has_words else "no_response"


def _stop(sample: InterruptSample) -> int | float | None:
    """Microseconds from S to the end of the segment covering S; inf if it runs to T."""
    for start, end in sample.segments:
        if start <= sample.S < end:
            return math.inf if end >= sample.T else end - sample.S
    return None


def score_interrupt_sample(sample: InterruptSample, subset: str) -> InterruptRow:
    """Outcome and per-sample quantities of one eligible interruption sample."""
    S, R, segs = sample.S, sample.R, sample.segments
    at_onset = any(s <= S < e for s, e in segs)
    at_end = any(s < R < e for s, e in segs)
    first = min((w.start for w in sample.words), default=None)
    outcome = _outcome(at_onset, at_end, first is not None)
    stop = _stop(sample) if at_onset else None
    return InterruptRow(
        sample_id=sample.sample_id,
        subset=subset,
        task="user_interruption",
        eligible=True,
        T_s=to_s(sample.T),
        S_s=to_s(S),
        R_s=to_s(R),
        words=len(sample.words),
        first_word_s=None if first is None else to_s(first),
        vad_segments=[(to_s(s), to_s(e)) for s, e in segs],
        speech_at_onset=at_onset,
        speech_at_end=at_end,
        speech_before_onset=any(s < S for s, _e in segs),
        outcome=outcome,
        latency_s=to_s(first - R) if outcome == "response" else None,
        stop_s=None if stop is None else (NOT_REACHED if math.isinf(stop) else to_s(stop)),
        speech_in_interruption_s=to_s(sum(max(0, min(e, R) - max(s, S)) for s, e in segs)),
        interruption_s=to_s(R - S),
        restarts=sum(1 for s, _e in segs if S < s < R),
        observable_s=to_s(sample.T - R),
    )


def _us(seconds: float) -> int:
    return round(seconds * US_PER_S)


def interrupt_metrics(rows: Sequence[InterruptRow], selected: int) -> InterruptMetrics:
    """Subset metrics; shares over exercised samples (exercised_rate over eligible ones)."""
    eligible = len(rows)
    ex = [r for r in rows if r.speech_at_onset]
    n = len(ex)
    unknown_ex = selected - eligible  # exercised_rate: only ineligible samples are unknown
    unknown = selected - n  # the others: ineligible plus not_exercised

    def rate(pred, better: str):
        return share(sum(1 for r in ex if pred(r)), n, selected, unknown, better)

    latencies = [math.inf if r.latency_s is None else float(_us(r.latency_s)) for r in ex]
    stops = [math.inf if r.stop_s == NOT_REACHED else float(_us(r.stop_s)) for r in ex]
    return InterruptMetrics(
        exercised_rate=share(n, eligible, selected, unknown_ex, "context"),
        speaking_at_end_rate=rate(lambda r: r.outcome == "speaking_at_end", "lower"),
        response_rate_1s=response_rate(latencies, 1, selected, unknown),
        response_rate_2s=response_rate(latencies, 2, selected, unknown),
        response_rate_5s=response_rate(latencies, 5, selected, unknown),
        no_response_rate=rate(lambda r: r.outcome == "no_response", "lower"),
        response_latency_s=latency_quantiles(latencies),
        stop_latency_s=latency_quantiles(stops),
        speech_s_per_interruption_s=pooled_ratio(
            [_us(r.speech_in_interruption_s) for r in ex],
            [_us(r.interruption_s) for r in ex],
            "lower",
            scale=US_PER_S,
        ),
        restart_rate=rate(lambda r: r.restarts > 0, "lower"),
        min_observable_s=min_observable([_us(r.observable_s) for r in rows]),
    )
