"""The official backchannel rules (clean-room): the word-overlap rule, the per-segment verdict
under both rule eras, bins, interpolation, the JSD and its sentinel, the carry-over quirk, the
VAD call (parity with silero-vad's own return_seconds call, the 16 kHz assumption) and the
subset numbers folded into official.json."""

from __future__ import annotations

import math
import shutil

import numpy as np
import pytest

from benchmarks.support.treebuild import FixedSegments, V10Tree, bursts
from fdb.audio import Audio, read_wav, wav_bytes
from fdb.errors import FdbError, SampleError
from fdb.io import atomic_write_bytes, read_json
from scorers import v10_backchannel as bc
from scorers.v10_official import score_official

GT = bc.ICC_GT_NAME
SINCE, BEFORE = bc.BackchannelOptions(), bc.BackchannelOptions(rule="before-2026-02-22")


def test_word_overlap_rule():
    a, b = 2.0, 3.0
    assert bc.words_in_segment([(2.2, 2.5)], a, b) == 1  # inside
    assert bc.words_in_segment([(2.8, 3.4)], a, b) == 1  # over the end
    assert bc.words_in_segment([(1.5, 2.1)], a, b) == 1  # over the start
    assert (
        bc.words_in_segment([(1.0, 2.0), (3.0, 3.5), (3.1, 3.2)], a, b) == 1
    )  # touching: only s <= b < e
    assert (
        bc.words_in_segment([(None, 2.5), (2.5, None)], a, b) == 0
    )  # null start; null end before b
    assert (
        bc.words_in_segment([(3.5, None)], a, b) == 0
    )  # null end after b: zero-length at 3.5, outside
    assert (
        bc.words_in_segment([(3.0, None)], a, b) == 1
    )  # null end at b: [3.0, 3.0] counts (s >= a, e <= b)


def test_verdict_is_the_last_segment_and_rules_differ():
    chunks = [(1.0, 1.2), (5.0, 5.2), (5.3, 5.4), (5.5, 5.6), (9.0, 9.2)]
    segments = [
        (0.9, 1.3),
        (4.9, 5.7),
        (8.9, 9.3),
    ]  # backchannel, takeover (3 words < 1 s), backchannel
    tor, preds = bc.sample_verdict(segments, chunks, SINCE.rule)
    assert tor == 0 and preds == segments  # TOR overwritten by the last segment; every segment kept
    tor, preds = bc.sample_verdict(segments, chunks, BEFORE.rule)
    assert tor == 0 and preds == [(8.9, 9.3)]  # the takeover cleared the list
    long_seg = [(0.9, 1.3), (2.0, 5.1), (8.9, 9.3)]  # a segment over 3 s stops the loop with TOR 1
    assert bc.sample_verdict(long_seg, chunks, SINCE.rule) == (1, [(0.9, 1.3)])
    assert bc.sample_verdict([(0.0, 1.5)], [(0.1, 0.2)], SINCE.rule) == (
        1,
        [(0.0, 1.5)],
    )  # >= 1 s: TOR 1
    many = [(0.1 * i, 0.1 * i + 0.05) for i in range(4)]
    assert bc.sample_verdict([(0.0, 2.5)], many, BEFORE.rule) == (1, [])  # > 3 words
    assert bc.sample_verdict([], chunks, SINCE.rule) == (0, [])


def test_bins_use_float_division():
    assert int(0.6 / 0.2) == 2
    hist = bc.histogram([(0.6, 0.6)], 1.0)  # n = int(1.0 / 0.2) + 1 = 6; bin 2 only
    assert hist.size == 6 and int(np.argmax(hist)) == 2
    both = bc.histogram([(0.0, 0.4), (0.2, 5.0)], 1.0)  # bins 0-2 and 1-5 (clipped at n)
    assert np.round(both / both[0]).tolist() == [1, 2, 2, 1, 1, 1]
    assert both.sum() == pytest.approx(1.0)


def js_distance(p, q):
    """Independent natural-log Jensen-Shannon distance."""
    p, q = np.asarray(p) / np.sum(p), np.asarray(q) / np.sum(q)
    m = (p + q) / 2
    kl = lambda x, y: float(np.sum(np.where(x > 0, x * np.log(x / y), 0.0)))  # noqa: E731
    return math.sqrt((kl(p, m) + kl(q, m)) / 2)


