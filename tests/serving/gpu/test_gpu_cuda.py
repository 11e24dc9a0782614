"""On a CUDA GPU: the full whisper-large-v3 and qwen3-4b configurations (dummy weights, bf16)
serve 16 sessions at once: one Whisper generate for 16 utterances, 16 replies streaming from
one continuous-batching loop. Skipped without CUDA (`pytest -m gpu tests/serving/gpu`)."""

from __future__ import annotations

import asyncio
import threading
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
    # bfloat16: flash attention up to 4 rows, memory-efficient above
    assert engine.identity.settings["cross_attention"] == (
        [[4, ["SDPBackend.FLASH_ATTENTION"]], [None, ["SDPBackend.EFFICIENT_ATTENTION"]]]
        if decoder == "static"
        else None
    )
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
    engine.statics = []
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
    np.testing.assert_allclose(got[:4], want, rtol=0, atol=1e-3)
    print(f"silero_gpu: 32 streams, {call_ms:.2f} ms a call on {torch.cuda.get_device_name()}")


def test_csm_prefill_graphs_speak_the_eager_prefills_frames_on_cuda():
    """CSM on CUDA with its prefill graphs (a prompt right-padded to its length bucket, one graph
    replay) speaks each text's greedy frames as the eager exact-length prefill does; a burst of 8
    arrivals takes 8 replays."""
    torch = _cuda()
    from benchmarks.gpu_tts import TINY
    from serving.gpu.csm import CsmEngine, CsmOptions
    from serving.weights import WeightSource, load_model

    torch.manual_seed(0)
    model = load_model(
        WeightSource("dummy", preset="csm-1b", overrides=TINY), "tts", "cuda", "float32"
    )
    options = CsmOptions(max_batch=8, max_len=256, temperature=0, prefill_graphs=True)
    graphs = CsmEngine(model, options, dummy=True, weights_label="dummy")
    eager = CsmEngine(
        model,
        CsmOptions(max_batch=8, max_len=256, temperature=0, prefill_lengths=()),
        dummy=True,
        weights_label="dummy",
    )
    try:
        assert graphs.padded.lengths and all(
            g[3] is not None for g in graphs.padded._passes.values()
        )
        texts = ["one", "a longer text", "mid size", "x" * 40] * 2
        for text in texts:
            want = [f for f in eager.stream(text)]
            got = [f for f in graphs.stream(text)]
            assert len(got) == len(want)
            for a, b in zip(got, want, strict=True):
                np.testing.assert_allclose(a, b, rtol=0, atol=1e-4)
        before = graphs.prefill_passes
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda text: list(graphs.stream(text)), texts))
        assert graphs.prefill_passes - before == len(texts)
    finally:
        graphs.close()
        eager.close()


def test_csm_overlap_speaks_the_plain_loops_frames_on_cuda():
    """CSM's overlapped loop on CUDA (the next step launched before the last one's audio is read
    from a pinned host buffer) gives 8 concurrent requests, some of them bounded by max_len,
    the frames the plain loop gives them."""
    torch = _cuda()
    from concurrent.futures import ThreadPoolExecutor

    from benchmarks.gpu_tts import TINY
    from serving.gpu.csm import CsmEngine, CsmOptions
    from serving.weights import WeightSource, load_model

    torch.manual_seed(0)
    model = load_model(
        WeightSource("dummy", preset="csm-1b", overrides=TINY), "tts", "cuda", "float32"
    )
    texts = ["one", "a longer text", "mid size", "q" * 60] * 2

    def frames(overlap: bool) -> list[list[np.ndarray]]:
        engine = CsmEngine(
            model,
            CsmOptions(max_batch=4, max_len=96, temperature=0, overlap=overlap),
            dummy=True,
            weights_label="dummy",
        )
        try:
            with ThreadPoolExecutor(8) as pool:
                return list(pool.map(lambda text: list(engine.stream(text)), texts))
        finally:
            engine.close()

    overlapped, plain = frames(True), frames(False)
    for got, want in zip(overlapped, plain, strict=True):
        assert len(got) == len(want) > 0
        for a, b in zip(got, want, strict=True):
            np.testing.assert_allclose(a, b, rtol=0, atol=1e-4)


