"""``silero_gpu`` (serving/gpu/silero.py) on the CPU: one Silero network scoring the frames of
many streams in one call gives each stream the probabilities its own Silero module gives
(streams that start late, and one reset midway), and a session graph whose ``vad`` node is
``silero_gpu`` publishes the events the ``vad`` stage publishes, for three sessions at once whose
frames share the calls."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

torch = pytest.importorskip("torch")
silero_vad = pytest.importorskip("silero_vad")

from fdb.models.vad import FRAME, SileroBatch  # noqa: E402
from serving.graph.declare import load_graph  # noqa: E402
from serving.graph.nodes import build_nodes  # noqa: E402
from serving.graph.runtime import SessionGraph  # noqa: E402
from serving.graph.streams import Chunk, Pcm16  # noqa: E402
from serving.hub import ModelHub  # noqa: E402
from tests.serving.conftest import _pcm16, silence  # noqa: E402

UNIT = 1280 * 2  # 80 ms of 16 kHz PCM16


@pytest.fixture(scope="module")
def clips(say) -> list[np.ndarray]:
    spoken = say("What is the capital of France? Tell me.")
    return [np.concatenate([silence(lead), spoken, silence(1.2)]) for lead in (0.3, 0.7, 1.1)]


def test_a_batch_gives_each_stream_its_own_modules_probabilities(clips):
    frames = [len(c) // FRAME for c in clips]
    starts, reset_at = [0, 4, 9], 30  # stream 2 starts late; stream 0 is reset at frame 30
    own = [silero_vad.load_silero_vad(onnx=False) for _ in clips]
    want: list[list[float]] = [[] for _ in clips]
    for i, (model, clip) in enumerate(zip(own, clips, strict=True)):
        for k in range(starts[i], frames[i]):
            if i == 0 and k == reset_at:
                model.reset_states()
            frame = torch.from_numpy(clip[k * FRAME : (k + 1) * FRAME])
            want[i].append(float(model(frame, 16000).item()))
    batch = SileroBatch("cpu")
    streams = [batch.stream() for _ in clips]
    got: list[list[float]] = [[] for _ in clips]
    for k in range(max(frames)):
        if k == reset_at:
            streams[0].reset()
        items = [
            (i, clips[i][k * FRAME : (k + 1) * FRAME])
            for i in range(len(clips))
            if starts[i] <= k < frames[i]
        ]
        probs = batch.score([(streams[i], frame) for i, frame in items])
        for (i, _), p in zip(items, probs, strict=True):
            got[i].append(p)
    for mine, theirs in zip(got, want, strict=True):  # other batch sizes round floats otherwise
        np.testing.assert_allclose(mine, theirs, rtol=0, atol=1e-5)
    assert max(max(w) for w in want) > 0.9  # the clips have speech: the test compares decisions
    assert batch.identity.settings == {"batched": True, "device": "cpu"}


def _graph(vad: dict) -> dict:
    return {
        "session_nodes": {"vad": {**vad, "inputs": ["input"]}},
        "session_publish": {"vad": ["session"]},
    }


async def _session(hub: ModelHub, decl, pcm: bytes) -> list[tuple[str, int]]:
    graph = SessionGraph(decl, build_nodes(decl, hub))
    await graph.open()
    try:
        for at in range(0, len(pcm), UNIT):
            assert await graph.append(Chunk("pcm16", Pcm16(pcm[at : at + UNIT])))
            await asyncio.sleep(0)  # the sessions' packets interleave
        graph.end_input()
        await graph.wait_done(timeout_s=60)
    finally:
        await graph.close()
    return [(c.control, c.t_ms) for c in graph.sink.drain() if c.control]


def test_a_silero_gpu_node_publishes_the_vad_stages_events(clips):
    hub = ModelHub()
    pcms = [_pcm16(c) for c in clips]

    async def sessions(vad: dict) -> list[list[tuple[str, int]]]:
        decl = load_graph(_graph(vad))
        return await asyncio.gather(*[_session(hub, decl, pcm) for pcm in pcms])

    stage = asyncio.run(sessions({"stages": ["vad"]}))
    batched = asyncio.run(sessions({"kind": "silero_gpu", "device": "cpu", "max_batch": 8}))
    assert batched == stage
    assert all([e[0] for e in events] == ["speech.started", "speech.stopped"] for events in stage)
    engine = next(iter(hub.__dict__["_gpu_engines"].values()))["engine"]
    assert max(engine.batcher.batch_sizes) > 1  # the sessions' frames shared calls
    assert hub.identities()["vad"]["settings"] == {
        "batched": True,
        "device": "cpu",
        "max_batch": 8,
    }