def test_jsd_interpolation_and_sentinel():
    gt = [0.5, 0.25, 0.25]
    preds = [(0.0, 0.1)]
    n = int(0.9 / 0.2) + 1  # 5 bins
    resized = np.interp(np.linspace(0, 1, n), np.linspace(0, 1, 3), gt)
    assert resized.tolist() == pytest.approx([0.5, 0.375, 0.25, 0.25, 0.25])
    value = bc.official_jsd(preds, 0.9, gt)
    assert value == pytest.approx(js_distance(bc.histogram(preds, 0.9), resized), abs=1e-12)
    assert 0 < value < math.sqrt(math.log(2))
    assert bc.official_jsd([], 0.9, gt) == bc.official_jsd([], 0.9, None) == 1.0
    assert bc.official_jsd(preds, 0.9, None) is None


def item(sid, chunks, segments, frames=16000 * 10, rate=16000):
    return bc.BackchannelInput(f"icc_backchannel/{sid}", sid, chunks, tuple(segments), frames, rate)


def test_carry_over_quirk_and_summary():
    rows = bc.score_rows(
        [
            item("0", ((0.1, 0.4), (0.5, 0.6), (0.7, 0.8)), [(0.0, 0.9)]),
            item("1", None, [(1.0, 1.4)]),
        ],
        SINCE,
        None,
    )
    assert (
        [r.tor for r in rows] == [1, 1] and rows[1].tor_carried_over and rows[1].predictions == []
    )
    assert [r.frequency for r in rows] == [0.1, 0.0] and [r.jsd for r in rows] == [None, 1.0]
    summary = bc.summarize(rows, SINCE, None)
    assert (summary.tor_mean, summary.tor_std, summary.frequency_mean) == (1.0, 0.0, 0.05)
    assert summary.frequency_std == pytest.approx(0.05) and summary.jsd_mean is None
    assert summary.note == bc.NO_GT_NOTE and summary.without_backchannel == 1
    with pytest.raises(
        SampleError, match="icc_backchannel/1: output.json is missing on the first sample"
    ):
        bc.score_rows([item("1", None, [])], SINCE, None)
    empty = bc.summarize([], SINCE, None)
    assert (empty.n, empty.tor_mean, empty.jsd_mean, empty.note) == (0, None, None, None)


def test_icc_ground_truth_loading(tmp_path, reference):
    shared = reference.parent / GT
    gt = bc.load_icc_gt(shared)
    assert gt.matches_pin and sorted(gt.distributions, key=int) == [str(i) for i in range(55)]
    checkout = tmp_path / "fdb" / "v1_v1.5" / "evaluation"
    checkout.mkdir(parents=True)
    shutil.copyfile(shared, checkout / GT)
    assert bc.load_icc_gt(tmp_path / "fdb").sha256 == gt.sha256
    assert bc.load_icc_gt(tmp_path / "fdb" / "v1_v1.5").path == str(checkout / GT)
    with pytest.raises(FdbError, match="holds no icc_gt_distribution.json"):
        bc.load_icc_gt(tmp_path)
    (tmp_path / "odd.json").write_text('{"0": [0.5, 0.5]}')
    odd = bc.load_icc_gt(tmp_path / "odd.json")
    assert not odd.matches_pin
    assert "not the pinned" in bc.summarize([], SINCE, odd).note
    with pytest.raises(
        SampleError, match="icc_backchannel/7: odd.json has no distribution for id '7'"
    ):
        bc.score_rows([item("7", ((0.1, 0.2),), [(0.0, 0.5)])], SINCE, odd)


class Recording:
    """Wraps a segmenter and keeps the length of what it was given."""

    def __init__(self, inner):
        self.inner, self.identity, self.lengths = inner, inner.identity, []

    def segments(self, samples, settings=None):
        self.lengths.append(len(samples))
        return self.inner.segments(samples, settings)


