"""The bundled embedded-cascade declaration run on the graph runtime with the real models: a
Piper question at 16 kHz -> Silero VAD boundaries -> tiny.en transcript -> dialog turn 1 ->
SmolLM2 reply text -> Piper reply audio (24 kHz pcm_f32le), every reply chunk in turn 1."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import numpy as np
import pytest

from fdb.errors import FdbError
from serving.graph.declare import load_graph
from serving.graph.nodes import build_nodes
from serving.graph.runtime import SessionGraph
from serving.graph.streams import Chunk, Pcm16
from serving.hub import ModelHub
from tests.serving.conftest import _pcm16, silence

CASCADE = Path(__file__).resolve().parents[2] / "serving" / "graph" / "embedded-cascade.yaml"
UNIT = 1280 * 2  # 80 ms of 16 kHz PCM16


@pytest.fixture(scope="module")
def question(say) -> bytes:
    return _pcm16(
        np.concatenate([silence(0.3), say("What is the capital of France?"), silence(1.0)])
    )


async def feed(graph: SessionGraph, pcm: bytes) -> None:
    for at in range(0, len(pcm), UNIT):
        while not await graph.append(Chunk("pcm16", Pcm16(pcm[at : at + UNIT]))):
            await asyncio.sleep(0.01)  # a full input edge: the client retries


async def converse(pcm: bytes) -> tuple[list[Chunk], float]:
    decl = load_graph(CASCADE)
    graph = SessionGraph(decl, build_nodes(decl, ModelHub()))
    await graph.open()
    start = time.monotonic()
    try:
        await feed(graph, pcm)
        graph.end_input()
        await graph.wait_done(timeout_s=60)
    finally:
        await graph.close()
    return graph.sink.drain(), time.monotonic() - start


def test_the_embedded_cascade_graph_answers_a_spoken_question(question):
    published, elapsed = asyncio.run(converse(question))
    sessions = [(c.source, c.control, c.turn) for c in published if c.format == "session"]
    boundaries = (
        ("turn_detection", "speech.started", None),
        ("turn_detection", "speech.stopped", None),
    )
    assert all(b in sessions for b in boundaries)  # the VAD's, passed on by the turn detection
    started = next(c for c in published if c.control == "speech.started")
    assert 0 <= started.t_ms <= 300  # speech at 0.3 s, reported prefix_padding_ms (300) earlier
    transcripts = [c.payload.text.lower() for c in published if c.format == "transcript"]
    assert len(transcripts) == 1 and "capital" in transcripts[0] and "france" in transcripts[0]
    assert ("dialog", "turn.queued", 1) in sessions
    reply_text = "".join(c.payload.text for c in published if c.format == "text_delta")
    assert reply_text.strip() and {c.turn for c in published if c.format == "text_delta"} == {1}
    audio = [c for c in published if c.format == "pcm_f32le"]
    assert audio and {c.turn for c in audio} == {1} and {c.payload.rate for c in audio} == {24000}
    assert sum(len(c.payload.samples) for c in audio) > 24000 * 0.3
    tts_turn = [ctl for src, ctl, turn in sessions if src == "tts" and turn == 1]
    assert tts_turn[0] == "turn.started" and tts_turn[-1] == "turn.done"
    # each spoken chunk: reply.chunk (its text) before its audio, reply.progress after it
    chunks = tts_turn[1:-1]
    assert chunks and chunks == ["reply.chunk", "reply.progress"] * (len(chunks) // 2)
    order = [c.format for c in published]
    assert order.index("transcript") < order.index("text_delta") < order.index("pcm_f32le")
    print(
        f"graph cascade: {elapsed:.2f} s for {len(question) / 32000:.2f} s of input; "
        f"reply {reply_text!r}"
    )


async def barge_in(first: bytes, second: bytes) -> list[Chunk]:
    """Feeds ``first``, and ``second`` once the reply to it has begun; returns all it published."""
    import yaml

    raw = yaml.safe_load(CASCADE.read_text(encoding="utf-8"))
    raw["session_nodes"]["llm"]["max_tokens"] = 96  # a reply long enough to speak over
    decl = load_graph(raw)
    graph = SessionGraph(decl, build_nodes(decl, ModelHub()))
    published: list[Chunk] = []
    await graph.open()
    try:
        await feed(graph, first)
        # Silence keeps coming, as from a realtime client: the turn detection may hold the pause
        # (Smart Turn's score of the question decides for how long), and it ends on the input.
        deadline = time.monotonic() + 60
        while not any(c.format == "text_delta" for c in published):
            assert time.monotonic() < deadline, "no reply within 60 s"
            await feed(graph, bytes(UNIT))
            await asyncio.sleep(0.08)
            published.extend(graph.sink.drain())
        await feed(graph, second)
        graph.end_input()
        await graph.wait_done(timeout_s=60)
    finally:
        await graph.close()
    return published + graph.sink.drain()


def test_speech_during_a_reply_fences_the_rest_of_it(say):
    """SmolLM2 answers "Why is the sky blue?" at length; the user speaks during the answer: turn 1
    is interrupted and nothing more of it (text, audio, turn.done) is published; turn 2 is
    answered."""
    first = _pcm16(np.concatenate([silence(0.3), say("Why is the sky blue?"), silence(0.8)]))
    second = _pcm16(
        np.concatenate([say("Tell me about the weather in Spain instead, please."), silence(1.0)])
    )
    published = asyncio.run(barge_in(first, second))
    cut = next(i for i, c in enumerate(published) if c.control == "turn.interrupted")
    assert published[cut].turn == 1 and published[cut].source == "dialog"
    after = published[cut + 1 :]
    assert not [
        c
        for c in after
        if c.turn == 1 and c.control not in ("interrupt", "turn.interrupted", "reply.heard")
    ]
    heard = [c for c in after if c.control == "reply.heard" and c.turn == 1]
    assert len(heard) == 1 and heard[0].payload.data["final"]  # what the history keeps of turn 1
    assert ("tts", "turn.done", 1) not in [(c.source, c.control, c.turn) for c in published]
    transcripts = [c.payload.text.lower() for c in published if c.format == "transcript"]
    assert len(transcripts) == 2 and "spain" in transcripts[1]
    assert [c.turn for c in published if c.control == "turn.queued"] == [1, 2]
    assert any(c.format == "pcm_f32le" and c.turn == 2 for c in after)
    assert ("tts", "turn.done", 2) in [(c.source, c.control, c.turn) for c in after]


SEMANTIC = {
    "session_nodes": {
        "vad": {"stages": ["vad"], "inputs": ["input"]},
        "turn_detection": {
            "stages": ["turn_detection"],
            "inputs": ["input:pcm16", "input:session", "vad:session"],
        },
        "asr": {"kind": "whisper_transcription", "inputs": ["input", "turn_detection:session"]},
    },
    "session_publish": {"vad": ["session"], "turn_detection": ["session"], "asr": ["transcript"]},
}


def test_turn_detection_holds_a_mid_sentence_pause(say):
    """The guide's turn_detection stage beside the VAD (200 ms candidate pauses): Smart Turn holds
    the 0.8 s pause after "um," that ends the VAD's first utterance, so the recognizer gets one
    utterance. The input is sent at its real-time pace, as a realtime client sends it."""
    pcm = _pcm16(
        np.concatenate(
            [
                silence(0.25),
                say("Could you tell me, um,"),
                silence(0.8),
                say("what is the capital of France?"),
                silence(1.0),
            ]
        )
    )

    async def scenario() -> list[Chunk]:
        decl = load_graph(SEMANTIC)
        graph = SessionGraph(
            decl, build_nodes(decl, ModelHub(), vad_settings={"silence_duration_ms": 200})
        )
        await graph.open()
        start = time.monotonic()
        try:
            for n, at in enumerate(range(0, len(pcm), UNIT)):
                await asyncio.sleep(max(0.0, start + n * 0.08 - time.monotonic()))
                assert await graph.append(Chunk("pcm16", Pcm16(pcm[at : at + UNIT])))
            graph.end_input()
            await graph.wait_done(timeout_s=30)
        finally:
            await graph.close()
        return graph.sink.drain()

    published = asyncio.run(scenario())
    stops = [(c.source, c.t_ms) for c in published if c.control == "speech.stopped"]
    assert [s for s, _ in stops].count("vad") >= 2  # the VAD cut the question at its pauses
    assert [s for s, _ in stops].count("turn_detection") == 1  # the turn held across the pause
    transcripts = [c.payload.text.lower() for c in published if c.format == "transcript"]
    assert len(transcripts) == 1 and "could you" in transcripts[0] and "france" in transcripts[0]


LISTEN = {
    "session_nodes": {
        "vad": {"stages": ["vad"], "inputs": ["input"]},
        "asr": {"kind": "whisper_transcription", "inputs": ["input", "vad:session"]},
    },
    "session_publish": {"asr": ["transcript"]},
}


class _SlowAsr:
    """The real recognizer behind a delay (a loaded host), or failing after it."""

    def __init__(self, real, delay_s: float, fail: bool = False):
        self.real, self.delay_s, self.fail, self.calls = real, delay_s, fail, 0

    def transcribe(self, samples):
        self.calls += 1
        time.sleep(self.delay_s)
        if self.fail:
            raise RuntimeError("recognizer crashed")
        return self.real.transcribe(samples)


async def _listen(pcm: bytes, asr: _SlowAsr, after_chunks: int) -> tuple[list[Chunk], int]:
    """Feeds ``pcm`` then ``after_chunks`` of silence at 8x real time until the graph drains;
    returns what it published and how many appends a full input edge refused."""
    decl = load_graph(LISTEN)
    models = ModelHub(asr=asr)
    graph = SessionGraph(decl, build_nodes(decl, models, vad_settings={"silence_duration_ms": 300}))
    refused = 0
    await graph.open()
    try:
        tail = bytes(UNIT) * after_chunks
        for at in range(0, len(pcm) + len(tail), UNIT):
            data = (pcm + tail)[at : at + UNIT]
            while not await graph.append(Chunk("pcm16", Pcm16(data))):
                refused += 1
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.01)
        graph.end_input()
        await graph.wait_done(timeout_s=60)
    finally:
        await graph.close()
    return graph.sink.drain(), refused


def test_a_slow_transcription_never_stops_the_input(question):
    """Tiny.en held 2.5 s per utterance: the 9 s of input after the question (112 packets, well
    over the input edge's 64) are all taken while the transcription runs, and the transcript
    arrives."""
    asr = _SlowAsr(ModelHub().asr, 2.5)
    published, refused = asyncio.run(_listen(question, asr, 100))
    assert refused == 0
    transcripts = [c.payload.text.lower() for c in published if c.format == "transcript"]
    assert asr.calls == 1 and len(transcripts) == 1 and "france" in transcripts[0]


def test_a_failed_transcription_fails_the_graph(question):
    asr = _SlowAsr(ModelHub().asr, 0.1, fail=True)
    with pytest.raises(FdbError, match="'asr'.*recognizer crashed"):
        asyncio.run(_listen(question, asr, 20))


class _WindowedAsr:
    """The real recognizer; records which entry point each utterance took."""

    def __init__(self, real):
        self.real, self.calls = real, []

    def transcribe(self, samples):
        self.calls.append("full")
        return self.real.transcribe(samples)

    def transcribe_utterance(self, samples, min_window_s):
        self.calls.append(min_window_s)
        return self.real.transcribe_utterance(samples, min_window_s=min_window_s)


@pytest.mark.parametrize("window_s, expected", [(None, "full"), (10.0, 10.0), (20, 20.0)])
def test_whisper_transcription_encodes_utterances_in_the_window_it_is_given(
    question, window_s, expected
):
    """By default (window_s 10) an utterance is read in a shortened window; ``window_s: null``
    takes faster-whisper's full 30 s pipeline; both read the question."""
    listen = {
        **LISTEN,
        "session_nodes": {
            **LISTEN["session_nodes"],
            "asr": {
                "kind": "whisper_transcription",
                "inputs": ["input", "vad:session"],
                **({} if window_s == 10.0 else {"window_s": window_s}),
            },
        },
    }
    asr = _WindowedAsr(ModelHub().asr)
    decl = load_graph(listen)
    models = ModelHub(asr=asr)

    async def scenario():
        graph = SessionGraph(
            decl, build_nodes(decl, models, vad_settings={"silence_duration_ms": 300})
        )
        await graph.open()
        try:
            for at in range(0, len(question) + UNIT * 20, UNIT):
                assert await graph.append(
                    Chunk("pcm16", Pcm16((question + bytes(UNIT * 20))[at : at + UNIT]))
                )
            graph.end_input()
            await graph.wait_done(timeout_s=60)
        finally:
            await graph.close()
        return graph.sink.drain()

    transcripts = [
        c.payload.text.lower() for c in asyncio.run(scenario()) if c.format == "transcript"
    ]
    assert asr.calls == [expected] and len(transcripts) == 1 and "france" in transcripts[0]


@pytest.mark.parametrize("window_s", [5, 31])
def test_whisper_transcription_refuses_a_window_outside_10_to_30_s(window_s):
    with pytest.raises(FdbError, match="window_s"):
        load_graph(
            {
                **LISTEN,
                "session_nodes": {
                    **LISTEN["session_nodes"],
                    "asr": {
                        "kind": "whisper_transcription",
                        "inputs": ["input", "vad:session"],
                        "window_s": window_s,
                    },
                },
            }
        )
