"""On a CUDA GPU: the full whisper-large-v3 and qwen3-4b configurations (dummy weights, bf16)
serve 16 sessions at once: one Whisper generate for 16 utterances, 16 replies streaming from
one continuous-batching loop. Skipped without CUDA (`pytest -m gpu tests/serving/gpu`)."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

pytestmark = pytest.mark.gpu
SESSIONS = 16


def _cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    pytest.importorskip("transformers")  # after the CUDA check: its import alone takes seconds
    return torch


@pytest.mark.parametrize("decoder", ["static", "generate"])
def test_whisper_large_v3_configuration_batches_sessions_on_cuda(decoder):
    _cuda()
    from serving.gpu.whisper import WhisperEngine
    from serving.graph.kinds import WhisperGpuOptions

    o = WhisperGpuOptions(
        weights={"load_format": "dummy", "preset": "whisper-large-v3"},
        max_batch=SESSIONS,
        max_new_tokens=32,
        max_tokens_per_s=None,
        decoder=decoder,
        window_s=None,
    )
    engine = WhisperEngine.from_options(o)
    engine.warm_graphs()
    clips = [
        np.random.default_rng(i).normal(0, 0.1, 16000 * 3).astype(np.float32)
        for i in range(SESSIONS)
    ]

    async def main():
        await engine.transcribe(clips[0])  # warm
        start = time.monotonic()
        texts = await asyncio.gather(*[engine.transcribe(c) for c in clips])
        return texts, time.monotonic() - start

    texts, elapsed = asyncio.run(main())
    print(
        f"whisper-large-v3 (dummy, bf16, decoder {decoder}): {SESSIONS} utterances in one batch "
        f"of 32 tokens: {elapsed * 1000:.0f} ms"
    )
    assert len(texts) == SESSIONS and engine.batcher.batch_sizes[-1] == SESSIONS
    engine.close()
    _release(engine)


def _release(engine) -> None:
    """The model and its cache off the GPU before the next test loads another."""
    import gc

    import torch

    engine.model = engine.manager = engine.static = None
    gc.collect()
    torch.cuda.empty_cache()


@pytest.mark.parametrize(
    ("engine_kind", "cuda_graphs"),
    [("slots", True), ("continuous_batching", True), ("continuous_batching", False)],
)
def test_qwen3_4b_configuration_streams_sessions_from_one_decode_loop_on_cuda(
    engine_kind, cuda_graphs
):
    _cuda()
    from serving.gpu.chat import ChatEngine
    from serving.graph.kinds import CausalLmGpuOptions

    o = CausalLmGpuOptions(
        weights={"load_format": "dummy", "preset": "qwen3-4b"},
        max_batch=SESSIONS,
        cuda_graphs=cuda_graphs,
        engine=engine_kind,
        max_prompt_tokens=512,
    )
    engine = ChatEngine(o.source("llm"), o)

    async def reply(i: int) -> tuple[float, int]:
        start, first, pieces = time.monotonic(), None, 0
        async for _ in engine.stream([{"role": "user", "content": f"Question number {i}?"}], 48):
            first = first if first is not None else time.monotonic() - start
            pieces += 1
        return first, pieces

    async def main():
        await reply(-1)  # warm
        start = time.monotonic()
        results = await asyncio.gather(*[reply(i) for i in range(SESSIONS)])
        return results, time.monotonic() - start

    try:
        results, elapsed = asyncio.run(main())
        slots = engine.slots
        step = f", {slots.step_s / slots.steps * 1000:.1f} ms a step" if slots else ""
    finally:
        engine.close()
        _release(engine)
    firsts = sorted(r[0] for r in results)
    print(
        f"qwen3-4b (dummy, bf16, {engine_kind}, CUDA graphs {'on' if cuda_graphs else 'off'}): "
        f"{SESSIONS} "
        f"replies of 48 tokens in {elapsed * 1000:.0f} ms, "
        f"first text p50 {firsts[len(firsts) // 2] * 1000:.0f} ms, max {firsts[-1] * 1000:.0f} ms"
        f"{step}"
    )
    assert all(pieces > 1 for _, pieces in results)


def test_silero_batch_on_cuda_gives_each_stream_the_cpu_modules_probabilities():
    """silero_gpu's network on the GPU: 32 streams of noise-shaped audio scored in one call a
    frame; each stream's probabilities are its own CPU module's (float rounding aside), and the
    time of a call is printed (the CPU stage makes one call per frame and session)."""
    torch = _cuda()
    silero_vad = pytest.importorskip("silero_vad")
    from fdb.models.vad import FRAME, SileroBatch

    rng = np.random.default_rng(0)
    t = np.arange(FRAME * 50) / 16000
    clips = [
        (rng.normal(0, 0.05, t.size) * (1 + np.sin(2 * np.pi * (0.5 + i / 32) * t))).astype(
            np.float32
        )
        for i in range(32)
    ]
    batch = SileroBatch("cuda")
    streams = [batch.stream() for _ in clips]
    got = np.zeros((32, 50))
    batch.score([(s, c[:FRAME]) for s, c in zip(streams, clips, strict=True)])  # warm
    for s in streams:
        s.reset()
    started = time.perf_counter()
    for k in range(50):
        got[:, k] = batch.score(
            [(s, c[k * FRAME : (k + 1) * FRAME]) for s, c in zip(streams, clips, strict=True)]
        )
    call_ms = (time.perf_counter() - started) * 1000 / 50
    want = np.zeros((4, 50))
    for i in range(4):
        model = silero_vad.load_silero_vad(onnx=False)
        for k in range(50):
            frame = torch.from_numpy(clips[i][k * FRAME : (k + 1) * FRAME])
            want[i, k] = float(model(frame, 16000).item())
    np.testing.assert_allclose(got[:4], want, rtol=0, atol=1e-4)
    print(f"silero_gpu: 32 streams, {call_ms:.2f} ms a call on {torch.cuda.get_device_name()}")
