"""Transcripts the v1.0 scorers must refuse rather than score (#25 defect 4 and its kin): words
out of time order, a word ending before it starts, negative / NaN / non-numeric times, a
non-UTF-8 or non-JSON output.json, a malformed annotation boundary, a damaged v1.5 VAD cache.
Each is a SampleError naming the sample, the problem and the fix, from both scorers alike."""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks.support.treebuild import FixedSegments, V10Tree, turn_json
from fdb.errors import SampleError
from fdb.io import atomic_write_bytes, atomic_write_json, read_json, sha256_file
from scorers.v10_official import _boundary, chunk_times, score_official
from scorers.v10_unified import score_unified

SUBSET, SID = "candor_turn_taking", "candor_turn_taking/3"
# the case: E = 1.0; the file lists the word at 3.048 s first, the earliest (1.648 s) second
OUT_OF_ORDER = [(3.048, 3.3), (1.648, 1.9), (2.0, 2.2), (2.3, 2.5)]


def turn_tree(root, words=None, obj=None):
    tree = V10Tree(root)
    tree.add(SUBSET, "3", 5.0, annotation=turn_json(1.0), words=words, transcript_obj=obj)
    tree.finish()
    return root / SUBSET / "3"


def refused_by_both(root) -> list[SampleError]:
    errors = []
    for scorer in (score_unified, score_official):
        with pytest.raises(SampleError) as err:
            scorer(root, vad=FixedSegments())
        errors.append(err.value)
    return errors


def test_words_out_of_order_are_refused_by_both_scorers(tmp_path):
    turn_tree(tmp_path, OUT_OF_ORDER)
    for err in refused_by_both(tmp_path):
        assert err.sample == SID
        assert (
            "output.json word 1 starts at 1.648 s, before word 0 (3.048 s): "
            "the words are out of time order" in err.message
        )
        assert "rerun the asr phase" in err.hint and "python -m fdb asr" in err.hint
    # sorted, the same words give the one latency both rules agree on (0.648 s)
    turn_tree(tmp_path / "sorted", sorted(OUT_OF_ORDER))
    assert score_official(tmp_path / "sorted", vad=FixedSegments()).subsets[
        SUBSET
    ].latency_s == pytest.approx(0.648)
    unified = score_unified(tmp_path / "sorted", FixedSegments()).subsets[SUBSET].metrics
    assert unified.response_latency_s.median_s == pytest.approx(0.648)


BAD_TIMES = {
    "end before start": ([[2.0, 1.5]], "output.json word 0 ends before it starts (1.5 s < 2 s)"),
    "negative start": ([[-0.5, 0.2]], "output.json word 0 start is -0.5 s, a negative time"),
    "negative end": ([[2.0, -1.0]], "output.json word 0 end is -1 s, a negative time"),
    "NaN start": ([[float("nan"), 2.0]], "output.json word 0 start is nan, not a finite time"),
    "infinite end": ([[2.0, float("inf")]], "output.json word 0 end is inf, not a finite time"),
    "string start": ([["2.0", 2.5]], "output.json word 0 start is '2.0', not a number"),
    "boolean end": ([[2.0, True]], "output.json word 0 end is True, not a number"),
    "one time only": ([[2.0]], "output.json chunk 0 has no [start, end] timestamp"),
}


@pytest.mark.parametrize("case", sorted(BAD_TIMES))
def test_malformed_word_times_are_refused_by_both_scorers(tmp_path, case):
    stamps, problem = BAD_TIMES[case]
    obj = {"text": "w", "chunks": [{"text": "w", "timestamp": s} for s in stamps]}
    folder = turn_tree(tmp_path, obj={"text": "", "chunks": []})
    # NaN / inf are not strict JSON: write the file as Python's json does,
    # then vouch for it in asr.json
    atomic_write_bytes(folder / "output.json", json.dumps(obj).encode())
    receipt = read_json(tmp_path / "asr.json")
    receipt["samples"][0]["output_json_sha256"] = sha256_file(folder / "output.json")
    atomic_write_json(tmp_path / "asr.json", receipt)
    for err in refused_by_both(tmp_path):
        assert err.sample == SID and problem in err.message, err.one_line()
        assert err.hint and "asr" in err.hint


def test_backchannel_null_start_is_still_skipped_not_refused():
    # the backchannel rule skips a word with a null start; it takes no part in the order check
    chunks = {
        "chunks": [
            {"timestamp": [1.0, 1.2]},
            {"timestamp": [None, 0.5]},
            {"timestamp": [1.5, None]},
        ]
    }
    assert chunk_times("icc_backchannel/1", chunks, raw=True) == [
        (1.0, 1.2),
        (None, 0.5),
        (1.5, None),
    ]
    with pytest.raises(SampleError, match="chunk 1 has a null start"):
        chunk_times("candor_turn_taking/1", chunks)


@pytest.mark.parametrize(
    "payload, problem",
    [
        (b"\xff\xfe{not utf-8", "is not valid UTF-8 JSON"),
        (b'{"chunks": [', "is not valid UTF-8 JSON"),
    ],
)
def test_unreadable_output_json_names_the_file_and_the_fix(tmp_path, payload, problem):
    folder = turn_tree(tmp_path, [(2.0, 2.4)])
    atomic_write_bytes(folder / "output.json", payload)
    receipt = read_json(tmp_path / "asr.json")
    receipt["samples"][0]["output_json_sha256"] = sha256_file(folder / "output.json")
    atomic_write_json(tmp_path / "asr.json", receipt)
    for err in refused_by_both(tmp_path):
        assert err.sample == SID and err.path == str(folder / "output.json")
        assert f"output.json {problem}" in err.message and "rerun the asr phase" in err.hint


@pytest.mark.parametrize(
    "annotation",
    [
        [{"timestamps": [1.0, 1.4]}],
        {"timestamp": [1.0]},
        [{"timestamp": ["1.0"]}],
        [{"timestamp": [float("nan"), 2.0]}],
    ],
)
def test_official_boundary_of_a_malformed_annotation_is_a_sample_error(annotation):
    with pytest.raises(
        SampleError, match=r"turn_taking.json has no numeric \[0\]\['timestamp'\]"
    ) as err:
        _boundary(SID, "turn_taking", annotation)
    assert err.value.sample == SID and err.value.hint


def test_damaged_v15_vad_cache_entry_is_recomputed(tmp_path):
    from fdb.audio import write_wav
    from scorers import v15_timing

    wav = write_wav(
        tmp_path / "output.wav",
        np.r_[np.zeros(8000), 0.5 * np.ones(8000)].astype(np.float32),
        16000,
    )
    vad, cache = FixedSegments(), tmp_path / "cache"
    cache.mkdir()
    spans, sha = v15_timing.vad_spans(vad, wav, "user_interruption/1", cache)
    v15_timing._SPAN_CACHE.clear()
    (entry,) = cache.iterdir()
    entry.write_text('{"spans": [[0.5')  # cut short by hand: not JSON
    assert v15_timing.vad_spans(vad, wav, "user_interruption/1", cache) == (spans, sha)
    v15_timing._SPAN_CACHE.clear()
    entry.write_text('{"schema": "fdb-vad-cache-1"}')  # no spans
    assert v15_timing.vad_spans(vad, wav, "user_interruption/1", cache) == (spans, sha)
    assert read_json(entry)["spans"] == [list(s) for s in spans]  # rewritten whole
