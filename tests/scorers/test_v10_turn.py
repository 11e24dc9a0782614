"""Unified smooth turn-taking on a hand-built subset (T = 10 s).

 1: E 1.14, first word 2.14      -> response, latency exactly 1 s (counts in response_rate_1s)
 2: E 3.0, words 2.9 and 4.0     -> early_start (an early word is never a response)
 3: E 2.0, no words              -> no_response
 4: E 2.0, words 5.5 then 4.5    -> response, latency 2.5 (earliest start, not file order)
 5: E 5.0, word at 5.0           -> response, latency 0
 6: E 5.0, word at 9.9           -> response, latency 4.9
Latencies sorted [0, 1, 2.5, 4.9, inf, inf]: median = 3rd = 2.5; p90 = 6th = not reached.
"""

from __future__ import annotations

import pytest

from benchmarks.support.treebuild import transcript, turn_json
from fdb.errors import SampleError
from fdb.records import ExportSample
from fdb.records.v10 import NOT_REACHED
from scorers.times import to_us
from scorers.v10_inputs import TurnSample, parse_turn_end, parse_words
from scorers.v10_unified import score_subset

SUBSET = "candor_turn_taking"
T = 10.0
FIXTURE = {
    "1": (1.14, [(2.14, 2.5)]),
    "2": (3.0, [(2.9, 3.2), (4.0, 4.5)]),
    "3": (2.0, []),
    "4": (2.0, [(5.5, 6.0), (4.5, 5.0)]),
    "5": (5.0, [(5.0, 5.3)]),
    "6": (5.0, [(9.9, 10.3)]),
}


def score(fixture=FIXTURE, ineligible: int = 0):
    Tu = to_us(T)
    parsed = {
        f"{SUBSET}/{k}": TurnSample(
            f"{SUBSET}/{k}",
            Tu,
            parse_turn_end(k, turn_json(E), Tu),
            parse_words(k, transcript(*w), Tu),
        )
        for k, (E, w) in fixture.items()
    }
    samples = [
        ExportSample(sample_id=f"{SUBSET}/{k}", subset=SUBSET, id=k, eligible=True, T_s=T)
        for k in fixture
    ]
    samples += [
        ExportSample(
            sample_id=f"{SUBSET}/x{i}",
            subset=SUBSET,
            id=f"x{i}",
            eligible=False,
            reasons=["missing"],
        )
        for i in range(ineligible)
    ]
    return score_subset(SUBSET, samples, parsed)


def test_turn_outcomes_by_hand():
    _result, rows = score()
    assert [r.outcome for r in rows] == [
        "response",
        "early_start",
        "no_response",
        "response",
        "response",
        "response",
    ]
    assert [r.latency_s for r in rows] == [1.0, None, None, 2.5, 0.0, 4.9]
    assert rows[3].first_word_s == 4.5


def test_turn_metrics_by_hand():
    result, _rows = score(ineligible=2)
    m = result.metrics
    assert (m.early_start_rate.count, m.no_response_rate.count) == (1, 1)
    assert m.response_rate_1s.count == 2  # latency exactly 1 s is within 1 s
    assert m.response_rate_2s.count == 2
    assert m.response_rate_5s.count == 4 and m.response_rate_5s.n == 6
    assert m.response_rate_1s.selected_bounds == (2 / 8, 4 / 8)
    q = m.response_latency_s
    assert (q.n, q.observed, q.median_s, q.p90_s) == (6, 4, 2.5, NOT_REACHED)
    assert q.median_bootstrap95 is not None and q.valid_resamples == 2000
    assert m.min_observable_s == 5.0
    assert result.counts.ineligible_reasons == {"missing": 2}


def test_median_not_reached():
    result, _ = score({"1": (1.0, [(2.0, 2.2)]), "2": (1.0, []), "3": (3.0, [(2.0, 2.5)])})
    q = result.metrics.response_latency_s
    assert q.median_s == NOT_REACHED and q.p90_s == NOT_REACHED
    assert q.median_bootstrap95[1] == NOT_REACHED


def test_wilson_endpoints_in_metrics():
    result, _ = score({"1": (1.0, [(2.0, 2.2)]), "2": (1.0, [(1.5, 2.5)])})
    m = result.metrics
    assert m.no_response_rate.wilson95[0] == 0.0 and m.no_response_rate.count == 0
    assert m.response_rate_5s.count == 2 and m.response_rate_5s.wilson95[1] == 1.0


def test_turn_end_outside_window_stops():
    with pytest.raises(SampleError, match="E 11.0"):
        parse_turn_end("candor_turn_taking/3", turn_json(11.0), to_us(T))
