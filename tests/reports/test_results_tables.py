"""RESULTS.md cells and multi-repeat aggregation (reports read files only)."""

from __future__ import annotations

import json

from fdb.layout import RunPaths
from fdb.records.v15 import TimingSummary
from reports.cells import NA, count_range, mean_sd, percent, seconds
from reports.results import build_results


def test_cells_never_turn_missing_into_zero():
    assert mean_sd([None, None]) == NA
    assert mean_sd([1.0, None, 3.0]) == "2.000 ± 1.414"
    assert mean_sd([0.5]) == "0.500 ± 0.000"
    assert count_range([3, 3]) == "3" and count_range([2, 4]) == "2-4" and count_range([]) == NA
    assert percent(None) == NA and percent(0.0) == "0.0%"
    assert seconds("not_reached") == "not reached" and seconds(None) == NA


def _latency(mean):
    return {
        "intervals": 1 if mean is not None else 0,
        "sessions": 1,
        "mean_s": mean,
        "median_s": mean,
        "mean_bootstrap95": None,
        "median_bootstrap95": None,
        "valid_resamples": 0,
    }


def _summary(stop, response):
    cat = {
        "category": "user_interruption",
        "pairs": 2,
        "eligible_pairs": 2,
        "timed_overlap_sessions": 2,
        "timed_clean_sessions": 2,
        "failed_sessions": 0,
        "stop_latency": _latency(stop),
        "response_latency": _latency(response),
        "clean_stop_latency": _latency(None),
        "clean_response_latency": _latency(None),
    }
    vad = {"name": "silero-vad", "version": None, "model_sha256": None, "settings": {}}
    return TimingSummary(
        definitions={},
        manifest_sha256="0" * 64,
        vad=vad,
        categories={"all": dict(cat, category="all"), "user_interruption": cat},
    ).dump()


def test_v15_cells_are_mean_and_sd_over_repeats(tmp_path):
    run = RunPaths.of(tmp_path, "r")
    for n, (stop, resp) in enumerate([(1.0, 2.0), (2.0, None)], start=1):
        scores = run.repeat(n).scores
        scores.mkdir(parents=True)
        (scores / "summary.json").write_text(json.dumps(_summary(stop, resp)))
    text, data = build_results(run)
    row = next(
        line for line in text.splitlines() if line.startswith("| user_interruption | 2 | 2 |")
    )
    assert "1.500 ± 0.707" in row and "2.000 ± 0.000" in row and "not measured" in row
    assert set(data["v1.5"]) == {"repeat-1", "repeat-2"}
    assert "No v1.5 timing" not in text
    again, _ = build_results(run)
    assert again == text