def test_sixteen_khz_assumption_vs_resampling():
    audio = Audio(bursts(2.0, (0.5, 1.0), amplitude=0.5), 16000)
    seg = FixedSegments()
    assert bc.official_segments(seg, audio, "assume-16k") == [(0.5, 1.0)]
    fast = Audio(np.repeat(audio.samples, 3), 48000)  # the same 2 s at 48 kHz
    vad = Recording(seg)
    assert bc.official_segments(vad, fast, "assume-16k") == [(1.5, 3.0)]  # times x3
    assert vad.lengths == [96000]
    resampled = bc.official_segments(vad, fast, "resample")
    assert vad.lengths[-1] == 32000 and resampled[0][0] == pytest.approx(0.5, abs=0.1)


def test_official_vad_call_parity_with_silero(reference, silero):
    """Our segments equal silero-vad's own get_speech_timestamps(wav, model, return_seconds=True)
    with every other argument at its default, also for a 24 kHz file taken for 16 kHz."""
    import torch
    from silero_vad import get_speech_timestamps, load_silero_vad

    from fdb.audio import resample

    model = load_silero_vad()
    speech = read_wav(reference / "smooth_turn_taking_example/1/output.wav").samples
    for samples, rate in ((speech, 16000), (resample(speech, 16000, 24000), 24000)):
        direct = get_speech_timestamps(torch.from_numpy(samples.copy()), model, return_seconds=True)
        ours = bc.official_segments(silero, Audio(samples, rate), "assume-16k")
        assert ours == [(d["start"], d["end"]) for d in direct] and ours
        assert all(round(x, 1) == x for pair in ours for x in pair)


def backchannel_tree(root, with_json=True):
    tree = V10Tree(root)
    # sample 0: a 0.5 s backchannel of one word, then a 4 s turn (stops the loop)
    tree.add(
        "icc_backchannel",
        "0",
        20.0,
        audio=bursts(20.0, (2.0, 2.5), (6.0, 10.0)),
        words=[(2.1, 2.4), (6.1, 6.5), (6.6, 7.0)],
    )
    # sample 1: a short takeover (3 words in 0.8 s), then a backchannel
    tree.add(
        "icc_backchannel",
        "1",
        20.0,
        audio=bursts(20.0, (3.0, 3.8), (12.0, 12.4)),
        words=[(3.0, 3.2), (3.3, 3.5), (3.6, 3.8), (12.1, 12.3)],
    )
    tree.add("icc_backchannel", "2", 20.0, eligible=False, reasons=["pacing"])
    return tree.finish()


def test_backchannel_folded_into_official_json(tmp_path, reference):
    root = backchannel_tree(tmp_path)
    gt = reference.parent / GT
    summary = score_official(root, icc_gt=gt, vad=FixedSegments())
    sub = summary.subsets["icc_backchannel"]
    rows = sub.backchannel.samples
    assert [r.predictions for r in rows] == [[(2.0, 2.5)], [(3.0, 3.8), (12.0, 12.4)]]
    assert [r.tor for r in rows] == [1, 0]
    assert (sub.selected, sub.eligible, sub.evaluated, sub.takeovers) == (3, 2, 2, 1)
    assert sub.backchannel_frequency == pytest.approx((1 / 20 + 2 / 20) / 2)
    assert 0 < sub.backchannel_jsd < 0.84 and sub.backchannel.jsd_std is not None
    assert summary.rules.icc_gt.matches_pin
    old = score_official(root, icc_gt=gt, vad=FixedSegments(), options=BEFORE).subsets[
        "icc_backchannel"
    ]
    assert [r.predictions for r in old.backchannel.samples] == [[(2.0, 2.5)], [(12.0, 12.4)]]
    assert read_json(root / "official.json")["rules"]["backchannel_rule"] == "before-2026-02-22"
    none = score_official(root, vad=FixedSegments()).subsets["icc_backchannel"]
    assert none.backchannel_jsd is None and none.note == bc.NO_GT_NOTE
    assert none.backchannel_frequency == sub.backchannel_frequency


def test_backchannel_window_length_checked(tmp_path):
    root = backchannel_tree(tmp_path)
    folder = root / "icc_backchannel" / "1"
    atomic_write_bytes(folder / "output.wav", wav_bytes(np.zeros(16000 * 19, np.float32), 16000))
    with pytest.raises(SampleError, match="icc_backchannel/1: .*output.wav differs from asr.json"):
        score_official(root, vad=FixedSegments())
