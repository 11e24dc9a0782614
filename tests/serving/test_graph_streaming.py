"""The streamed reply on the session graph (``serving/graph/embedded-cascade.yaml`` with
``GraphOutput`` as its sink): the first chunk is spoken while the LLM is still generating, a
text-only session streams text, and an interruption stops the LLM between tokens. Fake ASR /
LLM / TTS make the timing exact (the real VAD runs; turn detection is off, a commit ends the
utterance)."""

from __future__ import annotations

import asyncio
import base64
import threading
import time
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np

from fdb.audio import float_to_pcm16
from serving.conversation.chunker import speakable
from serving.graph.declare import cascade
from serving.graph.nodes import build_nodes
from serving.graph.runtime import SessionGraph
from serving.graph.streams import Chunk, Pcm16, control
from serving.hub import ModelHub
from serving.realtime.graph_output import DeliverySink, GraphOutput
from serving.realtime.negotiation import initial_config
from serving.systems import SystemConfig

FIRST = "Well, the sky is blue because of sunlight,"
REST = (
    " which is scattered by the air. Blue light is scattered the most, so we see it everywhere;"
    " at sunset the light travels further and the sky turns red."
)


@dataclass
class FakeLlm:
    """Streams FIRST and the space that completes it, then waits (up to 5 s) for ``go`` before
    streaming the rest of REST word by word."""

    go: threading.Event = field(default_factory=threading.Event)
    delay_s: float = 0.0
    tokens_sent: int = 0
    closed_at: float | None = None
    waited: bool | None = None  # True: go was set while generation was held mid-reply

    def stream_reply(self, messages, max_tokens=48, temperature=0.0):
        try:
            words = (FIRST + REST).split(" ")
            for piece in [words[0], *(" " + w for w in words[1 : FIRST.count(" ") + 2])]:
                self.tokens_sent += 1
                yield piece
            self.waited = self.go.wait(5.0)
            for word in REST.split(" ")[2:] * 50:
                time.sleep(self.delay_s)
                self.tokens_sent += 1
                yield " " + word
                if self.delay_s == 0 and self.tokens_sent > 60:
                    return
        finally:
            self.closed_at = time.monotonic()


class FakeTts:
    rate = 16000

    def __init__(self) -> None:
        self.heard: list[str | None] = []  # the heard language of each synthesized chunk

    def synthesize(self, text: str, heard_language: str | None = None) -> np.ndarray:
        self.heard.append(heard_language)
        return np.full(len(text.split()) * 1600, 0.1, dtype=np.float32)  # 0.1 s per word


class FakeOutbox:
    def __init__(self, on_audio: threading.Event) -> None:
        self.events: list = []
        self._on_audio = on_audio

    async def send(self, event) -> bool:
        self.events.append(event)
        if event.type == "response.output_audio.delta":
            self._on_audio.set()
        return True

    def of_type(self, type_: str) -> list:
        return [e for e in self.events if e.type == type_]


