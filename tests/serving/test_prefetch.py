"""Prefetch at a pause (``SystemConfig.prefetch_ms``): the VAD announces a pause that may end
the turn (speech.pausing) and withdraws it when speech comes back (speech.resumed); the
recognizer transcribes the utterance then, the dialog sends the messages a final transcript
would send (reply.prefetch), and the reply model starts on them. The turn's final transcript and
reply take that work over only when they are the same; otherwise it is dropped. Real Silero,
tiny.en, SmolLM2 and Piper throughout."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import numpy as np
import pytest

from serving.graph import nodes as graph_nodes
from serving.graph.declare import load_graph
from serving.graph.gate import ComputeGate
from serving.graph.kinds import LlamaChatOptions
from serving.graph.nodes import LlamaChatNode, build_nodes
from serving.graph.runtime import SessionGraph
from serving.graph.streams import Chunk, Message, Messages, Pcm16, control
from serving.hub import ModelHub
from tests.serving.conftest import _pcm16, silence
from tests.serving.test_graph_cascade import UNIT

CASCADE = Path(__file__).resolve().parents[2] / "serving" / "graph" / "embedded-cascade.yaml"


@pytest.fixture(scope="module")
def models() -> ModelHub:
    return ModelHub()


class _CountingAsr:
    """tiny.en, counting the utterances it transcribes."""

    local_compute = True

    def __init__(self, asr):
        self._asr, self.calls = asr, 0

    def transcribe_utterance(self, samples, min_window_s=10):
        self.calls += 1
        return self._asr.transcribe_utterance(samples, min_window_s=min_window_s)

    def transcribe(self, samples):
        self.calls += 1
        return self._asr.transcribe(samples)


def _vad_events(samples: np.ndarray, **settings) -> list[tuple[str, int]]:
    from fdb.models.vad import StreamingVad

    vad = StreamingVad(prefix_padding_ms=0, **settings)
    events = []
    for at in range(0, len(samples), 1280):
        events += vad.feed(samples[at : at + 1280])
    return events + vad.flush()


def test_the_vad_announces_a_pause_and_withdraws_it_when_speech_resumes(say):
    audio = np.concatenate(
        [silence(0.3), say("Hello there."), silence(0.15), say("How are you today?"), silence(1.0)]
    )
    plain = _vad_events(audio, silence_duration_ms=500)
    events = _vad_events(audio, silence_duration_ms=500, prefetch_ms=160)
    assert [e for e in events if e[0] in ("speech_started", "speech_stopped")] == plain
    kinds = [k for k, _ in events]
    assert kinds == [
        "speech_started",
        "speech_pausing",
        "speech_resumed",
        "speech_pausing",
        "speech_stopped",
    ]
    first_pause, resumed, last_pause, stopped = (t for k, t in events[1:])
    assert (
        first_pause < resumed < last_pause
    )  # the gap (about 300 ms with the voice's own silence): announced, then withdrawn
    assert last_pause == stopped  # the pause announced the stop's own speech end
    # a prefetch no shorter than the stop's silence announces nothing
    assert _vad_events(audio, silence_duration_ms=500, prefetch_ms=500) == plain


async def _paced(graph: SessionGraph, pcm: bytes) -> None:
    """The input at its real-time pace (80 ms packets), as a realtime client sends it: work
    started at a pause has the pause's length to finish."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    for index, at in enumerate(range(0, len(pcm), UNIT)):
        await asyncio.sleep(max(0.0, start + index * 0.08 - loop.time()))
        while not await graph.append(Chunk("pcm16", Pcm16(pcm[at : at + UNIT]))):
            await asyncio.sleep(0.01)


async def _run(pcm: bytes, models: ModelHub, prefetch_ms: int | None) -> tuple[list[Chunk], dict]:
    decl = load_graph(CASCADE)
    nodes = build_nodes(decl, models, vad_settings={"prefetch_ms": prefetch_ms})
    graph = SessionGraph(decl, nodes)
    await graph.open()
    try:
        # a turn ends after 1 s of silence: a pause of 160-200 ms leaves the prefetch 0.8 s
        await graph.control(
            control("configure", turn_detection={"type": "server_vad", "silence_duration_ms": 1000})
        )
        await _paced(graph, pcm)
        graph.end_input()
        await graph.wait_done(timeout_s=60)
    finally:
        await graph.close()
    return graph.sink.drain(), nodes


