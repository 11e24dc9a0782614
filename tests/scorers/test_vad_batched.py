"""Batched Silero VAD: segments_many equals silero-vad's own one-file get_speech_timestamps, and
the scorers' SegmentMemo computes a block in one batched call."""

from __future__ import annotations

import numpy as np
import pytest

from fdb.audio import read_wav
from fdb.models import BackendIdentity
from fdb.models.vad import VadSettings
from scorers.segmenter import SegmentMemo, prefetch_blocks
from tests.conftest import REFERENCE, needs_examples


def _reference_arrays() -> list[np.ndarray]:
    arrays = []
    for path in sorted(REFERENCE.rglob("*.wav")):
        audio = read_wav(path, path.name)
        if audio.rate == 16000:
            arrays.append(audio.samples)
    assert arrays, f"no 16 kHz wav under {REFERENCE}"
    rng = np.random.default_rng(7)
    cuts = []
    for samples in arrays[:3]:  # odd lengths: a short last window is zero-padded in both paths
        start = int(rng.integers(0, len(samples) // 2))
        cuts.append(samples[start : start + 16000 * 3 + int(rng.integers(1, 511))].copy())
    return arrays + cuts + [np.zeros(300, np.float32), np.zeros(0, np.float32)]


@needs_examples
@pytest.mark.parametrize(
    "settings", [VadSettings(), VadSettings(speech_pad_ms=30, min_silence_duration_ms=300)]
)
def test_segments_many_equals_one_file_silero(silero, settings):
    import torch
    from silero_vad import get_speech_timestamps

    arrays = _reference_arrays()
    expected = []
    for samples in arrays:
        if len(samples) == 0:
            expected.append([])
            continue
        silero._model.reset_states()
        stamps = get_speech_timestamps(
            torch.from_numpy(samples),
            silero._model,
            threshold=settings.threshold,
            min_speech_duration_ms=settings.min_speech_duration_ms,
            min_silence_duration_ms=settings.min_silence_duration_ms,
            speech_pad_ms=settings.speech_pad_ms,
        )
        expected.append([(s["start"] / 16000, s["end"] / 16000) for s in stamps])
    assert any(expected), "the reference audio must contain speech"
    assert silero.segments_many(arrays, settings, batch=4) == expected
    assert [silero.segments(a, settings) for a in arrays[:2]] == expected[:2]


class CountingSegmenter:
    identity = BackendIdentity(kind="vad", name="counting")

    def __init__(self):
        self.batches: list[int] = []
        self.singles = 0

    def segments(self, samples, settings=VadSettings()):
        self.singles += 1
        return [(0.0, len(samples) / 16000)]

    def segments_many(self, arrays, settings=VadSettings()):
        self.batches.append(len(arrays))
        return [[(0.0, len(a) / 16000)] for a in arrays]


def test_memo_prefetches_blocks_and_skips_unreadable_items():
    inner = CountingSegmenter()
    memo = SegmentMemo(inner)
    items = list(range(5))

    def load(i):
        if i == 3:
            raise ValueError("corrupt wav")
        return [np.full(1600 * (i + 1), 0.1, np.float32)]

    seen = [block for block in prefetch_blocks(memo, items, load, VadSettings(), block=2)]
    assert seen == [[0, 1], [2, 3], [4]]
    assert inner.batches == [2, 1, 1]  # the unreadable item is skipped, not fatal
    assert memo.segments(np.full(1600 * 2, 0.1, np.float32)) == [(0.0, 0.2)]
    assert inner.singles == 0  # answered from the memo
    memo.segments(np.full(1600 * 9, 0.1, np.float32))  # not prefetched: computed on demand
    assert inner.singles == 1
    memo.prefetch([np.full(1600, 0.1, np.float32)])  # already known: no model call
    assert inner.batches == [2, 1, 1]