def test_slot_lm_prefill_graphs_give_the_eager_prefills_tokens_on_cuda():
    """The reply model's prefill graphs (a prompt right-padded to its length, one replay) give
    each prompt the greedy tokens of the eager exact-length prefill, on a tiny Qwen3 in float32."""
    torch = _cuda()
    from serving.gpu.lm_slots import SlotLmEngine
    from tests.serving.gpu.test_lm_slots import TINY, _prompt, _reply

    model = _tiny_model(torch, "qwen3-4b", TINY, "causal_lm_gpu", seed=3, std=0.5)
    prompts = [_prompt(n, seed) for seed, n in enumerate((5, 40, 250, 300, 17))]

    def replies(**kwargs):
        engine = SlotLmEngine(model, max_batch=4, max_len=600, temperature=0.0, **kwargs)
        try:
            return engine, asyncio.run(_all(engine))
        finally:
            engine.close()

    async def _all(engine):
        return await asyncio.gather(*[_reply(engine, p) for p in prompts])

    graphs, got = replies(prefill_graphs=True)
    assert graphs.padded.lengths and all(g[3] is not None for g in graphs.padded._passes.values())
    _, want = replies(prefill_lengths=())
    assert got == want


def test_whisper_encoder_graphs_give_the_eager_encoders_tokens_on_cuda():
    """Whisper's static engine on CUDA with its encoder pass captured per (bucket, window) gives
    each row the tokens of the eager encoder (a tiny random model in float32), in two windows and
    batch sizes that leave stale rows in the bucket."""
    torch = _cuda()
    import copy

    from serving.gpu.whisper_static import StaticWhisper, buckets, prompt_ids, windows
    from tests.serving.gpu.test_whisper_static import BUDGET, TINY, _features

    model = _tiny_model(torch, "whisper-large-v3", TINY, "whisper_gpu", seed=7, std=1.0)
    generation = copy.deepcopy(model.generation_config)
    full = 2 * TINY["max_source_positions"]
    frames = windows(None, full) + [full // 2]

    def engine(graphs):
        static = StaticWhisper(
            model,
            generation,
            prompt_ids(generation, None),
            BUDGET,
            4,
            graphs,
            frames=frames,
            encoder_graphs=graphs,
        )
        static.warm(buckets(4))
        return static

    graphs, eager = engine(True), engine(False)
    assert graphs._encoders and not eager._encoders
    for rows, window, seed in ((3, full, 0), (1, full // 2, 1), (4, full // 2, 2), (2, full, 3)):
        features = _features(rows, seed, window).to("cuda")
        assert graphs.transcribe(features, BUDGET) == eager.transcribe(features, BUDGET)


def test_whisper_lanes_transcribe_at_once_on_their_streams_as_one_lane_does_on_cuda():
    """Whisper's engine with two lanes on CUDA (the whisper-large-v3 configuration, dummy
    weights, bf16: its matrices are large enough for cuBLAS to use a workspace), each lane with
    its own stream, static tensors and graphs, captured in its own thread: 16 utterances at
    once, three times, in batches of one spread over the lanes and running beside each other,
    each get the tokens its lane gives it alone. (A review measured graphs captured in one
    thread giving wrong results in about half of such concurrent replays.) The two lanes need
    not agree with each other: on an H100 (tenth session) one utterance of 16 took a near-tied
    token one step later on lane 1 than on lane 0, alone, one after the other; each lane's
    graphs are their own kernels and workspace, as a batch's bucket is."""
    torch = _cuda()
    from benchmarks.gpu_whisper_repeat import clips as repeat_clips
    from serving.gpu.whisper import WhisperEngine
    from serving.graph.kinds import WhisperGpuOptions

    o = WhisperGpuOptions(
        weights={"load_format": "dummy", "preset": "whisper-large-v3"},
        max_batch=1,
        max_new_tokens=24,
        max_tokens_per_s=None,
        lanes=2,
    )
    engine = WhisperEngine.from_options(o)
    engine._text = lambda ids: " ".join(map(str, ids))  # the token ids, not a placeholder
    engine.warm_graphs()
    assert engine.cuda_streams[0] != engine.cuda_streams[1]
    clips = repeat_clips()  # 3 s tones of their own, so that each clip's tokens differ
    # run_batch takes each lane's work to the lane's own thread (Batcher.in_lane)
    alone = [[engine.run_batch([c], lane=lane)[0] for c in clips] for lane in (0, 1)]
    # each lane alone twice gives the same tokens (the comparison below needs it)
    again = [engine.run_batch([c], lane=1)[0] for c in clips]
    if again != alone[1]:
        # which passes differ, and what else runs in the process (a diagnostic: docs/gpu.md)
        third = [[engine.run_batch([c], lane=lane)[0] for c in clips] for lane in (0, 1)]

        def differ(a, b):
            return [k for k, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]

        # lane 0 twice in a row (no lane 1 between), and each clip twice in a row on lane 0
        solo = [[engine.run_batch([c], lane=0)[0] for c in clips] for _ in range(2)]
        twice = [[engine.run_batch([c], lane=0)[0] for _ in range(2)] for c in clips]
        k = (differ(again, alone[1]) or [0])[0]
        print(
            f"whisper lanes on cuda: lane 0 alone twice in a row differs on "
            f"{differ(solo[0], solo[1])}; a clip twice in a row on lane 0 differs on "
            f"{[j for j, (x, y) in enumerate(twice) if x != y]}; clip {k} on lane 1, first "
            f"pass: {alone[1][k]!r}; second: {again[k]!r}; lane 0: {alone[0][k]!r}"
        )
        print(
            f"whisper lanes on cuda: lane 1's second pass differs from its first on clips "
            f"{differ(again, alone[1])}; a third pass of lane 1 differs from the first on "
            f"{differ(third[1], alone[1])}, from the second on {differ(third[1], again)}; "
            f"lane 0's second pass differs from its first on {differ(third[0], alone[0])}; "
            f"threads: {sorted(t.name for t in threading.enumerate())}; "
            f"{torch.cuda.memory_allocated() / 2**30:.2f} GiB allocated"
        )
    assert again == alone[1]

    async def main():
        return [await asyncio.gather(*[engine.transcribe(c) for c in clips]) for _ in range(3)]

    try:
        rounds = asyncio.run(main())
    finally:
        engine.close()
    lanes = engine.batcher.batch_lanes
    assert set(lanes) == {0, 1} and set(engine.batcher.batch_sizes) == {1}
    # batches of one, taken in the order submitted: batch r * 16 + k is round r's clip k
    wrong = sum(
        got != alone[lanes[r * len(clips) + k]][k]
        for r, texts in enumerate(rounds)
        for k, got in enumerate(texts)
    )
    print(
        f"whisper lanes on cuda: {wrong} of {3 * len(clips)} concurrent transcripts differ "
        f"from their lane's alone; the lanes alone differ on "
        f"{sum(a != b for a, b in zip(*alone, strict=True))} of {len(clips)}"
    )
    assert wrong == 0
    _release(engine)


def test_decode_overlap_gives_the_tokens_of_reading_each_step_on_cuda():
    """The reply model's and Whisper's decode loops on CUDA with the next step launched before
    the last one is read (pinned copies, their events on the engine's stream) give the tokens of
    the loops that read each step first: five replies of different lengths admitted while others
    decode, and Whisper batches whose rows end at an end token (the early stop); and Whisper's
    four-token forced prompt in one pass, captured, gives the tokens of a step each."""
    torch = _cuda()
    import copy

    from serving.gpu.lm_slots import SlotLmEngine
    from serving.gpu.whisper_static import StaticWhisper, buckets, prompt_ids
    from tests.serving.gpu.test_lm_slots import TINY, _prompt, _reply
    from tests.serving.gpu.test_whisper_static import BUDGET, _features
    from tests.serving.gpu.test_whisper_static import TINY as TINY_WHISPER

    model = _tiny_model(torch, "qwen3-4b", TINY, "causal_lm_gpu", seed=3, std=0.5)
    prompts = [_prompt(n, seed) for seed, n in enumerate((5, 40, 250, 300, 17))]

    async def _all(engine):
        first = asyncio.ensure_future(_reply(engine, prompts[0]))
        await asyncio.sleep(0.01)
        rest = await asyncio.gather(*[_reply(engine, p) for p in prompts[1:]])
        return [await first, *rest]

    def replies(overlap: bool):
        engine = SlotLmEngine(model, max_batch=4, max_len=600, temperature=0.0, overlap=overlap)
        try:
            return asyncio.run(_all(engine))
        finally:
            engine.close()

    assert replies(True) == replies(False)

    whisper = _tiny_model(torch, "whisper-large-v3", TINY_WHISPER, "whisper_gpu", seed=7, std=1.0)
    generation = copy.deepcopy(whisper.generation_config)
    features = _features(3, 5).to("cuda")

    def static(overlap: bool) -> StaticWhisper:
        engine = StaticWhisper(
            whisper, generation, prompt_ids(generation, None), BUDGET, 4, True, overlap=overlap
        )
        engine.warm(buckets(4))
        return engine

    free = static(False).transcribe(features, BUDGET)
    generation.eos_token_id = generation.pad_token_id = free[0][1]  # row 0 ends early
    assert static(True).transcribe(features, BUDGET) == static(False).transcribe(features, BUDGET)
    # a four-token forced prompt (large-v3's shape) in one pass, as a graph, against a step each
    generation.lang_to_id, generation.task_to_id = {"<|en|>": 50}, {"transcribe": 52}
    generation.no_timestamps_token_id, generation.is_multilingual = 54, True
    prompt = prompt_ids(generation, "en")
    assert len(prompt) == 4

    def prompted(prompt_pass: bool) -> list[list[int]]:
        engine = StaticWhisper(
            whisper, generation, prompt, BUDGET, 4, True, prompt_pass=prompt_pass
        )
        engine.warm(buckets(4))
        assert bool(engine._prompt_graphs) == (prompt_pass and engine.graphs)
        return engine.transcribe(features, BUDGET)

    assert prompted(True) == prompted(False)


def _tiny_model(torch, preset: str, overrides: dict, kind: str, seed: int, std: float):
    """A tiny random model of ``preset``'s layout on CUDA in float32, its weights drawn wider than
    the default init (so that greedy choices vary), as the CPU tests draw them."""
    from serving.weights import WeightSource, load_model

    torch.manual_seed(seed)
    model = load_model(
        WeightSource(load_format="dummy", preset=preset, overrides=overrides),
        kind,
        "cuda",
        "float32",
    )
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, std)
    return model


def test_each_owner_captures_on_a_stream_of_its_own_and_keeps_it():
    """capture's owner: a capture stream made at its first capture, kept for the next, no other
    owner's, no engine's and not the shared one (graphs of two owners never share a cuBLAS
    workspace, whichever thread captured them)."""
    torch = _cuda()
    from serving.gpu.slots import _capture_stream, capture, engine_stream

    class Owner:
        pass

    a, b = Owner(), Owner()
    x = torch.zeros(4, device="cuda")
    kept = capture(lambda: x.add_(1), owner=a)
    first = a._capture_on
    capture(lambda: x.add_(1), owner=a).replay()
    assert kept.capture_stream is first  # the graph holds its stream too
    capture(lambda: x.add_(1), owner=b)
    handles = {
        a._capture_on.cuda_stream,
        b._capture_on.cuda_stream,
        engine_stream("cuda").cuda_stream,
        _capture_stream().cuda_stream,
    }
    assert a._capture_on is first and len(handles) == 4


def test_engine_streams_are_distinct_from_each_other_and_from_the_capture_stream():
    """After many captures (each drew a pool stream before), engine streams are still streams of
    their own: none is another engine's, nor a thread's capture stream, and a capture replays."""
    torch = _cuda()
    from serving.gpu.slots import _capture_stream, capture, engine_stream

    x = torch.zeros(4, device="cuda")

    def add() -> None:
        x.add_(1)

    graphs = [capture(add) for _ in range(40)]
    streams = [engine_stream("cuda") for _ in range(3)] + [engine_stream("cuda", -3)]
    handles = [s.cuda_stream for s in streams] + [_capture_stream().cuda_stream]
    assert len(set(handles)) == len(handles)
    with torch.cuda.stream(streams[0]):
        graphs[0].replay()
    torch.cuda.synchronize()
    assert x[0].item() == 40 * 2 + 1  # two warm-up calls a capture (captured: not run), a replay


def test_streams_made_here_are_none_of_torchs_pool_on_cuda():
    """Engine and capture streams are CUDA streams of their own, not torch's pool's: every
    stream the pool hands out at the priorities a GPU has (what transformers' continuous
    batching draws, and captures on) is none of them, and work queued on one runs. A graph
    freed on a pool stream clears that stream's cuBLAS workspaces (torch's CUDAGraph::reset):
    on a stream of ours, the workspace our graphs replay with."""
    torch = _cuda()
    from serving.gpu.slots import _capture_stream, capture, engine_stream

    class Owner:
        pass

    owner = Owner()
    x = torch.zeros(4, device="cuda")
    graph = capture(lambda: x.add_(1), owner=owner)
    ours = [engine_stream("cuda"), engine_stream("cuda", -1), _capture_stream(), owner._capture_on]
    handles = {s.cuda_stream for s in ours}
    assert len(handles) == len(ours)
    assert [s.priority for s in ours[:2]] == [0, -1]  # the priorities asked for
    pool = {torch.cuda.Stream(priority=p).cuda_stream for p in range(-6, 1) for _ in range(2 * 32)}
    assert not handles & pool
    with torch.cuda.stream(ours[0]):
        graph.replay()
    ours[0].synchronize()
    assert x[0].item() == 3  # two warm-up calls, one replay
