"""The batched Moshi engine on CPU with a tiny configuration (serving/gpu/moshi.py): a session's
frames do not depend on the other sessions of its steps, on steps it sat out, or on who held
its slot before (its KV cache, positions and codec state are its own), with either codec; the
streaming codec's state is reset with the slot."""

from __future__ import annotations

import threading

import numpy as np
import pytest

pytest.importorskip("transformers")

import torch  # noqa: E402 - after the skip

from benchmarks.gpu_native import TINY  # noqa: E402
from serving.gpu.moshi import MoshiEngine, MoshiOptions  # noqa: E402
from serving.weights import WeightSource, load_model  # noqa: E402

FRAME = 1920


@pytest.fixture(scope="module")
def model():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = load_model(
        WeightSource("dummy", preset="moshi-7b", overrides=TINY), "native", "cpu", "float32"
    )
    for (
        module
    ) in model.audio_encoder.modules():  # dummy codebooks are zero: make audio follow the codes
        if hasattr(module, "embed_sum"):
            module.embed_sum.normal_(std=0.05)
            module._embed = None
    yield model
    torch.set_num_threads(threads)


def _engine(model, codec: str) -> MoshiEngine:
    # top-k 1: greedy, so a frame is a function of the session's own inputs only
    options = MoshiOptions(
        max_batch=4, max_len=64, text_top_k=1, audio_top_k=1, codec=codec, gather_ms=200
    )
    return MoshiEngine(model, options, dummy=True, weights_label="dummy")


def _frames(seed: int, count: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.normal(0, 0.1, FRAME).astype(np.float32) for _ in range(count)]


def _run(
    engine: MoshiEngine, sessions: dict[int, list[np.ndarray | None]]
) -> dict[int, list[np.ndarray]]:
    """Each step, every session with a frame (None: it sits this step out) hands it in; the
    step waits for all of them (gather_ms covers the submits)."""
    slots = {name: engine.open() for name in sessions}
    out: dict[int, list[np.ndarray]] = {name: [] for name in sessions}
    for step in range(max(len(f) for f in sessions.values())):
        futures = {
            name: engine.submit(slots[name], frames[step])
            for name, frames in sessions.items()
            if step < len(frames) and frames[step] is not None
        }
        for name, future in futures.items():
            text, audio = future.result(timeout=60)
            assert text == "" and audio.shape == (FRAME,)
            out[name].append(audio.copy())
    for slot in slots.values():
        engine.close(slot)
    return out


@pytest.mark.parametrize("codec", ["streaming", "window"])
def test_a_sessions_frames_do_not_depend_on_the_other_sessions(model, codec):
    engine = _engine(model, codec)
    try:
        mine = _frames(1, 6)
        alone = _run(engine, {0: mine})[0]
        assert len({a.tobytes() for a in alone}) == 6  # each frame its own audio
        # again on reused slots: mine next to a session that skips steps 1 and 3, after a third
        # session held a slot for a while (state left behind must not leak into a new session)
        _run(engine, {9: _frames(7, 3), 8: _frames(8, 2)})
        other = _frames(2, 6)
        other[1] = other[3] = None
        batched = _run(engine, {0: mine, 1: other})
        assert len(batched[1]) == 4
        for got, want in zip(batched[0], alone, strict=True):
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
        assert engine.steps >= 6 + 3 + 6 and engine.rows > engine.steps  # rows shared steps
        assert engine.identity.settings["codec"] == codec
    finally:
        engine.shutdown()


def test_the_streaming_codec_keeps_state_per_slot(model):
    """With the streaming codec a slot's frames continue its stream (unlike a fresh encode of each
    frame); a reset slot starts from zero state and position."""
    engine = _engine(model, "streaming")
    try:
        frames = _frames(3, 4)
        _run(engine, {0: frames})
        encoded, decoded = engine.mimi.mimi.positions()
        assert encoded[0].item() == 4 and decoded[0].item() == 4
        done = threading.Event()
        slot = engine.open()
        engine.submit(slot, frames[0]).add_done_callback(lambda _: done.set())
        assert done.wait(60)
        encoded, decoded = engine.mimi.mimi.positions()
        assert slot == 0 and encoded[0].item() == 1 and decoded[0].item() == 1  # reset at open
        engine.close(slot)
    finally:
        engine.shutdown()


def test_a_step_attends_its_length_bucket_with_the_same_frames(model, monkeypatch):
    """Past 256 frames the step attends 512 positions, before it 256; the frames equal those of
    steps that attend all ``max_len`` positions, and a closed slot goes back to position 0."""
    from serving.gpu import lm_slots

    def run() -> tuple[list[np.ndarray], list[int]]:
        options = MoshiOptions(max_batch=2, max_len=512, text_top_k=1, audio_top_k=1)
        engine = MoshiEngine(model, options, dummy=True, weights_label="dummy")
        lengths: list[int] = []
        bucket = lm_slots.length_bucket
        monkeypatch.setattr(
            lm_slots, "length_bucket", lambda p, m: lengths.append(chosen(p, m)) or lengths[-1]
        )
        try:
            out = _run(engine, {0: _frames(3, 260)})[0]
            engine.submit(engine.open(), _frames(4, 1)[0]).result(timeout=60)
            assert engine._positions[:2] == [1, 0]  # the closed slot started again at 0
        finally:
            engine.shutdown()
            monkeypatch.setattr(lm_slots, "length_bucket", bucket)
        return out, lengths

    chosen = lm_slots.length_bucket
    bucketed, lengths = run()
    assert lengths[:256] == [256] * 256 and set(lengths[256:260]) == {512}
    chosen = lambda p, m: m  # noqa: E731 - every step attends all positions
    whole, lengths = run()
    assert set(lengths) == {512}
    assert all(np.array_equal(a, b) for a, b in zip(bucketed, whole, strict=True))
