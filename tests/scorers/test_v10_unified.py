"""score_unified end to end on small trees: the three reference examples, injected VAD,
byte-for-byte determinism, and the refusals (no asr.json, stale files, bad times)."""

from __future__ import annotations

import json

import pytest

from benchmarks.support.treebuild import (
    FixedSegments,
    V10Tree,
    bursts,
    interrupt_json,
    pause_json,
    transcript,
    turn_json,
)
from fdb.errors import FdbError, SampleError
from fdb.io import atomic_write_json, read_json
from fdb.records.v10 import UNIFIED_SCHEMA, UnifiedResult
from scorers.v10_unified import score_unified


def reference_tree(root, reference):
    tree = V10Tree(root)
    tree.copy_reference(
        "pause_handling_example", "synthetic_pause_handling", "1", 4.7, 75200
    )  # output.wav: 4.70 s
    tree.copy_reference("smooth_turn_taking_example", "candor_turn_taking", "1", 10.4, 166400)
    tree.copy_reference(
        "user_interruption_example", "synthetic_user_interruption", "1", 28.16, 450560
    )
    tree.add("icc_backchannel", "0", 5.0, words=[])
    tree.add("candor_turn_taking", "2", 10.0, eligible=False, reasons=["pacing"])
    return tree.finish()


def test_reference_examples(tmp_path, reference, silero):
    root = reference_tree(tmp_path, reference)
    result = score_unified(root, silero, declared={"candor_turn_taking": 119})
    pause = result.subsets["synthetic_pause_handling"].metrics
    assert pause.pause_intrusion_rate.value == 1.0
    assert pause.intrusion_s_per_pause_s.value == 1.0  # words cover 0-4.68, pause 3.32-4.0
    turn = result.subsets["candor_turn_taking"]
    assert turn.counts.declared == 119 and turn.counts.selected == 2 and turn.coverage == 0.5
    assert turn.metrics.response_latency_s.median_s == 1.35
    assert (turn.metrics.response_rate_1s.count, turn.metrics.response_rate_2s.count) == (0, 1)
    assert turn.metrics.min_observable_s == 8.39
    inter = result.subsets["synthetic_user_interruption"]
    assert inter.counts.exercised == 0 and inter.metrics.exercised_rate.value == 0.0
    assert inter.metrics.speaking_at_end_rate.value is None
    assert inter.metrics.speaking_at_end_rate.selected_bounds == (0.0, 1.0)
    assert "icc_backchannel" in result.not_scored and "icc_backchannel" not in result.subsets
    rows = [json.loads(line) for line in (root / "unified-samples.jsonl").read_text().splitlines()]
    pause_row = rows[0]
    assert (pause_row["intrusion_words"], pause_row["carry_in"], pause_row["first_pause_s"]) == (
        6,
        True,
        3.32,
    )
    assert [r["sample_id"] for r in rows] == [
        "synthetic_pause_handling/1",
        "candor_turn_taking/1",
        "candor_turn_taking/2",
        "synthetic_user_interruption/1",
    ]
    assert rows[2] == {
        "sample_id": "candor_turn_taking/2",
        "subset": "candor_turn_taking",
        "task": "turn_taking",
        "eligible": False,
        "reasons": ["pacing"],
    }
    doc = read_json(root / "unified.json")
    assert doc["schema"] == doc["definitions"] == UNIFIED_SCHEMA
    assert doc["vad"]["settings"]["speech_pad_ms"] == 0 and doc["vad"]["model_sha256"]
    assert len(doc["inputs"]["manifest_sha256"]) == 64 and len(doc["inputs"]["asr_sha256"]) == 64
    assert UnifiedResult.model_validate(doc).subsets.keys() == result.subsets.keys()


def interruption_tree(root):
    tree = V10Tree(root)
    S, R, T = 4.0, 6.0, 12.0
    tree.add(
        "synthetic_user_interruption",
        "1",
        T,
        annotation=interrupt_json(S, R),
        audio=bursts(T, (1.0, 5.0), (7.0, 9.0)),
        words=[(7.0, 7.5), (7.6, 8.0)],
    )
    tree.add(
        "synthetic_user_interruption",
        "2",
        T,
        annotation=interrupt_json(S, R),
        audio=bursts(T, (3.0, 12.0)),
        words=[(8.0, 8.5)],
    )
    tree.add(
        "synthetic_user_interruption",
        "3",
        T,
        annotation=interrupt_json(S, R),
        audio=bursts(T, (0.5, 1.5)),
        words=[],
    )
    return tree.finish()


