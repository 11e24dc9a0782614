"""Node adapters over the embedded models (``fdb.models``): the ``vad`` stage (Silero
``StreamingVad``), the ``turn_detection`` stage (Smart Turn), ``whisper_transcription``
(faster-whisper tiny.en), ``dialog``, ``llama_chat`` (SmolLM2) and ``piper_speech`` (Piper, 24 kHz pcm_f32le).

``build_nodes(decl, models)`` makes one node per declared node; ``EmbeddedModels`` loads each
model once and is shared by every session's graph. Model calls run in worker threads.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from functools import cached_property

import numpy as np

from fdb.audio import pcm16_to_float, resample
from fdb.errors import FdbError
from serving.graph.declare import GraphDecl, NodeDecl
from serving.graph.kinds import (
    DialogOptions,
    LlamaChatOptions,
    PiperSpeechOptions,
    WhisperTranscriptionOptions,
)
from serving.graph.runtime import Emit, Node
from serving.graph.streams import (
    PCM16_RATE,
    PCM_F32_RATE,
    Chunk,
    Message,
    Messages,
    PcmF32,
    TextDelta,
    Transcript,
    control,
)

SENTENCE_END = re.compile(r"[.!?;…][\"')\]]*\s")
IDLE_KEEP_MS = 30000  # input audio kept while no utterance is open: the VAD may lag the input by that much


class EmbeddedModels:
    """The offline models, loaded on first use and shared by the nodes of every session."""

    @cached_property
    def asr(self):
        from fdb.models.asr import load_asr

        return load_asr("faster-whisper")

    @cached_property
    def llm(self):
        from fdb.models.llm import SmolLm2

        return SmolLm2()

    @cached_property
    def turn(self):
        from fdb.models.turn import load_turn_backend

        return load_turn_backend()

    def tts(self, options: PiperSpeechOptions):
        from fdb.models.tts import PiperTts

        key = (options.deterministic, options.length_scale)
        cache = self.__dict__.setdefault("_tts", {})
        if key not in cache:
            cache[key] = PiperTts(deterministic=options.deterministic, length_scale=options.length_scale)
        return cache[key]


async def stream_in_thread(make: Callable[[], Iterator], stop: threading.Event) -> AsyncIterator:
    """Iterate a blocking generator in a worker thread; cancelling the reader stops it at the next item."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()

    def work() -> None:
        items = make()
        try:
            for item in items:
                if stop.is_set():
                    break
                loop.call_soon_threadsafe(queue.put_nowait, ("item", item))
        except Exception as err:  # handed to the reader
            loop.call_soon_threadsafe(queue.put_nowait, ("error", err))
            return
        finally:
            getattr(items, "close", lambda: None)()
        loop.call_soon_threadsafe(queue.put_nowait, ("end", None))

    worker = loop.run_in_executor(None, work)
    try:
        while True:
            kind, value = await queue.get()
            if kind == "end":
                return
            if kind == "error":
                raise value
            yield value
    finally:
        stop.set()
        if worker.done():
            worker.result()


class VadNode(Node):
    """Stage ``vad``: speech.started / speech.stopped on the input timeline; commit resets it."""

    def __init__(self, **settings):
        self._settings = settings
        self._vad = None

    async def open(self) -> None:
        from fdb.models.vad import StreamingVad

        self._vad = await asyncio.to_thread(StreamingVad, **self._settings)

    async def _send(self, events: list[tuple[str, int]], emit: Emit) -> None:
        for name, t_ms in events:
            await emit(control(name.replace("_", "."), t_ms=t_ms))

    async def on_chunk(self, chunk: Chunk, emit: Emit) -> None:
        if chunk.format == "pcm16":
            events = await asyncio.to_thread(self._vad.feed, pcm16_to_float(chunk.payload.data))
            await self._send(events, emit)
        elif chunk.control == "commit":
            self._vad.reset()
        elif chunk.control == "configure" and "turn_detection" in chunk.payload.data:
            td = chunk.payload.data["turn_detection"] or {}
            self._vad.configure(td.get("threshold", self._vad.threshold),
                                td.get("silence_duration_ms", self._vad.silence_duration_ms),
                                td.get("prefix_padding_ms", self._vad.prefix_padding_ms))

    async def on_end(self, emit: Emit) -> None:
        await self._send(self._vad.flush(), emit)


