"""Node adapters over the embedded models (``fdb.models``): the ``vad`` stage (Silero
``StreamingVad``), the ``turn_detection`` stage (Smart Turn), ``whisper_transcription``
(faster-whisper tiny.en), ``llama_chat`` (SmolLM2) and ``piper_speech`` (Piper, 24 kHz
pcm_f32le); the ``dialog`` is in ``serving.graph.dialog_node``.

``build_nodes(decl, hub)`` makes one node per declared node over the server's models
(``serving.hub.ModelHub``, shared by every session's graph; a hub made without a server loads
each model on first use). Model calls run in worker threads: the hub's model and VAD pools, a
reply's token stream in asyncio's default pool (a stream waiting for the model must never hold
a pool thread its synthesis needs).
With a compute gate (``serving.graph.gate``) the calls of the models that compute on this host
(``local_compute``) take its slots by priority: a reply's first chunk (its synthesis, then its
tokens) before transcriptions, and those before the rest of the replies.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import re
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from fdb.audio import pcm16_to_float, resample
from fdb.errors import FdbError
from serving.conversation.chunker import FIRST_CHUNK, SpeechChunker
from serving.conversation.end_of_turn import CANDIDATE_MS, HeldPause, required_silence_ms
from serving.graph import registry
from serving.graph.declare import GraphDecl
from serving.graph.gate import FIRST_AUDIO, FIRST_TEXT, REST, TRANSCRIBE
from serving.graph.kinds import (
    LlamaChatOptions,
    PiperSpeechOptions,
    WhisperTranscriptionOptions,
)
from serving.graph.runtime import Emit, Node, NodeContext
from serving.graph.streams import (
    PCM16_RATE,
    PCM_F32_RATE,
    Chunk,
    PcmF32,
    TextDelta,
    Transcript,
    control,
)

if TYPE_CHECKING:  # the hub loads this package's graph: typing only, no import cycle
    from serving.hub import ModelHub

T = TypeVar("T")
HOLD_MAX_S = 3.0  # the longest a reply's token stream waits for its first chunk's synthesis
HOLD_POLL_S = 0.02  # how often a held stream looks at its stop flag
PREFETCH_TTL_S = (
    2.0  # a reply started ahead at a pause stops if its turn has not claimed it by then
)
IDLE_KEEP_MS = (
    30000  # input audio kept while no utterance is open: the VAD may lag the input by that much
)


async def stream_in_thread(make: Callable[[], Iterator], stop: threading.Event) -> AsyncIterator:
    """Iterate a blocking generator in a worker thread; cancelling the reader stops it at the next
    item."""
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
    """Stage ``vad``: speech.started / speech.stopped on the input timeline. ``configure`` with
    turn_detection null turns it off (an open utterance stops at the input's end), semantic_vad
    makes its pauses the 200 ms candidates of the turn_detection stage; ``commit`` stops an open
    utterance at the input's end and resets it."""

    @classmethod
    def build(cls, ctx: NodeContext) -> VadNode:
        return cls(ctx.models, **ctx.vad_settings)

    def __init__(self, models: ModelHub, **settings):
        self._models = models
        self._settings = settings
        self._vad = None
        self._on = True
        self._skipped = 0  # input samples not fed while off: the VAD's timeline offset
        self._received = 0  # input samples

    async def open(self) -> None:
        self._vad = await self._models.run_vad(lambda: self._models.new_vad(**self._settings))

    async def _send(self, events: list[tuple[str, int]], emit: Emit) -> None:
        offset = self._skipped * 1000 // PCM16_RATE
        for name, t_ms in events:
            await emit(control(name.replace("_", "."), t_ms=t_ms + offset))

    async def _stop_open(self, emit: Emit) -> None:
        if self._vad.in_speech:
            await emit(control("speech.stopped", t_ms=self._received * 1000 // PCM16_RATE))
        self._reset()

    def _reset(self) -> None:
        self._vad.reset()

    async def _feed(self, samples: np.ndarray) -> list[tuple[str, int]]:
        """The detector's events of ``samples`` (its own model, in the VAD pool)."""
        return await self._models.run_vad(self._vad.feed, samples)

    async def on_chunk(self, chunk: Chunk, emit: Emit) -> None:
        if chunk.format == "pcm16":
            samples = pcm16_to_float(chunk.payload.data)
            self._received += len(samples)
            if not self._on:
                self._skipped += len(samples)
                return
            await self._send(await self._feed(samples), emit)
        elif chunk.control == "commit" and self._on:
            await self._stop_open(emit)
        elif chunk.control == "configure" and "turn_detection" in chunk.payload.data:
            await self._configure(chunk.payload.data["turn_detection"], emit)

    async def _configure(self, td: dict | None, emit: Emit) -> None:
        if td is None:
            if self._on:
                await self._stop_open(emit)
            self._on = False
            return
        self._on = True
        defaults = self._settings
        if td.get("type") == "semantic_vad":
            td = {"silence_duration_ms": CANDIDATE_MS}
        self._vad.configure(
            td.get("threshold", defaults.get("threshold", 0.5)),
            td.get("silence_duration_ms", defaults.get("silence_duration_ms", 500)),
            td.get("prefix_padding_ms", defaults.get("prefix_padding_ms", 300)),
        )

    async def on_end(self, emit: Emit) -> None:
        if self._on:
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
        return self.audio[start - self.base : max(start, stop) - self.base]


class WhisperNode(Node):
    """``whisper_transcription``: one final transcript per utterance: speech.started ->
    speech.stopped + pad_ms; a commit ends an open utterance, and without turn detection
    (``configure`` with turn_detection null) it takes all the audio since the last utterance (or
    the last ``clear``), as does the end of input. The transcript's t_ms is the utterance's end
    (pad included).

    Transcription runs beside the audio intake, one utterance after another in order: a slow
    transcription (a loaded host, a long turn) never stops the node taking the input, which
    would fill the session's input edge and refuse the client's appends. A failed transcription
    fails the node at its next chunk (audio arrives every packet) or at the end of input.

    Prefetch: at a ``speech.pausing`` (the turn may end there) the utterance that a
    speech.stopped with the same t_ms would cut is transcribed at once, as soon as its pad has
    arrived, and sent as a transcript with ``is_final`` False (the dialog may start the reply
    ahead). The stop that follows with that t_ms takes the same transcription as its final one:
    the same audio, so the same text; a ``speech.resumed``, another pause or another stop drops
    it (a transcription already running finishes and is discarded).

    The pad is ``pad_ms``, at most the system's ``prefetch_ms``: a pause's transcription starts
    once its pad has arrived, so a longer pad would hold it until the turn's own stop."""

    @classmethod
    def build(cls, ctx: NodeContext) -> WhisperNode:
        return cls(ctx.models, ctx.decl.options, prefetch_ms=ctx.vad_settings.get("prefetch_ms"))

    def __init__(
        self,
        models: ModelHub,
        options: WhisperTranscriptionOptions,
        prefetch_ms: int | None = None,
    ):
        self._models, self._options = models, options
        pad_ms = options.pad_ms if prefetch_ms is None else min(options.pad_ms, prefetch_ms)
        self._pad = pad_ms * PCM16_RATE // 1000  # input samples kept after the speech end
        self._timeline = Timeline()
        self._start: int | None = None  # utterance start, input sample index
        self._last_end = 0  # end of the previous utterance, input sample index
        self._detecting = True
        self._pending: asyncio.Future | None = None  # the last utterance's transcription
        self._ahead: tuple[int, int] | None = (
            None  # a pause's utterance, (start, stop), its pad to come
        )
        self._prefetched: tuple[int, int, asyncio.Future] | None = (
            None  # (start, stop, its transcription)
        )

    async def open(self) -> None:
        await self._models.run(lambda: self._models.asr)

    async def on_chunk(self, chunk: Chunk, emit: Emit) -> None:
        self._raise_failure()
        if chunk.format == "pcm16":
            keep = self._start is not None or not self._detecting
            self._timeline.append(chunk.payload.data, keep_all=keep)
            if self._ahead is not None and self._timeline.end >= self._ahead[1]:
                self._prefetch(emit)
        elif chunk.control == "speech.started":
            self._drop_prefetch()
            self._start = max(self._timeline.index(chunk.t_ms), self._last_end)
        elif chunk.control == "speech.pausing" and self._start is not None:
            self._drop_prefetch()
            end = chunk.t_ms * PCM16_RATE // 1000
            self._ahead = (self._start, end + self._pad)
            if self._timeline.end >= self._ahead[1]:
                self._prefetch(emit)
        elif chunk.control == "speech.resumed":
            self._drop_prefetch()
        elif chunk.control == "speech.stopped" and self._start is not None:
            end = chunk.t_ms * PCM16_RATE // 1000
            await self._utterance(end, end + self._pad, emit)
        elif chunk.control == "commit":
            await self._rest(emit)
        elif chunk.control == "clear" and not self._detecting:  # input_audio_buffer.clear
            self._last_end, self._start = self._timeline.end, None
        elif chunk.control == "configure" and "turn_detection" in chunk.payload.data:
            self._detecting = chunk.payload.data["turn_detection"] is not None

    async def _rest(self, emit: Emit) -> None:
        """An open utterance, or without turn detection the audio since the last one, ends here."""
        end = self._timeline.end
        if self._start is None and not self._detecting and end > self._last_end:
            self._start = max(self._last_end, self._timeline.base)
        if self._start is not None:
            await self._utterance(end, end, emit)

    def _prefetch(self, emit: Emit) -> None:
        """Transcribe the pause's utterance now, unless an earlier one is still being transcribed
        (its reply would wait behind that one's anyway)."""
        (start, stop), self._ahead = self._ahead, None
        if self._pending is not None and not self._pending.done():
            return
        recognized = asyncio.ensure_future(self._recognize(self._timeline.slice(start, stop)))
        self._prefetched = (start, stop, recognized)

        async def tentative() -> None:
            try:
                text, language = await recognized
            except asyncio.CancelledError:
                if recognized.cancelled():
                    return  # dropped
                raise
            if self._prefetched is not None and self._prefetched[2] is recognized:
                await emit(
                    Chunk(
                        "transcript",
                        Transcript(text, False, language),
                        t_ms=stop * 1000 // PCM16_RATE,
                    )
                )

        self._pending = asyncio.ensure_future(tentative())

    def _drop_prefetch(self) -> None:
        self._ahead = None
        if self._prefetched is not None:
            self._prefetched[
                2
            ].cancel()  # not started: it never runs; running: its result is dropped
            self._prefetched = None

    async def _utterance(self, end: int, stop: int, emit: Emit) -> None:
        start, prefetched, self._prefetched, self._ahead = self._start, self._prefetched, None, None
        self._start, self._last_end = None, end
        before = self._pending
        if prefetched is not None and prefetched[:2] == (start, stop):
            recognized = prefetched[2]  # the same audio: the same transcription
        else:
            if prefetched is not None:
                prefetched[2].cancel()
            samples = self._timeline.slice(start, min(stop, self._timeline.end))
            recognized = asyncio.ensure_future(self._recognize(samples, before))
        self._pending = asyncio.ensure_future(self._transcribe(before, recognized, stop, emit))

    async def _recognize(
        self, samples: np.ndarray, before: asyncio.Future | None = None
    ) -> tuple[str, str | None]:
        """(text, language) of ``samples``, once ``before`` (an earlier transcription) is done."""
        if before is not None:
            await asyncio.gather(before, return_exceptions=True)
        asr, window_s = self._models.asr, self._options.window_s
        gate = {"backend": asr, "priority": TRANSCRIBE, "resource": f"asr-{id(asr)}"}
        if window_s is not None and hasattr(asr, "transcribe_utterance"):
            result = await self._models.run(
                functools.partial(asr.transcribe_utterance, min_window_s=window_s), samples, **gate
            )
        else:
            result = await self._models.run(asr.transcribe, samples, **gate)
        return result.text.strip(), getattr(result, "language", None)

    async def _transcribe(
        self, before: asyncio.Future | None, recognized: asyncio.Future, stop: int, emit: Emit
    ) -> None:
        if before is not None:
            await before  # transcripts leave in utterance order
        text, language = await recognized
        await emit(
            Chunk("transcript", Transcript(text, True, language), t_ms=stop * 1000 // PCM16_RATE)
        )

    def _raise_failure(self) -> None:
        if self._pending is not None and self._pending.done() and not self._pending.cancelled():
            error = self._pending.exception()
            if error is not None:
                raise error

    async def on_end(self, emit: Emit) -> None:
        await self._rest(emit)
        if self._pending is not None:
            await self._pending

    async def close(self) -> None:
        self._drop_prefetch()
        if self._pending is not None:
            self._pending.cancel()  # no-op once done; gather takes a failure nobody read
            await asyncio.gather(self._pending, return_exceptions=True)


class TurnDetectionNode(Node):
    """Stage ``turn_detection`` (Smart Turn v3.2): the VAD's speech.started opens a turn; at each
    VAD speech.stopped the turn's audio is scored and the turn ends once the input has run that
    score's silence past the stop (``serving.conversation.end_of_turn``); speech resuming before
    then continues the turn; commit ends it there. ``server_vad`` passes the VAD's boundaries
    through.

    A pause that may end the turn is announced ahead as ``speech.pausing`` (t_ms: the speech end
    the turn's speech.stopped would carry), and ``speech.resumed`` withdraws it: with
    ``server_vad`` the VAD's own (its ``prefetch_ms``), with ``semantic_vad`` a held pause. The
    nodes after it may start the turn's work there and keep it only if the stop has the same t_ms.

    Held pauses are timed on the input this node has received, so the input must arrive at its
    real-time pace (as a realtime client sends it) for a resumed speech to be seen in time."""

    @classmethod
    def build(cls, ctx: NodeContext) -> TurnDetectionNode:
        return cls(ctx.models, prefetch=ctx.vad_settings.get("prefetch_ms") is not None)

    def __init__(self, models: ModelHub, eagerness: str = "medium", prefetch: bool = True):
        self._models, self._eagerness, self._semantic, self._prefetch = (
            models,
            eagerness,
            True,
            prefetch,
        )
        self._timeline = Timeline()
        self._start_ms: int | None = None
        self._held = None  # end_of_turn.HeldPause
        self._pausing = False  # a speech.pausing was sent and neither resumed nor stopped
        self._missing: FdbError | None = None  # Smart Turn is not installed: server_vad only

    async def open(self) -> None:
        try:
            await self._models.run(lambda: self._models.turn)
        except (
            FdbError
        ) as exc:  # server_vad needs no model; semantic_vad fails when it is asked for
            self._missing = exc

    async def _resumed(self, t_ms: int | None, emit: Emit) -> None:
        if self._pausing:
            self._pausing = False
            await emit(control("speech.resumed", t_ms=t_ms))

    async def on_chunk(self, chunk: Chunk, emit: Emit) -> None:
        if chunk.format == "pcm16":
            self._timeline.append(chunk.payload.data, keep_all=self._start_ms is not None)
        elif chunk.control == "speech.started":
            self._held = None  # a held pause resumes the same turn
            await self._resumed(chunk.t_ms, emit)
            if self._start_ms is None:
                self._start_ms = chunk.t_ms
                await emit(chunk)
        elif (
            chunk.control == "speech.pausing" and self._start_ms is not None and not self._semantic
        ):
            self._pausing = True
            await emit(chunk)
        elif chunk.control == "speech.resumed":
            await self._resumed(chunk.t_ms, emit)
        elif chunk.control == "speech.stopped" and self._start_ms is not None:
            await self._pause(chunk.t_ms, emit)
        elif chunk.control == "commit" and self._start_ms is not None:
            await self._end_turn(
                self._timeline.end_ms, emit
            )  # the VAD's stop that follows is ignored
        elif chunk.control == "configure" and (td := chunk.payload.data.get("turn_detection")):
            self._semantic = td.get("type", "semantic_vad") == "semantic_vad"
            self._eagerness = td.get("eagerness", self._eagerness)
        if self._held is not None and self._held.due(self._timeline.end_ms):
            await self._end_turn(self._held.end_ms, emit)

    async def _pause(self, t_ms: int, emit: Emit) -> None:
        if not self._semantic:
            await self._end_turn(t_ms, emit)
            return
        if self._missing is not None:
            raise self._missing
        audio = self._timeline.slice(
            self._timeline.index(self._start_ms), self._timeline.index(t_ms)
        )
        p = await self._models.run_vad(self._models.turn.complete_probability, audio)
        self._held = HeldPause(t_ms, p, required_silence_ms(p, self._eagerness))
        if self._prefetch and not self._held.due(self._timeline.end_ms) and not self._pausing:
            self._pausing = True
            await emit(control("speech.pausing", t_ms=t_ms))

    async def _end_turn(self, t_ms: int, emit: Emit) -> None:
        self._start_ms, self._held, self._pausing = None, None, False
        await emit(control("speech.stopped", t_ms=t_ms))

    async def on_end(self, emit: Emit) -> None:
        if self._start_ms is not None:
            await self._end_turn(self._held.end_ms if self._held else self._timeline.end_ms, emit)


def hold_after_first_chunk(
    pieces: Iterator[str],
    released: threading.Event,
    stop: threading.Event,
    first: threading.Event | None = None,
    first_chunk: tuple[int, int] = FIRST_CHUNK,
) -> Iterator[str]:
    """``pieces``; once they complete a first speakable chunk (by the ``first_chunk`` rule;
    ``first`` is set then) the stream waits (in its thread) until ``released``, ``stop`` or
    HOLD_MAX_S."""
    chunker = SpeechChunker(*first_chunk)
    first = first or threading.Event()
    try:
        for piece in pieces:
            yield piece
            if not first.is_set() and chunker.push(piece):
                first.set()
                if released.is_set():
                    continue
                deadline = time.monotonic() + HOLD_MAX_S
                while (
                    not released.wait(HOLD_POLL_S)
                    and not stop.is_set()
                    and time.monotonic() < deadline
                ):
                    pass
                released.set()
    finally:
        getattr(pieces, "close", lambda: None)()


class AheadHeld:
    """The one thing a node made ahead of its turn (an :class:`_Ahead`, its task started), kept
    until the turn claims it (the same key) or it is dropped (the next one, a withdrawal) or
    PREFETCH_TTL_S passes unclaimed; ``counts``: started and claimed."""

    def __init__(self) -> None:
        self.item: _Ahead | None = None
        self.counts = {"started": 0, "claimed": 0}

    def keep(self, ahead: _Ahead) -> None:
        self.drop()
        ahead.expiry = asyncio.get_running_loop().call_later(PREFETCH_TTL_S, self._expire, ahead)
        self.item = ahead
        self.counts["started"] += 1

    def _expire(self, ahead: _Ahead) -> None:
        if self.item is ahead:
            self.drop()

    def drop(self) -> None:
        if self.item is not None:
            self.item.cancel()
            self.item = None

    def claim(self, key: Any) -> Any:
        """The thing ahead if it was made for ``key``, else None (a different one is stopped)."""
        ahead, self.item = self.item, None
        if ahead is not None and ahead.key != key:
            ahead.cancel()
            return None
        if ahead is not None:
            ahead.expiry.cancel()
            self.counts["claimed"] += 1
        return ahead

    async def close(self) -> None:
        ahead, self.item = self.item, None
        if ahead is not None:
            ahead.cancel()
            await asyncio.gather(ahead.task, return_exceptions=True)


class PrefetchingChatNode(Node):
    """What the chat kinds share about prefetch (``llama_chat`` here, ``causal_lm_gpu`` in
    serving/gpu/chat.py): a reply started ahead is held (:class:`AheadHeld`) until the next
    messages chunk claims it (same key) or drops it, at the next prefetch, or PREFETCH_TTL_S
    unclaimed."""

    live_controls = True  # turn.started and reply.prefetch arrive while a reply streams
    _held: AheadHeld
    first_chunk: tuple[int, int] = FIRST_CHUNK  # the system's rule (NodeContext.first_chunk)

    @property
    def _prefetch(self) -> _Prefetch | None:
        """The reply ahead, if one is held."""
        return self._held.item

    @property
    def prefetches(self) -> dict[str, int]:
        return self._held.counts

    def _key(self, messages: list[dict[str, str]]) -> tuple:
        raise NotImplementedError

    def _start_prefetch(self, messages: list[dict[str, str]], emit: Emit) -> None:
        raise NotImplementedError

    async def _on_prefetch(self, chunk: Chunk, emit: Emit) -> None:
        """A ``reply.prefetch``: the reply ahead replaced by one to its messages (none: withdrawn).
        A dropped reply whose first chunk was announced withdraws that too (``speech.prefetch``
        with text None), so that its audio made ahead stops."""
        announced = self._prefetch is not None and self._prefetch.first_chunk is not None
        self._held.drop()
        if announced:
            await emit(control("speech.prefetch", text=None))
        if chunk.payload.data.get("messages"):
            self._start_prefetch(chunk.payload.data["messages"], emit)

    @staticmethod
    def _announcer(emit: Emit) -> Callable[[str], Awaitable[None]]:
        """How a reply ahead announces its first speakable chunk: ``speech.prefetch`` with its text,
        which a speech node that streams may synthesize ahead of the turn (the turn's first
        chunk claims that audio if it is the same text)."""

        async def announce(text: str) -> None:
            await emit(control("speech.prefetch", text=text))

        return announce

    def _claim(self, messages: list[dict[str, str]]) -> _Prefetch | None:
        """The reply ahead if it answers ``messages`` with the current sampling, else None (a
        different one is stopped)."""
        return self._held.claim(self._key(messages))

    async def close(self) -> None:
        await self._held.close()


class LlamaChatNode(PrefetchingChatNode):
    """``llama_chat``: streams SmolLM2's reply to each messages chunk as text_delta, then turn.done.
    A ``configure`` with ``sampling`` (max_new_tokens_per_unit, temperature) applies from the next
    reply. With a control edge from the speech node's ``turn.started`` (``hold_first``) the token
    stream holds after the reply's first speakable chunk until that chunk is synthesized (at most
    HOLD_MAX_S): on a small CPU the first audio then does not share the cores with the rest of
    the reply, whose later chunks have the first one's playing time to follow. With a compute
    gate (``ModelHub.gate``) it does not hold: the gate already puts that synthesis before
    the rest of the reply, and a held stream would keep its context from the other sessions.

    Prefetch: a ``reply.prefetch`` control (from the dialog, at a pause that may end the turn)
    starts the reply to its messages at once; the next messages chunk takes it over if its
    messages and sampling are the same (greedy decoding: the same reply), and it is stopped
    otherwise, at a withdrawal (messages None), at the next prefetch, or PREFETCH_TTL_S after it
    started unclaimed."""

    @classmethod
    def build(cls, ctx: NodeContext) -> LlamaChatNode:
        return cls(
            ctx.models,
            ctx.decl.options,
            hold_first=any(e.event == "turn.started" for e in ctx.decl.control_inputs),
            first_chunk=ctx.first_chunk,
        )

    def __init__(
        self,
        models: ModelHub,
        options: LlamaChatOptions,
        hold_first: bool = False,
        first_chunk: tuple[int, int] = FIRST_CHUNK,
    ):
        self._models, self._hold_first = models, hold_first
        self.first_chunk = first_chunk
        self._max_tokens, self._temperature = options.max_tokens, options.temperature
        self._released: dict[int | None, threading.Event] = {}
        self._held = AheadHeld()  # a reply started ahead, not yet claimed

    async def open(self) -> None:
        await self._models.run(lambda: self._models.llm)

    async def on_control(self, chunk: Chunk, emit: Emit) -> None:
        if chunk.control == "turn.started" and chunk.turn in self._released:
            self._released[chunk.turn].set()
        if chunk.control == "reply.prefetch":
            await self._on_prefetch(chunk, emit)
        sampling = chunk.payload.data.get("sampling") if chunk.control == "configure" else None
        if sampling:
            self._max_tokens = sampling.get("max_new_tokens_per_unit", self._max_tokens)
            self._temperature = sampling.get("temperature", self._temperature)

    def _key(self, messages: list[dict[str, str]]) -> tuple:
        """What makes two replies the same: the messages and the current sampling."""
        return (
            tuple((m["role"], m["content"]) for m in messages),
            self._max_tokens,
            self._temperature,
        )

    def _stream(
        self, messages: list[dict[str, str]]
    ) -> tuple[threading.Event, threading.Event, Callable[[], Iterator[str]]]:
        """(stop, released, make) of a reply to ``messages`` with the current sampling."""
        max_tokens, temperature = self._max_tokens, self._temperature
        stop, released, first = threading.Event(), threading.Event(), threading.Event()
        llm = self._models.llm
        gate = self._models.gated(llm)
        if not self._hold_first or gate is not None:
            released.set()

        since = time.monotonic()  # the reply's steps queue by its start (the earliest reply first)

        def step(fn: Callable[..., T], *args) -> T:  # each decoding step through the gate
            # after the first chunk the rest waits for every first chunk, unless another reply
            # waits for this one's context (priority inheritance: it would wait behind the rest)
            rest = first.is_set() and not getattr(llm, "contended", False)
            return gate.call(REST if rest else FIRST_TEXT, fn, *args, since=since)

        def make() -> Iterator[str]:
            extra = {"step": step} if gate is not None else {}
            pieces = llm.stream_reply(
                messages, max_tokens=max_tokens, temperature=temperature, **extra
            )
            return hold_after_first_chunk(pieces, released, stop, first, self.first_chunk)

        return stop, released, make

    def _start_prefetch(self, messages: list[dict[str, str]], emit: Emit) -> None:
        stop, released, make = self._stream(messages)
        prefetch = _Prefetch(
            key=self._key(messages),
            stop=stop,
            released=released,
            announce=self._announcer(emit),
            chunker=SpeechChunker(*self.first_chunk),
        )
        prefetch.task = asyncio.ensure_future(prefetch.fill(make))
        self._held.keep(prefetch)

    async def on_chunk(self, chunk: Chunk, emit: Emit) -> None:
        if chunk.format != "messages":
            return
        messages = [{"role": m.role, "content": m.content} for m in chunk.payload.messages]
        prefetch = self._claim(messages)
        if prefetch is not None:
            released, pieces = prefetch.released, prefetch.read()
        else:
            stop, released, make = self._stream(messages)
            pieces = stream_in_thread(make, stop)
        self._released[chunk.turn] = released
        try:
            async for piece in pieces:
                await emit(
                    Chunk("text_delta", TextDelta(piece, chunk.payload.language), turn=chunk.turn)
                )
        finally:
            self._released.pop(chunk.turn, None)
            if prefetch is not None:
                prefetch.cancel()  # an interruption stops it; no-op once it has ended
        await emit(control("turn.done", turn=chunk.turn))


@dataclass(eq=False)
class _Ahead:
    """Items made ahead of the turn that will read them (a reply's pieces, its first chunk's
    audio), kept until a turn claims them (the same ``key``), or they are dropped or expire. At
    most one turn reads them: first those already made, then the rest as they come; the maker's
    failure is raised to that reader at the end."""

    key: Any = None
    items: list = field(default_factory=list)
    ended: bool = False
    error: BaseException | None = None
    more: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task | None = None
    expiry: asyncio.TimerHandle | None = None

    async def take(self, items: AsyncIterator) -> None:
        """Keep ``items`` as they come, until they end (the ``task``; cancelling it closes
        ``items``, wherever the task waits, so an engine's request ends with it)."""
        try:
            async with contextlib.aclosing(items) as stream:
                async for item in stream:
                    self.items.append(item)
                    self.more.set()
                    await self.added(item)
            await self.finished()
        except Exception as err:  # raised to the turn that claims it
            self.error = err
        finally:
            self.ended = True
            self.more.set()

    async def added(self, item: Any) -> None:
        """After each item (a subclass's hook)."""

    async def finished(self) -> None:
        """After the last item, unless the maker failed (a subclass's hook)."""

    async def read(self) -> AsyncIterator:
        """Every item, those already made first; the maker's failure is raised at the end."""
        read = 0
        while read < len(self.items) or not self.ended:
            if read < len(self.items):
                read += 1
                yield self.items[read - 1]
            else:
                self.more.clear()
                await self.more.wait()
        if self.error is not None:
            raise self.error

    def cancel(self) -> None:
        if self.expiry is not None:
            self.expiry.cancel()
        if self.task is not None and not self.task.done():
            self.task.cancel()


@dataclass(eq=False, kw_only=True)
class _Prefetch(_Ahead):
    """A reply streaming ahead of its turn: its pieces so far. ``announce``: called with the
    reply's first speakable chunk (the speech node's ``SpeechChunker`` rule, so the speech node
    cuts the same chunk from the same pieces) as soon as the pieces complete it, so that its
    audio can be made ahead too (``speech.prefetch``); ``first_chunk`` is that chunk once
    announced."""

    stop: threading.Event
    released: threading.Event
    announce: Callable[[str], Awaitable[None]] | None = None
    first_chunk: str | None = None
    chunker: SpeechChunker = field(default_factory=SpeechChunker)

    async def fill(self, make: Callable[[], Iterator[str]]) -> None:
        await self.take(stream_in_thread(make, self.stop))

    async def added(self, item: Any) -> None:
        if self.announce is not None and self.first_chunk is None:
            await self._announce(self.chunker.push(item))

    async def finished(self) -> None:
        if self.announce is not None and self.first_chunk is None:
            await self._announce(self.chunker.finish())  # a reply shorter than a first chunk

    async def _announce(self, chunks: list[str]) -> None:
        spoken = [c for c in chunks if re.search(r"\w", c)]  # as the speech node skips them
        if spoken:
            self.first_chunk = spoken[0]
            await self.announce(spoken[0])

    def cancel(self) -> None:
        self.stop.set()
        super().cancel()


class PiperSpeechNode(Node):
    """``piper_speech``: cuts a turn's text_delta into speakable chunks
    (``serving.conversation.chunker.SpeechChunker``: the first one short, then sentences; the rest
    at the source's turn.done) and synthesizes each as 24 kHz pcm_f32le (a backend with ``astream``,
    serving.gpu's CSM, sends each frame as it is made), announced by ``reply.chunk`` (the chunk's
    text, before its first audio) and followed by its ``reply.progress`` (the chunk's text,
    text_end in the reply's spoken text joined with spaces, audio_ms where its audio ends);
    turn.started before the first chunk, turn.done after the last. A ``configure`` whose
    output_modalities lack audio makes later turns text only (progress without audio).

    Speech ahead: a ``speech.prefetch`` (the reply model's, from its data edge or a control edge:
    the first chunk of a reply started ahead at a pause) starts that chunk's synthesis at once
    with a backend that streams (``astream``; others ignore it) and keeps its frames; the next
    turn's first chunk takes them if it is the same text (the same reply: the model's reply ahead
    was claimed), so its first audio needs no synthesis of its own. The frames are sent only as
    that turn's, after its commit; a different first chunk, a withdrawal (text None), the next
    ``speech.prefetch`` or PREFETCH_TTL_S unclaimed stops the synthesis.

    The first chunk's rule is the system's (``first_chunk``), the one its reply model announces
    a reply ahead's first chunk by."""

    @classmethod
    def build(cls, ctx: NodeContext) -> PiperSpeechNode:
        return cls(ctx.models, ctx.decl.options, ctx.first_chunk)

    def __init__(
        self,
        models: ModelHub,
        options: PiperSpeechOptions,
        first_chunk: tuple[int, int] = FIRST_CHUNK,
    ):
        self._models, self._options, self._first_chunk = models, options, first_chunk
        self._audio = True
        self._turns: dict[int | None, _SpokenTurn] = {}
        self._ahead = AheadHeld()  # a first chunk's audio made ahead, not yet claimed
        self.spoken_ahead = self._ahead.counts

    async def open(self) -> None:
        await self._models.run(self._models.voice, self._options)

    async def on_control(self, chunk: Chunk, emit: Emit) -> None:
        if chunk.control == "interrupt" and chunk.turn is not None:
            self._turns.pop(chunk.turn, None)
        elif chunk.control == "configure" and "output_modalities" in chunk.payload.data:
            self._audio = "audio" in chunk.payload.data["output_modalities"]
        elif chunk.control == "speech.prefetch":
            self._speak_ahead(chunk.payload.data.get("text"))

    def _speak_ahead(self, text: str | None) -> None:
        self._ahead.drop()
        if not text or not self._audio:
            return
        tts = self._models.voice(self._options)
        if getattr(tts, "astream", None) is None:  # a whole-chunk backend: nothing to gain
            return
        ahead = _Ahead(key=text)
        ahead.task = asyncio.ensure_future(ahead.take(tts.astream(text)))
        self._ahead.keep(ahead)

    async def close(self) -> None:
        await self._ahead.close()

    async def on_chunk(self, chunk: Chunk, emit: Emit) -> None:
        turn = chunk.turn
        if chunk.control == "speech.prefetch":  # without a control edge: after the last turn's text
            self._speak_ahead(chunk.payload.data.get("text"))
        elif chunk.format == "text_delta":
            spoken = self._turns.get(turn)
            if spoken is None:
                spoken = self._turns[turn] = _SpokenTurn(
                    self._audio, chunk.payload.language, SpeechChunker(*self._first_chunk)
                )
            for text in spoken.chunker.push(chunk.payload.text):
                await self._say(turn, spoken, text, emit)
        elif chunk.control == "turn.done":
            spoken = self._turns.pop(turn, None)
            for text in spoken.chunker.finish() if spoken else []:
                await self._say(turn, spoken, text, emit)
            await emit(control("turn.done", turn=turn))

    async def _say(self, turn: int | None, spoken: _SpokenTurn, text: str, emit: Emit) -> None:
        if not re.search(r"\w", text):
            return
        if not spoken.audio:
            await self._start(turn, spoken, emit)
        else:
            tts = self._models.voice(self._options)
            if getattr(tts, "astream", None) is not None:
                # a streaming backend (serving.gpu's CSM): each frame goes out as it is made
                ahead = self._ahead.claim(text) if not spoken.started else None
                spoke = False
                source = ahead.read() if ahead is not None else tts.astream(text)
                try:
                    async with contextlib.aclosing(source) as frames:
                        async for frame in frames:
                            spoke = (
                                await self._send_audio(
                                    turn,
                                    spoken,
                                    resample(frame, tts.rate, PCM_F32_RATE),
                                    emit,
                                    None if spoke else text,
                                )
                                or spoke
                            )
                finally:
                    if ahead is not None:  # an interruption stops it; no-op once it has ended
                        ahead.cancel()
                if not spoke:
                    return
            else:
                heard = () if spoken.language is None else (spoken.language,)  # for language: auto
                samples = await self._models.run(
                    tts.synthesize,
                    text,
                    *heard,
                    backend=tts,
                    priority=REST if spoken.started else FIRST_AUDIO,
                )
                if not await self._send_audio(
                    turn, spoken, resample(samples, tts.rate, PCM_F32_RATE), emit, text
                ):
                    return
        spoken.text_end += len(text) + (1 if spoken.text_end else 0)
        await emit(
            control(
                "reply.progress",
                turn=turn,
                text=text,
                text_end=spoken.text_end,
                audio_ms=round(spoken.audio_ms, 3),
            )
        )

    async def _start(self, turn: int | None, spoken: _SpokenTurn, emit: Emit) -> None:
        if not spoken.started:
            spoken.started = True
            await emit(control("turn.started", turn=turn))

    async def _send_audio(
        self,
        turn: int | None,
        spoken: _SpokenTurn,
        audio: np.ndarray,
        emit: Emit,
        text: str | None = None,
    ) -> bool:
        """``audio`` of the turn sent (turn.started before the first); False when it is empty.
        ``text``: the chunk's text, announced (``reply.chunk``) before its first audio, so that
        the session can send the chunk's transcript and then its audio as it comes, not after
        the whole chunk (its ``reply.progress``)."""
        if not len(audio):
            return False
        await self._start(turn, spoken, emit)
        if text is not None:
            await emit(control("reply.chunk", turn=turn, text=text))
        await emit(Chunk("pcm_f32le", PcmF32(audio), turn=turn))
        spoken.audio_ms += len(audio) * 1000 / PCM_F32_RATE
        return True


@dataclass
class _SpokenTurn:
    audio: bool
    language: str | None = None  # the recognizer's language for this reply (language: auto)
    chunker: SpeechChunker = field(default_factory=SpeechChunker)
    started: bool = False
    text_end: int = 0
    audio_ms: float = 0.0


def _node(ctx: NodeContext) -> Node:
    decl = ctx.decl
    cls = registry.node_class(decl.kind, decl.stages)
    if cls is None:
        what = f"kind '{decl.kind}'" if decl.kind else f"stages {list(decl.stages)}"
        kinds, stages = registry.graph_adapters()
        raise FdbError(
            f"node '{decl.name}': no graph adapter runs {what} yet",
            f"use a kind with a graph adapter ({', '.join(kinds)}; stages: "
            f"{' or '.join(f'[{s}]' for s in stages)}) in a graph, or serve this system through "
            "serving/realtime",
        )
    return cls.build(ctx)


def build_nodes(
    decl: GraphDecl,
    models: ModelHub,
    vad_settings: dict | None = None,
    max_history_messages: int = 12,
    session: Any = None,
) -> dict[str, Node]:
    """One adapter per declared node (a fresh set per session; the models are shared).
    ``session``: a native node's side of its session (``NodeContext.session``). The rule for a
    reply's first chunk (``NodeContext.first_chunk``) is the hub's system's (the default rule
    without a system)."""
    system = getattr(models, "system", None)
    first_chunk = FIRST_CHUNK if system is None else system.first_chunk.rule
    return {
        name: _node(
            NodeContext(
                d, models, dict(vad_settings or {}), max_history_messages, session, first_chunk
            )
        )
        for name, d in decl.nodes.items()
    }


def preload(hub: ModelHub) -> list[str]:
    """Open (load) and warm the nodes of the hub's session graph that hold a shared model (those
    with a ``warm`` method: the GPU kinds) before the first session; returns their names.
    Blocking: called by ``serving.models.load_models`` in the loading thread."""
    nodes = build_nodes(hub.graph, hub, max_history_messages=hub.system.max_history_messages)
    shared = [node for node in nodes.values() if hasattr(node, "warm")]

    async def load() -> None:
        for node in shared:
            await node.open()
            await node.warm()

    if shared:
        asyncio.run(load())
    return [name for name, node in nodes.items() if node in shared]