async def _answer(
    llm: FakeLlm,
    modalities=("text", "audio"),
    cancel_at_audio: bool = False,
    language: str | None = None,
    tts: FakeTts | None = None,
    input_ended=lambda: True,
):
    """One committed utterance answered through the graph; (events, dialog node, cancel time).
    ``language``: what the fake recognizer reports for it."""
    system = SystemConfig()
    config = initial_config(system).model_copy(
        update={"output_modalities": modalities, "turn_detection": None}
    )
    asr = SimpleNamespace(
        transcribe=lambda samples: SimpleNamespace(text="Why is the sky blue?", language=language)
    )
    models = ModelHub(
        asr=asr,
        llm=llm,
        tts=tts or FakeTts(),
        turn=SimpleNamespace(complete_probability=lambda a: 1.0),
    )
    outbox = FakeOutbox(llm.go)
    output = GraphOutput(outbox, system, lambda: config, input_ended, lambda: 500)
    nodes = build_nodes(cascade(), models)
    graph = SessionGraph(cascade(), nodes, DeliverySink())
    output.attach(graph)
    await graph.open()
    tasks = [asyncio.create_task(output.run()), asyncio.create_task(output.deliver())]
    await graph.control(
        control(
            "configure",
            turn_detection=None,
            instructions=config.instructions,
            output_modalities=list(modalities),
            sampling=config.sampling.model_dump(),
        )
    )
    await graph.append(Chunk("pcm16", Pcm16(float_to_pcm16(np.zeros(8000, np.float32)))))
    await output.committed("item_1", 0, 500)
    await graph.control(control("commit"))
    cancelled_at = None
    try:
        while not outbox.of_type("response.done"):
            if (
                cancel_at_audio
                and cancelled_at is None
                and outbox.of_type("response.output_audio.delta")
            ):
                await graph.control(control("interrupt"))  # response.cancel
                cancelled_at = time.monotonic()
            await asyncio.sleep(0.005)
    finally:
        for task in tasks:
            task.cancel()
        await graph.close()
    return outbox, nodes["dialog"], cancelled_at


def test_first_audio_leaves_while_the_llm_is_still_generating():
    llm = FakeLlm()  # holds mid-reply until the first audio delta was sent
    outbox, dialog, _ = asyncio.run(_answer(llm))
    assert llm.waited is True, "the first audio waited for the whole reply"
    types = [e.type for e in outbox.events]
    first_audio = types.index("response.output_audio.delta")
    transcript = [e.delta for e in outbox.of_type("response.output_audio_transcript.delta")]
    assert (
        transcript[0] == FIRST
        and types[first_audio - 1] == "response.output_audio_transcript.delta"
    )
    assert len(transcript) >= 3
    assert types.index("sglang.response.progress") > first_audio
    done = outbox.of_type("response.done")[0].response
    assert done.status == "completed" and done.status_details.reason == "stop"
    said = outbox.of_type("response.output_audio_transcript.done")[0].transcript
    assert said == "".join(transcript) and said.startswith(speakable(FIRST + REST))
    assert dialog.history[-1] == {"role": "assistant", "content": said}


def test_text_only_replies_stream_their_text():
    llm = FakeLlm()
    llm.go.set()
    outbox, dialog, _ = asyncio.run(_answer(llm, modalities=("text",)))
    assert not outbox.of_type("response.output_audio.delta")
    deltas = [e.delta for e in outbox.of_type("response.output_text.delta")]
    assert deltas[0] == FIRST and len(deltas) >= 3
    assert outbox.of_type("response.output_text.done")[0].text == "".join(deltas)
    assert dialog.history[-1]["content"] == "".join(deltas)


def test_a_cancel_stops_the_llm_between_tokens():
    llm = FakeLlm(delay_s=0.01)  # 50 repetitions of REST: ~10 s if nobody stops it
    outbox, dialog, cancelled_at = asyncio.run(_answer(llm, cancel_at_audio=True))
    assert cancelled_at is not None
    done = outbox.of_type("response.done")[0].response
    # the server's own reason; the wire names it interrupted (the Guide) or client_cancelled (GA)
    assert done.status == "cancelled" and done.status_details.reason == "client_cancelled"
    deadline = time.monotonic() + 2
    while llm.closed_at is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert llm.closed_at is not None and llm.closed_at - cancelled_at < 0.5
    assert llm.tokens_sent < 100
    heard = outbox.of_type("sglang.response.heard")
    assert len(heard) == 1 and heard[0].text in ("", FIRST)
    said = [m["content"] for m in dialog.history if m["role"] == "assistant"]
    assert said in ([], [FIRST + "…"])  # only a chunk whose audio left in full is kept