class Timeline:
    """The input audio on its timeline (16 kHz samples); while no utterance is open only the
    last IDLE_KEEP_MS are kept."""

    def __init__(self) -> None:
        self.audio = np.zeros(0, dtype=np.float32)
        self.base = 0  # input sample index of audio[0]

    @property
    def end(self) -> int:
        return self.base + len(self.audio)

    @property
    def end_ms(self) -> int:
        return self.end * 1000 // PCM16_RATE

    def append(self, data: bytes, keep_all: bool) -> None:
        self.audio = np.concatenate([self.audio, pcm16_to_float(data)])
        keep = IDLE_KEEP_MS * PCM16_RATE // 1000
        if not keep_all and len(self.audio) > keep:
            self.base += len(self.audio) - keep
            self.audio = self.audio[-keep:]

    def index(self, t_ms: int) -> int:
        return min(max(self.base, t_ms * PCM16_RATE // 1000), self.end)

    def slice(self, start: int, stop: int) -> np.ndarray:
        return self.audio[start - self.base:max(start, stop) - self.base]


class WhisperNode(Node):
    """``whisper_transcription``: one final transcript per utterance (speech.started ->
    speech.stopped + pad_ms, or up to a commit / the end of input)."""

    def __init__(self, models: EmbeddedModels, options: WhisperTranscriptionOptions):
        self._models, self._options = models, options
        self._timeline = Timeline()
        self._start: int | None = None  # utterance start, input sample index

    async def open(self) -> None:
        await asyncio.to_thread(lambda: self._models.asr)

    async def on_chunk(self, chunk: Chunk, emit: Emit) -> None:
        if chunk.format == "pcm16":
            self._timeline.append(chunk.payload.data, keep_all=self._start is not None)
        elif chunk.control == "speech.started":
            self._start = self._timeline.index(chunk.t_ms)
        elif chunk.control == "speech.stopped" and self._start is not None:
            await self._utterance((chunk.t_ms + self._options.pad_ms) * PCM16_RATE // 1000, emit)
        elif chunk.control == "commit":
            await self._utterance(self._timeline.end, emit)

    async def _utterance(self, stop: int, emit: Emit) -> None:
        start = self._timeline.base if self._start is None else self._start
        samples = self._timeline.slice(start, stop)
        self._start = None
        result = await asyncio.to_thread(self._models.asr.transcribe, samples)
        await emit(Chunk("transcript", Transcript(result.text.strip(), True), t_ms=stop * 1000 // PCM16_RATE))

    async def on_end(self, emit: Emit) -> None:
        if self._start is not None:
            await self._utterance(self._timeline.end, emit)


class TurnDetectionNode(Node):
    """Stage ``turn_detection`` (Smart Turn v3.2): the VAD's speech.started opens a turn; at each
    VAD speech.stopped the turn's audio is scored and the turn ends once the input has run that
    score's silence past the stop (``serving.realtime.end_of_turn``); speech resuming before then
    continues the turn; commit forgets it. ``server_vad`` passes the VAD's boundaries through.

    Held pauses are timed on the input this node has received, so the input must arrive at its
    real-time pace (as a realtime client sends it) for a resumed speech to be seen in time."""

    def __init__(self, models: EmbeddedModels, eagerness: str = "medium"):
        self._models, self._eagerness, self._semantic = models, eagerness, True
        self._timeline = Timeline()
        self._start_ms: int | None = None
        self._held = None  # end_of_turn.HeldPause

    async def open(self) -> None:
        await asyncio.to_thread(lambda: self._models.turn)

    async def on_chunk(self, chunk: Chunk, emit: Emit) -> None:
        if chunk.format == "pcm16":
            self._timeline.append(chunk.payload.data, keep_all=self._start_ms is not None)
        elif chunk.control == "speech.started":
            self._held = None  # a held pause resumes the same turn
            if self._start_ms is None:
                self._start_ms = chunk.t_ms
                await emit(chunk)
        elif chunk.control == "speech.stopped" and self._start_ms is not None:
            await self._pause(chunk.t_ms, emit)
        elif chunk.control == "commit":
            self._start_ms, self._held = None, None
        elif chunk.control == "configure" and (td := chunk.payload.data.get("turn_detection")):
            self._semantic = td.get("type", "semantic_vad") == "semantic_vad"
            self._eagerness = td.get("eagerness", self._eagerness)
        if self._held is not None and self._held.due(self._timeline.end_ms):
            await self._end_turn(self._held.end_ms, emit)

    async def _pause(self, t_ms: int, emit: Emit) -> None:
        from serving.realtime.end_of_turn import HeldPause, required_silence_ms

        if not self._semantic:
            await self._end_turn(t_ms, emit)
            return
        audio = self._timeline.slice(self._timeline.index(self._start_ms), self._timeline.index(t_ms))
        p = await asyncio.to_thread(self._models.turn.complete_probability, audio)
        self._held = HeldPause(t_ms, p, required_silence_ms(p, self._eagerness))

    async def _end_turn(self, t_ms: int, emit: Emit) -> None:
        self._start_ms, self._held = None, None
        await emit(control("speech.stopped", t_ms=t_ms))

    async def on_end(self, emit: Emit) -> None:
        if self._start_ms is not None:
            await self._end_turn(self._held.end_ms if self._held else self._timeline.end_ms, emit)


class DialogNode(Node):
    """``dialog``: numbers turns from 1 in utterance order, sends the history as messages, keeps
    the reply text (llm:text_delta), closes a turn at the ending node's turn.done (a control edge)
    and interrupts the open reply when speech starts during it."""

    def __init__(self, options: DialogOptions):
        self._options = options
        self._history: list[Message] = []
        self._turn = 0
        self._open: int | None = None
        self._reply: dict[int, str] = {}
        self._waiting: list[tuple[int, str]] = []

    async def on_chunk(self, chunk: Chunk, emit: Emit) -> None:
        if chunk.format == "transcript" and chunk.payload.is_final:
            self._turn += 1
            await emit(control("turn.queued", turn=self._turn, t_ms=chunk.t_ms))
            text = chunk.payload.text[:self._options.max_text_chars]
            if not text:
                await emit(control("turn.empty", turn=self._turn, t_ms=chunk.t_ms))
            elif self._open is None:
                await self._start(self._turn, text, emit)
            else:
                self._waiting.append((self._turn, text))
        elif chunk.format == "text_delta" and chunk.turn is not None:
            self._reply[chunk.turn] = self._reply.get(chunk.turn, "") + chunk.payload.text
        elif chunk.control == "speech.started" and self._open is not None:
            turn, self._open = self._open, None
            await emit(control("interrupt", turn=turn, t_ms=chunk.t_ms))
            await emit(control("turn.interrupted", turn=turn, t_ms=chunk.t_ms))
            self._finish(turn)
            await self._next(emit)

    async def on_control(self, chunk: Chunk, emit: Emit) -> None:
        if chunk.control == "turn.done" and chunk.turn == self._open:
            self._open = None
            self._finish(chunk.turn)
            await self._next(emit)

    def idle(self) -> bool:
        return self._open is None and not self._waiting

    def _finish(self, turn: int) -> None:
        reply = self._reply.pop(turn, "").strip()
        if reply:
            self._history.append(Message("assistant", reply))

    async def _next(self, emit: Emit) -> None:
        if self._waiting:
            turn, text = self._waiting.pop(0)
            await self._start(turn, text, emit)

    async def _start(self, turn: int, text: str, emit: Emit) -> None:
        self._history.append(Message("user", text))
        messages = (Message("system", self._options.system_prompt), *self._history)
        if sum(len(m.content) for m in messages) + self._options.max_text_chars > self._options.max_history_chars:
            raise FdbError(f"dialog: turn {turn}'s history exceeds max_history_chars "
                           f"({self._options.max_history_chars})", "open a new session")
        self._open = turn
        await emit(Chunk("messages", Messages(messages), turn=turn))


class LlamaChatNode(Node):
    """``llama_chat``: streams SmolLM2's reply to each messages chunk as text_delta, then turn.done."""

    def __init__(self, models: EmbeddedModels, options: LlamaChatOptions):
        self._models, self._options = models, options

    async def open(self) -> None:
        await asyncio.to_thread(lambda: self._models.llm)

    async def on_chunk(self, chunk: Chunk, emit: Emit) -> None:
        if chunk.format != "messages":
            return
        messages = [{"role": m.role, "content": m.content} for m in chunk.payload.messages]
        opts = self._options

        def make() -> Iterator[str]:
            return self._models.llm.stream_reply(messages, max_tokens=opts.max_tokens, temperature=opts.temperature)

        async for piece in stream_in_thread(make, threading.Event()):
            await emit(Chunk("text_delta", TextDelta(piece), turn=chunk.turn))
        await emit(control("turn.done", turn=chunk.turn))


class PiperSpeechNode(Node):
    """``piper_speech``: synthesizes each finished sentence of a turn's text_delta (the rest at the
    source's turn.done) as 24 kHz pcm_f32le; turn.started at the first audio, turn.done after the last."""

    def __init__(self, models: EmbeddedModels, options: PiperSpeechOptions):
        self._models, self._options = models, options
        self._text: dict[int, str] = {}
        self._started: set[int] = set()

    async def open(self) -> None:
        await asyncio.to_thread(self._models.tts, self._options)

    async def on_chunk(self, chunk: Chunk, emit: Emit) -> None:
        turn = chunk.turn
        if chunk.format == "text_delta":
            text = self._text.get(turn, "") + chunk.payload.text
            while (end := SENTENCE_END.search(text)) is not None:
                await self._say(turn, text[:end.end()], emit)
                text = text[end.end():]
            self._text[turn] = text
        elif chunk.control == "turn.done":
            await self._say(turn, self._text.pop(turn, ""), emit)
            await emit(control("turn.done", turn=turn))
            self._started.discard(turn)

    async def on_control(self, chunk: Chunk, emit: Emit) -> None:
        if chunk.control == "interrupt" and chunk.turn is not None:
            self._text.pop(chunk.turn, None)

    async def _say(self, turn: int | None, sentence: str, emit: Emit) -> None:
        if not re.search(r"\w", sentence):
            return
        tts = self._models.tts(self._options)
        samples = await asyncio.to_thread(tts.synthesize, sentence.strip())
        if turn not in self._started:
            self._started.add(turn)
            await emit(control("turn.started", turn=turn))
        await emit(Chunk("pcm_f32le", PcmF32(resample(samples, tts.rate, PCM_F32_RATE)), turn=turn))


def _node(decl: NodeDecl, models: EmbeddedModels, vad_settings: dict) -> Node:
    if decl.stages == ("vad",):
        return VadNode(**vad_settings)
    if decl.stages == ("turn_detection",):
        return TurnDetectionNode(models)
    builders = {"whisper_transcription": lambda: WhisperNode(models, decl.options),
                "dialog": lambda: DialogNode(decl.options),
                "llama_chat": lambda: LlamaChatNode(models, decl.options),
                "piper_speech": lambda: PiperSpeechNode(models, decl.options)}
    build = builders.get(decl.kind or "")
    if build is None:
        what = f"kind '{decl.kind}'" if decl.kind else f"stages {list(decl.stages)}"
        raise FdbError(f"node '{decl.name}': no graph adapter runs {what} yet",
                       "use the embedded kinds (whisper_transcription, dialog, llama_chat, piper_speech, "
                       "stages: [vad] or [turn_detection]) in a graph, or serve this system through serving/realtime")
    return build()


def build_nodes(decl: GraphDecl, models: EmbeddedModels | None = None,
                vad_settings: dict | None = None) -> dict[str, Node]:
    """One adapter per declared node (a fresh set per session; the models are shared)."""
    models = models or EmbeddedModels()
    return {name: _node(d, models, dict(vad_settings or {})) for name, d in decl.nodes.items()}