def test_injected_vad_and_same_bytes(tmp_path):
    root = interruption_tree(tmp_path)
    vad = FixedSegments()
    result = score_unified(root, vad)
    first = ((root / "unified.json").read_bytes(), (root / "unified-samples.jsonl").read_bytes())
    score_unified(root, vad)
    assert first == (
        (root / "unified.json").read_bytes(),
        (root / "unified-samples.jsonl").read_bytes(),
    )
    m = result.subsets["synthetic_user_interruption"].metrics
    assert m.exercised_rate.count == 2
    assert m.speaking_at_end_rate.count == 1 and m.response_rate_1s.count == 1
    assert m.response_latency_s.observed == 1
    stop = m.stop_latency_s  # stops [1.0 (segment ends at 5.0), inf (runs to T)]: ceil(1) = 1st
    assert (stop.median_s, stop.p90_s, stop.median_bootstrap95) == (
        1.0,
        "not_reached",
        (1.0, "not_reached"),
    )
    assert m.speech_s_per_interruption_s.value == 3.0 / 4.0  # 1 s + 2 s of speech over 2 x 2 s
    assert result.vad.name == "nonzero-test-vad"


def test_refuses_tree_without_asr(tmp_path):
    tree = V10Tree(tmp_path)
    tree.add("candor_turn_taking", "1", 5.0, annotation=turn_json(2.0), words=[(3.0, 3.2)])
    tree.finish(with_asr=False)
    with pytest.raises(FdbError, match="asr.json is missing"):
        score_unified(tmp_path, FixedSegments())


def test_refuses_stale_transcript_and_wav(tmp_path):
    tree = V10Tree(tmp_path)
    folder = tree.add("candor_turn_taking", "1", 5.0, annotation=turn_json(2.0), words=[(3.0, 3.2)])
    tree.finish()
    atomic_write_json(folder / "output.json", transcript((2.5, 3.0)))
    with pytest.raises(
        SampleError, match="candor_turn_taking/1: .*output.json differs from asr.json"
    ):
        score_unified(tmp_path, FixedSegments())
    tree = V10Tree(tmp_path / "b")
    folder = tree.add(
        "synthetic_user_interruption", "1", 5.0, annotation=interrupt_json(1.0, 2.0), words=[]
    )
    tree.finish()
    (folder / "output.wav").write_bytes((folder / "output.wav").read_bytes()[:-2] + b"\x01\x00")
    with pytest.raises(SampleError, match="output.wav differs from asr.json"):
        score_unified(tmp_path / "b", FixedSegments())


def test_refuses_changed_annotation_and_manifest(tmp_path):
    tree = V10Tree(tmp_path)
    folder = tree.add(
        "candor_pause_handling", "4", 5.0, annotation=pause_json((1.0, 2.0)), words=[]
    )
    tree.finish()
    atomic_write_json(folder / "pause.json", pause_json((1.0, 2.5)))
    with pytest.raises(SampleError, match="pause.json is missing or differs from manifest.json"):
        score_unified(tmp_path, FixedSegments())
    atomic_write_json(folder / "pause.json", pause_json((1.0, 2.0)))
    (tmp_path / "manifest.json").write_text((tmp_path / "manifest.json").read_text() + " ")
    with pytest.raises(FdbError, match="another manifest.json"):
        score_unified(tmp_path, FixedSegments())


def test_bad_times_stop_with_sample_id(tmp_path):
    tree = V10Tree(tmp_path)
    tree.add(
        "candor_pause_handling", "7", 5.0, annotation=pause_json((1.0, 2.0)), words=[(5.5, 6.0)]
    )
    tree.finish()
    with pytest.raises(
        SampleError, match=r"candor_pause_handling/7: word 0 start 5.500000 s lies outside"
    ):
        score_unified(tmp_path, FixedSegments())


def test_interruption_window_length_checked(tmp_path):
    tree = V10Tree(tmp_path)
    tree.add(
        "synthetic_user_interruption",
        "1",
        5.0,
        annotation=interrupt_json(1.0, 2.0),
        words=[],
        audio=bursts(4.0, (1.0, 2.0)),
    )
    tree.finish()
    with pytest.raises(SampleError, match="not T = 5.0 s"):
        score_unified(tmp_path, FixedSegments())