def test_the_recognizers_language_reaches_the_speech_node_for_language_auto():
    """language: auto (the guide): the reply is tagged with the language the recognizer heard in
    the turn it answers; the openai_speech client writes it as a name (test_service_nodes)."""
    llm, tts = FakeLlm(), FakeTts()
    llm.go.set()
    asyncio.run(_answer(llm, language="german", tts=tts))
    assert tts.heard and set(tts.heard) == {"german"}
    quiet, untagged = FakeLlm(), FakeTts()
    quiet.go.set()
    asyncio.run(_answer(quiet, tts=untagged))
    assert untagged.heard and set(untagged.heard) == {None}


class FakeStreamingTts:
    """A streaming speech model (as serving.gpu's CSM): ``astream`` yields 80 ms frames, four a
    word; the first chunk's last frame waits (up to 5 s) for ``go``, which the outbox sets at the
    first audio delta."""

    rate = 24000

    def __init__(self, go: threading.Event) -> None:
        self.go = go
        self.chunks: list[str] = []
        self.waited: bool | None = None  # True: the first audio left before the chunk was whole
        self.input_ended = False  # the session's input: live (paced delivery) until the wait

    async def astream(self, text: str):
        self.chunks.append(text)
        frames = 4 * len(text.split())
        for i in range(frames):
            if len(self.chunks) == 1 and i == frames - 1:
                for _ in range(500):
                    if self.go.is_set():
                        break
                    await asyncio.sleep(0.01)
                self.waited = self.go.is_set()
                self.input_ended = True  # the rest of the reply leaves unpaced, at once
            await asyncio.sleep(0)
            yield np.full(1920, 0.1, dtype=np.float32)


def test_a_streaming_speech_models_audio_leaves_before_its_chunk_is_whole():
    """With ``reply.chunk`` a chunk's transcript delta leaves first and its audio as it comes,
    each 80 ms frame when it is made (the rest at its progress), while the session's input is
    live: a reply's first frame is not held for the model's next one."""
    llm = FakeLlm()
    tts = FakeStreamingTts(llm.go)
    outbox, _, _ = asyncio.run(_answer(llm, tts=tts, input_ended=lambda: tts.input_ended))
    assert tts.waited is True, "the first audio waited for the whole first chunk"
    types = [e.type for e in outbox.events]
    first_audio = types.index("response.output_audio.delta")
    assert types[first_audio - 1] == "response.output_audio_transcript.delta"
    assert types.index("sglang.response.progress") > first_audio
    sizes = [len(base64.b64decode(e.delta)) for e in outbox.of_type("response.output_audio.delta")]
    # the first frame alone (80 ms, not a 100 ms piece), sent while the chunk was being made
    assert sizes[0] == 1920 * 2
    assert all(size == 1920 * 2 for size in sizes[:3])
    assert sum(sizes) == sum(4 * len(c.split()) * 1920 * 2 for c in tts.chunks)  # all of it
    done = outbox.of_type("response.done")[0].response
    assert done.status == "completed" and done.status_details.reason == "stop"


def test_the_sink_marks_a_replys_first_audio_sent_after_the_speech_nodes_first_frame(
    monkeypatch, caplog
):
    """FDB_STAGE_MARKS=1: the pacing sink logs ``session audio.delta`` once a graph, when it
    sends the first reply audio: with a streaming speech model that is its first frame's time,
    not its second's (benchmarks/server_stages.py reads it beside the nodes' marks)."""
    monkeypatch.setenv("FDB_STAGE_MARKS", "1")
    caplog.set_level("INFO", logger="fdb.serving")
    llm = FakeLlm()
    tts = FakeStreamingTts(llm.go)
    asyncio.run(_answer(llm, tts=tts, input_ended=lambda: tts.input_ended))
    marks = {}
    for record in caplog.records:
        words = record.getMessage().split()
        if words[:2] == ["stage", "mark"]:
            marks.setdefault(f"{words[3]}:{words[4]}", []).append(float(words[5]))
    assert len(marks["session:audio.delta"]) == 1  # the first reply audio only
    assert marks["tts:pcm_f32le"][0] <= marks["session:audio.delta"][0]
