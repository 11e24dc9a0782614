"""The official takeover / latency rules (clean-room) on the three reference examples."""

from __future__ import annotations

import pytest

from fdb.io import read_json
from fdb.records.v10_reference import OFFICIAL_LABEL
from fdb.takeover import official_takeover
from scorers.v10_official import (
    chunk_times,
    official_latency,
    score_official,
    summarize_subset,
)
from tests.scorers.test_v10_unified import reference_tree


def words_of(reference, example):
    return chunk_times(example, read_json(reference / example / "1" / "output.json"))


def test_reference_takeover_and_latency(reference):
    pause = words_of(reference, "pause_handling_example")
    assert official_takeover(pause) == 1  # spans 0.00-4.68 s
    smooth = words_of(reference, "smooth_turn_taking_example")
    assert len(smooth) == 22 and official_takeover(smooth) == 1
    E = read_json(reference / "smooth_turn_taking_example/1/turn_taking.json")[0]["timestamp"][0]
    assert official_latency(smooth, E) == pytest.approx(1.35, abs=1e-12)
    inter = words_of(reference, "user_interruption_example")
    assert len(inter) == 32 and inter[0][0] == 17.224
    R = read_json(reference / "user_interruption_example/1/interrupt.json")[0]["timestamp"][1]
    assert R == 13.144 and official_latency(inter, R) == pytest.approx(4.08, abs=1e-12)


def test_takeover_thresholds():
    assert official_takeover([]) == 0
    assert official_takeover([(1.0, 1.5), (1.6, 1.9), (1.9, 1.99)]) == 0  # 3 words under 1 s
    assert official_takeover([(1.0, 1.1), (1.2, 1.3), (1.4, 1.5), (1.6, 1.7)]) == 1  # 4 words
    assert official_takeover([(1.0, 2.0)]) == 1  # span exactly 1 s
    assert official_takeover([(1.0, 1.2), (1.9, None)]) == 0  # null end falls back to its start
    assert official_latency([(1.0, 1.2)], 2.0) == 0.0  # early start clamped to 0


def test_latency_mean_over_takeovers_only():
    samples = [([(3.0, 4.5)], 2.0), ([(2.5, 2.6)], 2.0), ([], 2.0)]
    out = summarize_subset("candor_turn_taking", 3, 3, samples)
    assert (out.takeovers, out.takeover_rate, out.latency_s, out.latency_n) == (1, 1 / 3, 1.0, 1)
    none = summarize_subset("candor_turn_taking", 1, 1, [([], 2.0)])
    assert none.latency_s is None and none.takeover_rate == 0.0


def test_no_takeover_gives_null_latency_not_a_division_by_zero():
    out = summarize_subset(
        "synthetic_user_interruption", 2, 2, [([], 13.0), ([(14.0, 14.2)], 13.0)]
    )
    assert (out.takeovers, out.takeover_rate, out.latency_s, out.latency_n) == (0, 0.0, None, 0)
    empty = summarize_subset("candor_turn_taking", 3, 0, [])
    assert (empty.takeover_rate, empty.latency_s, empty.evaluated) == (None, None, 0)


def test_score_official_on_reference_tree(tmp_path, reference, silero):
    root = reference_tree(tmp_path, reference)
    summary = score_official(root, icc_gt=reference.parent / "icc_gt_distribution.json", vad=silero)
    doc = read_json(root / "official.json")
    assert doc["label"] == OFFICIAL_LABEL and doc["schema"] == "fdb-v1.0-official-cleanroom-2"
    assert doc["rules"]["backchannel_rule"] == "since-2026-02-22"
    assert doc["rules"]["backchannel_audio_rate"] == "assume-16k"
    assert doc["rules"]["backchannel_vad"]["settings"]["speech_pad_ms"] == 30
    assert doc["rules"]["icc_gt"]["matches_pin"] is True
    subsets = summary.subsets
    assert subsets["synthetic_pause_handling"].takeover_rate == 1.0
    assert subsets["synthetic_pause_handling"].latency_s is None
    assert subsets["candor_turn_taking"].latency_s == pytest.approx(1.35)
    assert (subsets["candor_turn_taking"].selected, subsets["candor_turn_taking"].evaluated) == (
        2,
        1,
    )
    assert subsets["synthetic_user_interruption"].latency_s == pytest.approx(4.08)
    assert subsets["synthetic_user_interruption"].relevance is None
    bc = subsets[
        "icc_backchannel"
    ]  # 5 s of silence: no segment, TOR 0, no backchannel, the sentinel
    assert (bc.takeover_rate, bc.backchannel_frequency, bc.backchannel_jsd, bc.evaluated) == (
        0.0,
        0.0,
        1.0,
        1,
    )
    assert bc.backchannel.without_backchannel == 1
    again = read_json(root / "official.json")
    score_official(root, icc_gt=reference.parent / "icc_gt_distribution.json", vad=silero)
    assert read_json(root / "official.json") == again == doc


def test_no_eligible_backchannel_sample_scores_the_other_subsets(tmp_path):
    """Issue #25, defect 1: with no eligible icc_backchannel sample, no VAD is loaded and none is
    needed; official scoring of the other subsets goes on and the empty subset says so."""
    from benchmarks.support.treebuild import V10Tree, turn_json

    tree = V10Tree(tmp_path / "reference")
    tree.add(
        "candor_turn_taking", "1", 6.0, annotation=turn_json(2.0), words=[(3.0, 3.4), (3.5, 4.2)]
    )
    tree.add("icc_backchannel", "1", 5.0, eligible=False, reasons=("pacing_violation",))
    root = tree.finish()
    summary = score_official(root)
    assert summary.subsets["candor_turn_taking"].latency_s == pytest.approx(1.0)
    empty = summary.subsets["icc_backchannel"]
    assert (empty.selected, empty.evaluated) == (1, 0)
    assert empty.takeover_rate is None and empty.backchannel_frequency is None
    assert summary.rules.backchannel_vad is None
    assert read_json(root / "official.json")["subsets"]["icc_backchannel"]["evaluated"] == 0