def test_a_pause_that_ends_the_turn_has_its_transcript_and_reply_started_there(say, models):
    pcm = _pcm16(
        np.concatenate([silence(0.3), say("What is the capital of France?"), silence(1.5)])
    )
    asr = _CountingAsr(models.asr)
    counted = ModelHub(
        asr=asr, llm=models.llm, tts=models.tts, turn=models.turn, gate=ComputeGate(2)
    )
    published, nodes = asyncio.run(_run(pcm, counted, 200))
    controls = [(c.source, c.control) for c in published if c.format == "session"]
    assert ("turn_detection", "speech.pausing") in controls and (
        "dialog",
        "reply.prefetch",
    ) in controls
    # the reply started before the turn ended, and its transcription was not done twice
    assert controls.index(("dialog", "reply.prefetch")) < controls.index(
        ("turn_detection", "speech.stopped")
    )
    assert asr.calls == 1
    # every model call went through the gate: one transcription, the first chunk's tokens and
    # its synthesis (a one-chunk reply has no rest), and each gave its slot back
    calls = counted.gate.calls
    assert calls["transcribe"] == 1 and calls["first_audio"] == 1 and calls["first_text"] >= 2
    assert counted.gate._busy == 0 and not counted.gate._waiting
    tentative = [
        c.payload.text for c in published if c.format == "transcript" and not c.payload.is_final
    ]
    final = [c.payload.text for c in published if c.format == "transcript" and c.payload.is_final]
    assert tentative == final and "france" in final[0].lower()
    assert nodes["llm"].prefetches == {"started": 1, "claimed": 1}
    prefetched = next(c for c in published if c.control == "reply.prefetch").payload.data[
        "messages"
    ]
    messages = next(c for c in published if c.format == "messages").payload.messages
    assert prefetched == [{"role": m.role, "content": m.content} for m in messages]

    # the same input without prefetch: the same transcript and the same reply
    plain, plain_nodes = asyncio.run(_run(pcm, models, None))
    assert not [c for c in plain if c.control in ("speech.pausing", "reply.prefetch")]
    assert [c.payload.text for c in plain if c.format == "transcript"] == final
    text = "".join(c.payload.text for c in published if c.format == "text_delta")
    assert text and text == "".join(c.payload.text for c in plain if c.format == "text_delta")
    assert plain_nodes["llm"].prefetches == {"started": 0, "claimed": 0}


def test_a_pad_longer_than_the_pause_is_cut_to_it_so_the_pause_is_transcribed_at_once(say, models):
    """pad_ms 200 with the system's prefetch_ms 100: the utterance keeps 100 ms after the speech
    end, so the pause's transcription starts as soon as the pause's own audio is in (a 200 ms pad
    would hold it until the turn's stop, 100 ms later, and the prefetch would gain nothing), and
    the stop with the same speech end takes it over."""
    from serving.graph.kinds import WhisperTranscriptionOptions
    from serving.graph.nodes import WhisperNode

    speech = say("What is the capital of France?")
    audio = _pcm16(np.concatenate([speech, silence(0.4)]))
    end_ms = len(speech) * 1000 // 16000
    asr = _CountingAsr(models.asr)
    lengths: list[int] = []
    transcribe = asr.transcribe_utterance

    def recorded(samples, min_window_s=10):
        lengths.append(len(samples))
        return transcribe(samples, min_window_s=min_window_s)

    asr.transcribe_utterance = recorded
    hub = ModelHub(asr=asr, llm=models.llm, tts=models.tts, turn=models.turn)

    async def scenario(prefetch_ms: int | None, wait_s: float) -> tuple[list[Chunk], int, float]:
        node = WhisperNode(hub, WhisperTranscriptionOptions(pad_ms=200), prefetch_ms=prefetch_ms)
        out: list[Chunk] = []

        async def emit(chunk: Chunk) -> None:
            out.append(chunk)

        await node.on_chunk(control("speech.started", t_ms=0), emit)
        # the audio up to 100 ms past the speech end, then the pause
        upto = (end_ms + 100) * 32
        for at in range(0, upto, UNIT):
            await node.on_chunk(Chunk("pcm16", Pcm16(audio[at : min(at + UNIT, upto)])), emit)
        await node.on_chunk(control("speech.pausing", t_ms=end_ms), emit)
        started = time.monotonic()
        while not out and time.monotonic() - started < wait_s:  # a transcription runs meanwhile
            await asyncio.sleep(0.05)
        waited = time.monotonic() - started
        tentative = len(out)
        for at in range(upto, len(audio), UNIT):
            await node.on_chunk(Chunk("pcm16", Pcm16(audio[at : at + UNIT])), emit)
        await node.on_chunk(control("speech.stopped", t_ms=end_ms), emit)
        await node.on_end(emit)
        await node.close()
        return out, tentative, waited

    cut, tentative, took = asyncio.run(scenario(100, wait_s=30))
    assert tentative == 1 and [c.payload.is_final for c in cut] == [False, True]
    assert cut[0].payload.text == cut[1].payload.text and "france" in cut[1].payload.text.lower()
    assert asr.calls == 1 and lengths == [(end_ms + 100) * 16]  # one transcription, 100 ms pad
    # without prefetch the pad is pad_ms: nothing is transcribed at the pause's audio alone
    # (waiting three times as long as the pause's transcription took above, 1 s at least)
    plain, tentative, _ = asyncio.run(scenario(None, wait_s=max(1.0, 3 * took)))
    assert tentative == 0 and [c.payload.is_final for c in plain] == [True]
    assert lengths[1:] == [(end_ms + 200) * 16]


