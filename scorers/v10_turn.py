"""Unified v1.0 smooth turn-taking (spec "Smooth turn-taking").

E = turn_taking.json[0].timestamp[0]. Each sample has exactly one outcome:
early_start (a word starts before E), response (no word before E, one at or after it; the
latency is the earliest word start minus E, ruling 6), no_response (no transcribed word).
response_rate_ks = F(k) over eligible samples; the latency quantiles treat every sample
without a response as infinite (ceil-quantile rule), so an early start never buys a latency.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from fdb.records.v10 import TurnMetrics, TurnRow
from scorers.times import US_PER_S, to_s
from scorers.v10_common import latency_quantiles, min_observable, response_rate, share
from scorers.v10_inputs import TurnSample


def score_turn_sample(sample: TurnSample, subset: str) -> TurnRow:
    """Outcome and latency of one eligible turn-taking sample."""
    first = min((w.start for w in sample.words), default=None)
    if first is None:
        outcome, latency = "no_response", None
    elif first < sample.E:
        outcome, latency = "early_start", None
    else:
        outcome, latency = "response", first - sample.E
    return TurnRow(
        sample_id=sample.sample_id,
        subset=subset,
        task="turn_taking",
        eligible=True,
        T_s=to_s(sample.T),
        E_s=to_s(sample.E),
        words=len(sample.words),
        first_word_s=None if first is None else to_s(first),
        outcome=outcome,
        latency_s=None if latency is None else to_s(latency),
        observable_s=to_s(sample.T - sample.E),
    )


def latency_us(row: TurnRow) -> float:
    """The row's response latency in microseconds; inf without a response."""
    return math.inf if row.latency_s is None else float(round(row.latency_s * US_PER_S))


def turn_metrics(rows: Sequence[TurnRow], selected: int) -> TurnMetrics:
    """Subset metrics over eligible rows; unknown outcomes are the ineligible samples."""
    n = len(rows)
    unknown = selected - n
    latencies = [latency_us(r) for r in rows]

    def outcome_rate(outcome: str):
        return share(sum(1 for r in rows if r.outcome == outcome), n, selected, unknown, "lower")

    return TurnMetrics(
        early_start_rate=outcome_rate("early_start"),
        response_rate_1s=response_rate(latencies, 1, selected, unknown),
        response_rate_2s=response_rate(latencies, 2, selected, unknown),
        response_rate_5s=response_rate(latencies, 5, selected, unknown),
        no_response_rate=outcome_rate("no_response"),
        response_latency_s=latency_quantiles(latencies),
        min_observable_s=min_observable([round(r.observable_s * US_PER_S) for r in rows]),
    )
