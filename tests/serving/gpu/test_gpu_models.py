"""Tiny dummy Whisper and Qwen3 models on CPU: the utterances of several sessions are one
generate with a result each; replies of several sessions stream from one continuous-batching
loop, each capped at its own max_new_tokens, and leaving a stream cancels its request; the chat
node streams a turn's reply and takes over a reply prefetched with the same messages."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

from serving.graph.kinds import CausalLmGpuOptions, WhisperGpuOptions
from tests.serving.gpu.conftest import tiny_asr, tiny_llm

pytest.importorskip("transformers")


def _options(cls, spec: dict):
    return cls(**{k: v for k, v in spec.items() if k != "kind"})


def test_whisper_engine_transcribes_waiting_utterances_in_one_batch():
    from serving.gpu.whisper import DUMMY_TEXT, WhisperEngine

    o = _options(WhisperGpuOptions, tiny_asr(max_new_tokens=12))
    engine = WhisperEngine.from_options(o)
    # the decode bound: 8 tokens a second of the longest utterance (within the 2 s window), 4 to 12
    budget = [
        engine.token_budget([np.zeros(n, dtype=np.float32)]) for n in (1600, 8000, 12000, 60000)
    ]
    assert budget == [4, 4, 6, 12]
    assert engine.samples == 2 * 100 * 160  # the encoder's window: 2 frames per position
    identity = engine.identity  # what /health and every record say about this recognizer
    assert (
        identity.kind == "asr" and identity.name == "whisper_gpu/whisper-large-v3 (dummy weights)"
    )
    assert identity.checkpoint is None and identity.settings["weights"].startswith("dummy weights")
    assert identity.settings["cross_attention"] == [[None, None]]  # a CPU: torch's choice

    async def main():
        clips = [
            np.random.default_rng(n).normal(0, 0.1, n).astype(np.float32)
            for n in (8000, 16000, 60000)
        ]
        return await asyncio.gather(*[engine.transcribe(c) for c in clips])

    texts = asyncio.run(main())
    assert engine.batcher.batch_sizes == [3]
    assert len(texts) == 3 and all(t.startswith(DUMMY_TEXT) for t in texts)
    # the batch's longest clip (3.75 s, cut to the 2 s window) bounds it: 12 tokens,
    # + the decoder prompt
    assert all(int(t.split()[-2]) <= 12 + 4 for t in texts)


def test_whisper_lanes_run_a_batch_that_comes_during_another_at_once_with_the_same_text():
    """lanes 2: each lane has static tensors of its own; an utterance that comes while lane 0's
    batch runs is transcribed on lane 1 before that batch ends, and gets the text lane 0 gives
    the same utterance alone."""
    import threading

    from serving.gpu.whisper import WhisperEngine

    o = _options(WhisperGpuOptions, tiny_asr(max_new_tokens=12, lanes=2))
    engine = WhisperEngine.from_options(o)
    assert len(engine.statics) == 2 and engine.statics[0] is not engine.statics[1]
    assert engine.statics[0].k[0].data_ptr() != engine.statics[1].k[0].data_ptr()
    assert engine.identity.settings["lanes"] == 2
    engine._text = lambda ids: " ".join(map(str, ids))  # the token ids, not a placeholder
    clips = [np.random.default_rng(n).normal(0, 0.1, n).astype(np.float32) for n in (8000, 16000)]
    alone = [engine.run_batch([c], lane=0) for c in clips]
    held, release = threading.Event(), threading.Event()
    transcribe = engine.statics[0].transcribe

    def slow(features, budget):  # lane 0 holds its batch until lane 1's is done
        held.set()
        assert release.wait(30)
        return transcribe(features, budget)

    engine.statics[0].transcribe = slow

    async def main():
        first = asyncio.ensure_future(engine.transcribe(clips[0]))
        await asyncio.get_running_loop().run_in_executor(None, held.wait, 30)
        second = await asyncio.wait_for(engine.transcribe(clips[1]), 30)
        assert not first.done()
        release.set()
        return [await first, second]

    try:
        texts = asyncio.run(main())
    finally:
        engine.close()
    assert engine.batcher.batch_lanes == [0, 1]
    assert texts == [a[0] for a in alone]


def test_whisper_node_warms_each_lane_in_the_lanes_own_thread():
    """The node's warm captures each lane's graphs in that lane's thread (cuBLAS's workspace is
    per thread: lanes whose graphs shared one would corrupt each other) and transcribes silence
    on each lane."""
    import threading

    from serving.gpu.whisper import WhisperEngine, WhisperGpuNode

    o = _options(WhisperGpuOptions, tiny_asr(max_new_tokens=4, lanes=2))
    engine = WhisperEngine.from_options(o)
    seen: list[tuple[str, int, str]] = []
    warm_lane, run_batch = engine.warm_lane, engine.run_batch

    def recorded(name, fn):
        def call(*args, **kwargs):
            lane = kwargs.get("lane", args[-1] if len(args) > (name == "batch") else 0)
            seen.append((name, lane, threading.current_thread().name.rsplit("_", 1)[0]))
            return fn(*args, **kwargs)

        return call

    engine.warm_lane = recorded("warm", warm_lane)
    engine.run_batch = recorded("batch", run_batch)
    node = WhisperGpuNode.__new__(WhisperGpuNode)
    node._engine = engine
    try:
        asyncio.run(node.warm())
    finally:
        engine.close()
    assert seen == [
        ("warm", 0, "fdb-whisper_gpu-0"),
        ("warm", 1, "fdb-whisper_gpu-1"),
        ("batch", 0, "fdb-whisper_gpu-0"),
        ("batch", 1, "fdb-whisper_gpu-1"),
    ]


@pytest.fixture(scope="module", params=["slots", "continuous_batching"])
def chat(request):
    from serving.gpu.chat import ChatEngine

    o = _options(CausalLmGpuOptions, tiny_llm(engine=request.param))
    engine = ChatEngine(o.source("llm"), o)
    yield engine
    engine.close()


def test_chat_engine_streams_each_session_its_own_capped_reply_and_cancels_on_leave(chat):
    from serving.gpu.chat import ByteTokenizer

    engine = chat
    assert isinstance(engine.tokenizer, ByteTokenizer)
    assert (
        engine.identity.kind == "llm"
        and engine.identity.name == "causal_lm_gpu/qwen3-4b (dummy weights)"
    )
    assert "dummy" in engine.identity.settings["tokenizer"]

    async def reply(text: str, tokens: int) -> list[str]:
        return [p async for p in engine.stream([{"role": "user", "content": text}], tokens)]

    async def main():
        replies = await asyncio.gather(reply("hi", 3), reply("hello there", 5), reply("x" * 50, 7))
        stream = engine.stream([{"role": "user", "content": "long"}], 200)
        first = await stream.__anext__()
        await stream.aclose()  # an interruption: the request leaves the batch
        after = await reply("again", 2)
        return replies, first, after

    replies, first, after = asyncio.run(main())

    def letters(pieces: list[str]) -> int:  # one syllable (two letters) per generated token
        return len("".join(pieces).replace(" ", "").replace(".", "")) // 2

    assert [letters(r) for r in replies] == [3, 5, 7] and all(
        len(r) > 1 for r in replies
    )  # streamed
    assert first and letters(after) == 2
    if engine.manager is not None:
        assert not engine.manager.output_router.result_handlers  # no handler left behind
    else:
        time.sleep(0.2)  # the GPU thread frees a left request's slot at its next step
        assert all(r is None for r in engine.slots._slots)  # no slot left behind


ASKED = [{"role": "user", "content": "What is the capital of France?"}]


def _turn(n: int, content: str):
    from serving.graph.streams import Chunk, Message, Messages

    return Chunk("messages", Messages((Message("user", content),)), turn=n)


async def _chat_node(chat):
    """A causal_lm_gpu node over the module's loaded engine, opened; the list its chunks go to
    and its emit."""
    from serving.gpu.chat import CausalLmGpuNode
    from serving.gpu.chat import engine_key as chat_key
    from serving.hub import ModelHub

    models = ModelHub()
    options = _options(CausalLmGpuOptions, tiny_llm())
    models.__dict__["_gpu_engines"] = {chat_key(options): {"lock": None, "engine": chat}}
    node = CausalLmGpuNode(models, options)
    await node.open()
    out: list = []

    async def emit(chunk) -> None:
        out.append(chunk)

    return node, out, emit


def test_chat_node_streams_a_turn_and_claims_a_prefetched_reply(chat):
    from serving.graph.streams import control

    asked, turn = ASKED, _turn

    async def main():
        node, out, emit = await _chat_node(chat)
        await node.on_control(control("reply.prefetch", messages=asked), emit)
        await node.on_chunk(turn(1, asked[0]["content"]), emit)  # the same messages: claimed
        await node.on_control(control("reply.prefetch", messages=asked), emit)
        await node.on_chunk(turn(2, "Something else"), emit)  # other messages: a fresh reply
        await node.close()
        return node, out

    node, out = asyncio.run(main())
    assert node.prefetches == {"started": 2, "claimed": 1}
    for n in (1, 2):
        pieces = [c for c in out if c.turn == n]
        assert pieces[-1].control == "turn.done" and all(
            c.format == "text_delta" for c in pieces[:-1]
        )
        assert (
            len("".join(c.payload.text for c in pieces[:-1]).replace(" ", "").replace(".", ""))
            == 2 * 8
        )
    assert _no_request_left(chat)  # the unclaimed prefetch was cancelled


def test_a_reply_ahead_announces_its_first_chunk_and_withdraws_it_when_dropped(chat):
    """A prefetched reply sends speech.prefetch with its first speakable chunk as soon as its
    pieces complete it: the chunk the speech node cuts from the claimed turn's text (so that the
    audio made ahead is claimed). Dropped unclaimed (a withdrawal), it sends speech.prefetch with
    text None."""
    from serving.conversation.chunker import SpeechChunker
    from serving.graph.streams import control

    asked = ASKED

    async def main():
        node, out, emit = await _chat_node(chat)
        await node.on_control(control("reply.prefetch", messages=asked), emit)
        while not any(c.control == "speech.prefetch" for c in out):
            await asyncio.sleep(0.005)
        announced = len(out)
        await node.on_chunk(_turn(1, asked[0]["content"]), emit)
        await node.on_control(control("reply.prefetch", messages=asked), emit)
        while node._prefetch.first_chunk is None:
            await asyncio.sleep(0.005)
        ahead = node._prefetch
        await node.on_control(control("reply.prefetch", messages=None), emit)  # withdrawn
        await asyncio.gather(ahead.task, return_exceptions=True)
        await node.close()
        return node, out, announced

    node, out, announced = asyncio.run(main())
    speech = [c for c in out if c.control == "speech.prefetch"]
    assert [c.turn for c in speech] == [None, None, None] and out[announced - 1] is speech[0]
    reply = "".join(c.payload.text for c in out if c.turn == 1 and c.format == "text_delta")
    chunker = SpeechChunker()
    first = (chunker.push(reply) + chunker.finish())[0]
    assert speech[0].payload.data["text"] == first == speech[1].payload.data["text"]
    assert speech[2].payload.data["text"] is None  # the second reply ahead, withdrawn
    assert node.prefetches == {"started": 2, "claimed": 1} and _no_request_left(chat)


def _no_request_left(chat) -> bool:
    """No request of the engine is left (a cancelled one's slot or handler freed)."""
    if chat.manager is not None:
        return not chat.manager.output_router.result_handlers
    time.sleep(0.2)  # the GPU thread frees a left request's slot at its next step
    return all(r is None for r in chat.slots._slots)


@pytest.mark.parametrize("engine", ["slots", "continuous_batching"])
def test_a_reply_after_the_decode_loop_stopped_fails_with_one_line(engine):
    from fdb.errors import FdbError
    from serving.gpu.chat import ChatEngine

    o = _options(CausalLmGpuOptions, tiny_llm(engine=engine))
    engine = ChatEngine(o.source("llm"), o)
    engine.close()

    async def main():
        return [p async for p in engine.stream([{"role": "user", "content": "hi"}], 4)]

    with pytest.raises(FdbError, match="the decode loop takes no requests") as err:
        asyncio.run(main())
    assert "\n" not in err.value.one_line()
    if engine.manager is not None:
        assert not engine.manager.output_router.result_handlers


@pytest.mark.parametrize("main_thread", [False, True])
def test_gpu_whisper_repeat_finds_a_tiny_whisper_on_cpu_repeating_itself(main_thread):
    """benchmarks/gpu_whisper_repeat.py on the CPU (a tiny configuration, float32, two lanes; the
    passes in each lane's thread and in the calling thread):
    every pass, the encoder's output and every round at once give each clip its first pass's
    tokens (the script's bookkeeping; the GPU's answer is docs/gpu.md's), and a difference is
    placed at its first token."""
    import argparse

    from benchmarks.gpu_whisper_repeat import compare, first_difference, run

    args = argparse.Namespace(
        lanes=2, no_overlap=False, eager=False, no_encoder_graphs=False, dtype="bfloat16",
        passes=2, rounds=1, tiny=True, out=None, main_thread=main_thread, sync=True,
    )  # fmt: skip
    result = run(args)
    assert result["options"]["dtype"] == "float32"
    assert result["alone"] == {"0": [{"differ": 0, "first_steps": []}]} | {
        "1": [{"differ": 0, "first_steps": []}]
    }
    assert result["encoder_alone_differ"] == {"0": [0], "1": [0]}
    assert result["at_once"] == [{"differ": 0, "first_steps": []}]
    assert first_difference([1, 2, 3], [1, 5, 3]) == 1 and first_difference([1, 2], [1, 2]) is None
    assert first_difference([1, 2], [1, 2, 3]) == 2
    assert compare([[1, 2], [3, 4]], [[1, 2], [3, 5]]) == {"differ": 1, "first_steps": [1]}


def test_gpu_step_repeat_replays_a_tiny_whisper_step_on_cpu_and_places_a_difference():
    """benchmarks/gpu_step_repeat.py on the CPU (a tiny configuration, float32, eager): every
    replay of one step from the same state gives the first's keys, values and token (the
    script's bookkeeping; the GPU's answer is docs/gpu.md's), the attention kernels it set are
    put back, and a difference is placed at the first output, in layer order, that has one."""
    import argparse

    import torch

    from benchmarks.gpu_step_repeat import first_differing, run

    before = torch.backends.cuda.mem_efficient_sdp_enabled()
    for thread, part in ((False, "step"), (True, "prompt")):
        args = argparse.Namespace(
            replays=3, position=12, part=part, eager=False, sdpa="math", blas="default",
            deterministic=thread, lane_thread=thread, tiny=True, out=None,
            cross="math" if thread else "service", max_batch=2, time_rows=[1, 2],
        )  # fmt: skip
        result = run(args)
        assert result["options"]["cross_kernels"] == (
            [[None, ["SDPBackend.MATH"]]] if thread else [[None, None]]
        )  # a CPU's service: torch's own choice
        assert result["step_ms"] is None  # no graphs on a CPU: nothing timed
        assert (result["replays"], result["differ"], result["first_output_differing"]) == (
            3,
            0,
            None,
        )
        assert result["distinct_tokens"] == 1
    assert torch.backends.cuda.mem_efficient_sdp_enabled() == before
    assert not torch.are_deterministic_algorithms_enabled()
    same = ["a", "b", "c", "d", "t"]  # k0, v0, k1, v1, token
    assert first_differing([same, same, ["a", "b", "c", "x", "u"]]) == {
        "replays": 3,
        "differ": 1,
        "first_output_differing": "v1",
    }


def test_gpu_whisper_trace_traces_a_tiny_whisper_on_cpu_and_places_a_divergence():
    """benchmarks/gpu_whisper_trace.py on the CPU (a tiny configuration, float32, two lanes):
    every graph a pass replays leaves a record, the second pass's records are the first's, no
    weight changes (the script's bookkeeping; the GPU's answer is docs/gpu.md's), and a
    difference is placed at its first record and layer output, with its size."""
    import argparse

    import numpy as np

    from benchmarks.gpu_whisper_trace import first_divergence, run

    args = argparse.Namespace(
        lanes=2, passes=2, dtype="bfloat16", lane_thread=False, eager=False, tiny=True, out=None,
        reset=True, probes=True, sdpa="math", cross="default",
    )  # fmt: skip
    result = run(args)
    assert result["records_per_clip"] > 1
    layers = result["values_per_step"][0] // 7  # key, value and five probes a layer
    assert result["values_per_step"] == [7 * layers, 7 * layers] and layers >= 1
    assert result["first_values"] == [
        "k0", "v0", "self_attn0", "self_out0", "cross_attn0", "cross_out0", "mlp0",
    ]  # fmt: skip
    assert result["transcripts_differ"] == {"0": [0], "1": [0]}
    assert result["diverged"] == {"0": [{}], "1": [{}]}
    assert result["weights_changed"] == [0, 0]
    values = np.zeros((4, 1, 2, 1, 3), dtype=np.float32)  # k0, k1, v0, v1
    other = values.copy()
    other[3, 0, 1, 0, 2] = 0.5
    step = ("step", np.array([7, 5]), values, np.array([9]))
    moved = ("step", np.array([7, 5]), other, np.array([9]))
    names = ["k0", "v0", "k1", "v1"]
    assert first_divergence([step, step], [step, step], names) is None
    assert first_divergence([step, moved], [step, step], names) == {
        "record": 1, "kind": "step", "position": 5, "inputs_same": True, "output": "v1",
        "elements_differ": 1, "max_abs_diff": 0.5, "tokens": [9, 9],
    }  # fmt: skip
    assert first_divergence([step], [step, step], names) == {"record": 1, "kind": "length"}