def test_work_made_ahead_and_cancelled_closes_its_stream_wherever_it_waits():
    """An _Ahead's task cancelled while it waits outside its stream (announcing a first chunk
    whose edge is full) closes the stream at once, so an engine's request ends with it (an
    async generator left unclosed would run on until the garbage collector found it)."""
    import gc

    from serving.graph.nodes import _Ahead

    closed, parked = [], asyncio.Event()

    class Parked(_Ahead):
        async def added(self, item) -> None:
            parked.set()
            await asyncio.Event().wait()  # as an emit to a full edge

    async def stream():
        try:
            for n in range(100):
                yield n
                await asyncio.sleep(0)
        finally:
            closed.append(True)

    async def scenario() -> tuple[list, list]:
        ahead = Parked(key="k")
        ahead.task = asyncio.ensure_future(ahead.take(stream()))
        await parked.wait()
        ahead.cancel()
        await asyncio.gather(ahead.task, return_exceptions=True)
        return list(closed), ahead.items

    was_enabled = gc.isenabled()
    gc.disable()  # no collector run may close it instead
    try:
        closed_then, items = asyncio.run(scenario())
    finally:
        if was_enabled:
            gc.enable()
    assert closed_then == [True] and items == [0]


def test_a_pause_the_speech_resumes_after_is_dropped(say, models):
    pcm = _pcm16(
        np.concatenate(
            [
                silence(0.3),
                say("Hello there."),
                silence(0.15),
                say("What is the capital of France?"),
                silence(1.5),
            ]
        )
    )
    published, nodes = asyncio.run(_run(pcm, models, 160))
    controls = [(c.source, c.control) for c in published if c.format == "session"]
    assert controls.count(("turn_detection", "speech.pausing")) == 2
    assert ("turn_detection", "speech.resumed") in controls
    final = [
        c.payload.text.lower() for c in published if c.format == "transcript" and c.payload.is_final
    ]
    assert len(final) == 1 and "hello" in final[0] and "france" in final[0]
    # one turn, answered from the whole utterance: only the second pause's prefetch was kept
    assert {c.turn for c in published if c.format == "text_delta"} == {1}
    assert nodes["llm"].prefetches["claimed"] == 1
    messages = next(c for c in published if c.format == "messages").payload.messages
    assert "hello" in messages[-1].content.lower() and "france" in messages[-1].content.lower()


def _messages(question: str) -> Messages:
    return Messages(
        (Message("system", "You are a helpful voice assistant."), Message("user", question))
    )


def test_the_reply_model_drops_a_prefetch_for_other_messages_and_one_left_unclaimed(
    models, monkeypatch
):
    llm = models.llm

    async def scenario() -> tuple[str, dict, int, bool]:
        node = LlamaChatNode(models, LlamaChatOptions(max_tokens=16))
        texts: list[str] = []

        async def emit(chunk: Chunk) -> None:
            if chunk.format == "text_delta":
                texts.append(chunk.payload.text)

        other = [
            {"role": m.role, "content": m.content} for m in _messages("Name a red fruit.").messages
        ]
        await node.on_control(control("reply.prefetch", messages=other), emit)
        await node.on_chunk(
            Chunk("messages", _messages("What is the capital of France?"), turn=1), emit
        )
        after_mismatch = dict(node.prefetches)
        monkeypatch.setattr(graph_nodes, "PREFETCH_TTL_S", 0.1)
        await node.on_control(control("reply.prefetch", messages=other), emit)
        prefetch = node._prefetch
        await asyncio.sleep(0.5)
        expired = node._prefetch is None and prefetch.stop.is_set()
        await asyncio.gather(prefetch.task, return_exceptions=True)
        await node.close()
        return "".join(texts), after_mismatch, node.prefetches["started"], expired

    text, after_mismatch, started, expired = asyncio.run(scenario())
    france = [
        {"role": m.role, "content": m.content}
        for m in _messages("What is the capital of France?").messages
    ]
    assert text.strip() == llm.reply(france, max_tokens=16)
    assert after_mismatch == {"started": 1, "claimed": 0} and started == 2 and expired
    # every context is back in the pool: a dropped prefetch gave its context back
    assert llm._free.qsize() == llm.identity.settings["contexts"]


