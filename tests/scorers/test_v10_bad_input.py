"""Every bad input of the issue stops both v1.0 scorers with an error naming the sample (or the
tree file), and a subset where no sample took the turn reports n/a instead of dividing by 0."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.support.treebuild import (
    FixedSegments,
    V10Tree,
    interrupt_json,
    pause_json,
    transcript,
    turn_json,
)
from fdb.audio import wav_bytes
from fdb.errors import FdbError, SampleError
from fdb.io import atomic_write_bytes, atomic_write_json, read_json
from scorers.v10_official import score_official
from scorers.v10_unified import score_unified


def one(root, subset, annotation, words, T=5.0):
    tree = V10Tree(root)
    folder = tree.add(subset, "3", T, annotation=annotation, words=words)
    tree.finish()
    return folder


def both(root):
    for scorer in (score_unified, score_official):
        with pytest.raises(FdbError) as err:
            scorer(root, vad=FixedSegments())
        yield err.value


CASES = {
    "word outside [0, T]": (
        "candor_turn_taking",
        turn_json(1.0),
        [(5.2, 5.4)],
        r"word 0 start 5.200000 s lies outside",
    ),
    "S > R": ("synthetic_user_interruption", interrupt_json(3.0, 2.0), [], "S 3.0 after R 2.0"),
    "missing annotation": ("candor_turn_taking", None, [(2.0, 2.4)], "turn_taking.json is missing"),
    "unsorted pauses": (
        "candor_pause_handling",
        pause_json((3.0, 4.0), (1.0, 2.0)),
        [],
        "unsorted or overlapping",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_annotation_or_transcript(tmp_path, case):
    subset, annotation, words, problem = CASES[case]
    one(tmp_path, subset, annotation, words)
    with pytest.raises(SampleError, match=problem) as err:
        score_unified(tmp_path, FixedSegments())
    assert err.value.sample == f"{subset}/3"


def test_stale_missing_or_failed_asr_json(tmp_path):
    folder = one(tmp_path, "candor_turn_taking", turn_json(1.0), [(2.0, 2.4)])
    atomic_write_json(folder / "output.json", transcript((2.5, 2.9)))
    for err in both(tmp_path):
        assert (
            err.sample == "candor_turn_taking/3"
            and "output.json differs from asr.json" in err.one_line()
        )
    receipt = read_json(tmp_path / "asr.json")
    receipt["samples"][0].update(status="failed", error="boom")
    atomic_write_json(tmp_path / "asr.json", receipt)
    for err in both(tmp_path):
        assert "asr.json has status failed (boom)" in err.one_line()
    (tmp_path / "asr.json").unlink()
    for err in both(tmp_path):
        assert "asr.json is missing" in err.one_line()


@pytest.mark.parametrize(
    "subset, annotation",
    [
        ("candor_pause_handling", pause_json((1.0, 2.0))),
        ("candor_turn_taking", turn_json(1.0)),
        ("icc_backchannel", None),
    ],
)
def test_window_not_exactly_T(tmp_path, subset, annotation):
    tree = V10Tree(tmp_path)
    folder = tree.add(subset, "3", 5.0, annotation=annotation, words=[])
    atomic_write_bytes(folder / "output.wav", wav_bytes(np.zeros(16000 * 5 - 1, np.float32), 16000))
    tree.samples[0].files.pop("output.wav")
    tree.finish()
    scorers = [score_official] if subset == "icc_backchannel" else [score_unified, score_official]
    for scorer in scorers:
        with pytest.raises(
            SampleError, match=r"output.wav holds 79999 samples at 16000 Hz, not T = 5.0 s"
        ) as err:
            scorer(tmp_path, vad=FixedSegments())
        assert err.value.sample == f"{subset}/3"


def test_no_takeover_is_null_not_a_division_by_zero(tmp_path):
    tree = V10Tree(tmp_path)
    tree.add("candor_turn_taking", "1", 5.0, annotation=turn_json(1.0), words=[])
    tree.add("candor_turn_taking", "2", 5.0, annotation=turn_json(1.0), words=[(2.0, 2.2)])
    tree.add("synthetic_user_interruption", "1", 5.0, annotation=interrupt_json(1.0, 2.0), words=[])
    tree.finish()
    official = score_official(tmp_path, vad=FixedSegments())
    for subset in ("candor_turn_taking", "synthetic_user_interruption"):
        row = official.subsets[subset]
        assert (row.takeovers, row.takeover_rate, row.latency_s) == (0, 0.0, None)
    unified = score_unified(tmp_path, FixedSegments())
    turn = unified.subsets["candor_turn_taking"].metrics
    assert (turn.response_latency_s.median_s, turn.response_latency_s.p90_s) == (1.0, "not_reached")
    assert turn.response_rate_5s.value == 0.5
    inter = unified.subsets["synthetic_user_interruption"].metrics  # silent at S: not exercised
    assert inter.no_response_rate.value is None and inter.speech_s_per_interruption_s.value is None
