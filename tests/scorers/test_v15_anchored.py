"""fdb event-anchored v1.5 intervals (not official) on hand-built spans, the summary fields
and the on-disk VAD cache."""

from __future__ import annotations

from benchmarks.support.treebuild import FixedSegments, bursts
from fdb.io import atomic_write_json
from fdb.records import ExportManifest
from fdb.records.v15 import ANCHORED_LABEL
from scorers.v15_intervals import anchored_response, anchored_stop, event_span, merge_spans
from scorers.v15_timing import _SPAN_CACHE, score_v15_timing
from tests.scorers.test_v15_timing import write_pair


def test_event_span_largest_intersection_earliest_on_ties():
    user = [(0.0, 2.0), (4.0, 5.0), (6.0, 8.0)]
    assert event_span(user, (4.5, 7.0)) == (6.0, 8.0)  # 1.0 s beats 0.5 s
    assert event_span(user, (4.5, 6.5)) == (4.0, 5.0)  # 0.5 s tie: the earlier span
    assert event_span(user, (2.5, 3.5)) is None  # no user speech during the event
    assert event_span(user, (2.0, 2.0)) is None  # touching is not intersecting


def test_anchored_stop_and_response():
    event = (4.0, 6.0)
    model = [(1.0, 3.0), (5.0, 5.5), (5.8, 9.0), (10.0, 11.0)]
    assert anchored_stop(event, model) == (5.0, 5.5)  # first overlap, not the longest
    assert anchored_response(event, model) == (6.0, 10.0)  # strictly after the event end
    assert anchored_stop(event, [(1.0, 4.0)]) is None  # touching only
    assert anchored_response((4.0, 6.0), [(6.0, 7.0)]) is None
    assert anchored_stop(None, model) is None and anchored_response(None, model) is None
    assert anchored_response((0.0, 1.00049), [(2.0004, 3.0)]) == (1.0, 2.0)  # 3 decimals


def test_anchor_uses_merged_spans():
    # user speech 3.0-3.5 and 3.9-5.0 merge (gap 0.4 <= 0.6);
    # the event 4.0-4.5 picks the merged span
    user = merge_spans([(0.5, 1.5), (3.0, 3.5), (3.9, 5.0)], 0.6)
    model = merge_spans([(1.8, 4.2), (4.6, 4.8), (6.0, 7.0)], 0.5)
    ev = event_span(user, (4.0, 4.5))
    assert ev == (3.0, 5.0)
    assert anchored_stop(ev, model) == (3.0, 4.8)  # model spans merged across the 0.4 s gap
    assert anchored_response(ev, model) == (5.0, 6.0)


def test_tree_reports_anchored_beside_official(tmp_path):
    root = tmp_path / "reference-audio"
    T = 12.0
    audio = {
        "input.wav": bursts(T, (0.5, 2.0), (5.0, 6.0)),
        "output.wav": bursts(T, (2.5, 5.5), (9.0, 10.0)),
        "clean_input.wav": bursts(T, (0.5, 2.0)),
        "clean_output.wav": bursts(T, (2.5, 6.0)),
    }
    sample = write_pair(root, "user_interruption", "1", audio)
    atomic_write_json(
        root / "user_interruption" / "1" / "metadata.json",
        {"context_text": "", "current_turn_text": "", "timestamps": [5.0, 6.0]},
    )
    atomic_write_json(
        root / "reference-manifest.json", ExportManifest(dataset="v1.5", samples=[sample]).dump()
    )
    cache = tmp_path / "vad-cache"
    vad = FixedSegments()
    summary = score_v15_timing(root, vad, cache_dir=cache)
    ui = summary.categories["user_interruption"]
    # official: two response intervals (2.0 -> 2.5, 6.0 -> 9.0); anchored: only the event's one
    assert ui.response_latency.intervals == 2
    assert ui.anchored_label == ANCHORED_LABEL and ui.anchored_event_sessions == 1
    assert (ui.anchored_stop_latency.mean_s, ui.anchored_response_latency.mean_s) == (0.5, 3.0)
    assert "anchored" in summary.definitions
    assert len(list(cache.glob("*.json"))) == 4
    _SPAN_CACHE.clear()
    again = FixedSegments()
    assert (
        score_v15_timing(root, again, out=tmp_path / "s2", cache_dir=cache).categories["all"]
        == summary.categories["all"]
    )
    assert again.calls == 0  # every span list came from the disk cache
