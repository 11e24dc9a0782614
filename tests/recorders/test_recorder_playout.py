"""Observation-window playout: FIFO from receipt, gaps, cut at T, barge-in drops, exact length."""

from __future__ import annotations

import numpy as np

from fdb.dialects import TURN_BASED
from fdb.playout import playout_window, trace_playout_inputs
from tests.recorders.recorder_fakes import Reply, good_trace, tone

RATE = 16000  # tests at 16 kHz output skip resampling, so sample positions are exact
LEVEL = 8000


def chunk(ms: float, level: int = LEVEL) -> bytes:
    return np.full(int(RATE * ms / 1000), level, dtype="<i2").tobytes()


def spans(window: np.ndarray) -> list[tuple[int, int]]:
    """[start, end) sample spans of non-silence."""
    on = np.abs(window) > 1e-6
    edges = np.flatnonzero(np.diff(np.concatenate([[0], on.astype(int), [0]])))
    return list(zip(edges[::2].tolist(), edges[1::2].tolist(), strict=True))


def test_no_audio_is_silence_of_the_exact_length():
    samples, cuts = playout_window([], [], 24000, 1.0, n_samples=16001)
    assert samples.dtype == np.float32 and len(samples) == 16001
    assert not samples.any() and cuts == 0


def test_fifo_queueing_starts_each_chunk_after_the_previous_one():
    deltas = [(0.1, chunk(200), "r"), (0.15, chunk(100), "r")]
    samples, _ = playout_window(deltas, [], RATE, 1.0)
    assert spans(samples) == [(1600, 6400)]  # 0.1 s + 0.2 s + 0.1 s back to back


def test_gaps_stay_in():
    deltas = [(0.1, chunk(100), "r"), (0.5, chunk(100), "r")]
    samples, _ = playout_window(deltas, [], RATE, 1.0)
    assert spans(samples) == [(1600, 3200), (8000, 9600)]


def test_audio_queued_at_T_is_cut_and_later_audio_ignored():
    deltas = [(0.9, chunk(500), "r"), (1.2, chunk(100), "r")]
    samples, _ = playout_window(deltas, [], RATE, 1.0)
    assert len(samples) == 16000
    assert spans(samples) == [(14400, 16000)]


def test_cancellation_drops_queued_audio_of_that_response_only():
    deltas = [(0.0, chunk(1000), "r1"), (0.1, chunk(200, level=4000), "r2")]
    samples, cuts = playout_window(deltas, [(0.3, "r1")], RATE, 2.0)
    assert cuts == 1
    assert spans(samples) == [(0, 8000)]
    assert np.allclose(samples[:4800], LEVEL / 32767)  # r1 until the cut at 0.3 s
    assert np.allclose(samples[4800:8000], 4000 / 32767)  # r2 moves up behind it


def test_cancellation_with_nothing_queued_is_not_a_cut():
    deltas = [(0.0, chunk(100), "r1")]
    samples, cuts = playout_window(deltas, [(0.5, "r1"), (0.6, "r9")], RATE, 1.0)
    assert cuts == 0 and spans(samples) == [(0, 1600)]


def test_cancellation_after_T_is_not_counted():
    samples, cuts = playout_window([(0.5, chunk(1000), "r")], [(1.5, "r")], RATE, 1.0)
    assert cuts == 0 and spans(samples) == [(8000, 16000)]


def test_audio_received_before_t0_plays_from_its_receipt():
    samples, _ = playout_window([(-0.1, chunk(300), "r")], [], RATE, 1.0)
    assert spans(samples) == [(0, 3200)]


def test_24k_output_is_resampled_to_the_exact_input_length_and_place():
    pcm = tone(500, rate=24000)
    samples, _ = playout_window([(0.25, pcm, "r")], [], 24000, 1.0, n_samples=16000)
    assert len(samples) == 16000
    energy = samples**2
    inside = energy[4000:12000].sum()
    assert inside / energy.sum() > 0.999
    assert np.sqrt(np.mean(samples[5000:11000] ** 2)) > 0.15


def test_window_is_deterministic():
    deltas = [(0.1 * k, tone(150, rate=24000), f"r{k % 2}") for k in range(8)]
    a = playout_window(deltas, [(0.35, "r1")], 24000, 1.2)
    b = playout_window(deltas, [(0.35, "r1")], 24000, 1.2)
    assert a.barge_in_cuts == b.barge_in_cuts and np.array_equal(a.samples, b.samples)


def test_trace_inputs_slice_output_pcm_by_offsets():
    events, output = good_trace(replies=(Reply(at=0.3, cancel=True),))
    deltas, cancels = trace_playout_inputs(events, output, TURN_BASED)
    assert len(deltas) == 3 and b"".join(d[1] for d in deltas) == output
    assert {d[2] for d in deltas} == {"resp_1"}
    assert len(cancels) == 1 and cancels[0][1] == "resp_1"