def test_a_realtime_client_sees_one_transcript_and_one_response_per_turn(server, question_pcm):
    """Against the server (prefetch on by default), at the real-time pace: the tentative
    transcript and the reply started at the pause stay inside the server; the client gets the
    events of one turn in their usual order, each once."""
    from benchmarks.support.realtime_client import Client

    async def scenario() -> Client:
        client = await Client.connect(server.ws_url)
        await client.open_session()
        await client.send_audio(question_pcm, interval_s=0.08)
        await client.until("response.done", 30)
        await client.close()
        return client

    client = asyncio.run(scenario())
    types = client.types()
    order = [
        "input_audio_buffer.speech_started",
        "input_audio_buffer.speech_stopped",
        "input_audio_buffer.committed",
        "conversation.item.input_audio_transcription.completed",
        "response.created",
        "response.output_audio.delta",
        "response.done",
    ]
    assert [types.index(name) for name in order] == sorted(types.index(name) for name in order), (
        types
    )
    for name in order[:5] + order[6:]:
        assert types.count(name) == 1, (name, types)
    transcript = client.of_type("conversation.item.input_audio_transcription.completed")[0][
        "transcript"
    ]
    assert "capital" in transcript.lower() and "error" not in types


class _StreamingVoice:
    """A speech backend that streams (as CSM does), so the speech node makes audio ahead: one
    silent 80 ms frame a chunk, and the texts it was asked for."""

    rate = 24000

    def __init__(self) -> None:
        self.texts: list[str] = []

    async def astream(self, text: str):
        self.texts.append(text)
        yield np.zeros(1920, np.float32)


@pytest.mark.parametrize("first_chunk", [None, (3, 4)])
def test_the_systems_first_chunk_rule_is_the_one_announced_ahead_and_cut_by_the_speech_node(
    models, first_chunk
):
    """``first_chunk`` (SystemConfig) reaches the reply model and the speech node of every
    session graph: a real SmolLM2 reply made ahead announces its first chunk by that rule, the
    speech node cuts the same chunk from the claimed turn's text, and its audio made ahead is
    taken (the voice is asked for that chunk once)."""
    from serving.conversation.chunker import FIRST_CHUNK, SpeechChunker
    from serving.systems import resolve_system

    rule = first_chunk or FIRST_CHUNK
    voice = _StreamingVoice()
    overrides = [] if first_chunk is None else [("first_chunk.max_words", first_chunk[1])]
    system = resolve_system("embedded-cascade", overrides=overrides)
    hub = ModelHub(system, llm=models.llm, tts=voice)
    nodes = build_nodes(load_graph(CASCADE), hub)
    llm, speech = nodes["llm"], nodes["tts"]
    assert llm.first_chunk == rule == speech._first_chunk
    asked = [
        {"role": m.role, "content": m.content}
        for m in _messages("Tell me about the city of Paris.").messages
    ]

    async def scenario() -> tuple[list[str], list[Chunk]]:
        announced: list[str] = []
        sent: list[Chunk] = []

        async def to_speech(chunk: Chunk) -> None:
            if chunk.control == "speech.prefetch":
                announced.append(chunk.payload.data["text"])
                await speech.on_control(chunk, to_client)
            elif chunk.format == "text_delta" or chunk.control == "turn.done":
                await speech.on_chunk(chunk, to_client)

        async def to_client(chunk: Chunk) -> None:
            sent.append(chunk)

        await llm.on_control(control("reply.prefetch", messages=asked), to_speech)
        while not announced:
            await asyncio.sleep(0.01)
        await llm.on_chunk(
            Chunk("messages", _messages("Tell me about the city of Paris."), 1), to_speech
        )
        await llm.close()
        await speech.close()
        return announced, sent

    announced, sent = asyncio.run(scenario())
    reply = models.llm.reply(asked, max_tokens=LlamaChatOptions().max_tokens)
    chunker = SpeechChunker(*rule)
    first = (chunker.push(reply) + chunker.finish())[0]
    assert announced == [first]
    assert len(first.split()) <= rule[1] + 2  # the rule's words, or a dangling word's slack
    chunks = [c.payload.data["text"] for c in sent if c.control == "reply.chunk"]
    assert chunks[0] == first and voice.texts.count(first) == 1  # the audio ahead was taken
    assert speech.spoken_ahead == {"started": 1, "claimed": 1}
