"""What a session graph publishes, as the realtime events of a turn-based session, with
delivery pacing (the guide's "Delivery pacing"): the outbox sink of
:mod:`serving.realtime.graph_session`.

- ``speech.started`` / ``speech.stopped`` (turn_detection): ``input_audio_buffer.speech_started``
  (never before the previous utterance's end), ``speech_stopped``, ``committed`` and the user
  item's ``conversation.item.added``; each final ``transcript`` (asr) is the
  ``input_audio_transcription.completed`` and ``conversation.item.done`` of the oldest committed
  utterance (a tentative one, of a prefetch at a pause, is never sent).
- The dialog's ``messages`` of turn N create its response; ``turn.empty`` and a
  ``turn.interrupted`` before any reply create and end it (``empty_turn`` / ``interrupted``).
- The speech node's audio and ``reply.progress`` go to the delivery task: per progress, the
  chunk's transcript delta (or text delta in a text-only session), its audio paced by
  :class:`~serving.realtime.delivery.AudioDelivery` (at most ``max_output_lead_ms`` ahead,
  ``max_output_bytes`` per reply; the first audio held back ``reply_delay_ms``, a handicap),
  then ``sglang.response.progress``. A chunk announced by ``reply.chunk`` (its text before its
  audio: a streaming speech model's) sends its transcript delta at once and its audio as it
  comes (each piece as the model makes it, paced), the rest at its progress. Its
  ``turn.done`` (held by the graph) is released to the dialog once the audio has played, with
  ``sent_ms``.
- A started reply that is ``turn.interrupted`` stops at once; the graph then reports
  ``reply.delivered`` (``sent_ms``, ``played_ms`` at the speech start or the cancel) to the dialog.
- The dialog's ``reply.heard`` becomes ``sglang.response.heard`` where it reports; a final one
  (the reply closed in the history) ends the response: ``stop``, or cancelled with
  ``turn_detected`` (speech) or ``client_cancelled`` (response.cancel, which reaches the dialog
  as an interrupt without a time).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import numpy as np

from fdb.audio import float_to_pcm16
from fdb.dialects.events import (
    Committed,
    ItemAdded,
    ItemDone,
    ResponseHeard,
    ResponseProgress,
    SpeechStarted,
    SpeechStopped,
    TranscriptionCompleted,
    TranscriptionUsage,
    new_id,
)
from serving.graph.runtime import PublishSink, SessionGraph
from serving.graph.streams import Chunk, Control, control
from serving.realtime.delivery import AudioDelivery
from serving.realtime.negotiation import SessionConfig
from serving.realtime.outbox import Outbox
from serving.realtime.protocol import ProtocolError, shown
from serving.realtime.reply import Conversation, Reply, user_item
from serving.realtime.turn import Turn, Utterance
from serving.systems import SystemConfig

DRAINED = "input.drained"  # the session's marker after the last published chunk of a drained graph


class DeliverySink(PublishSink):
    """The published chunks for :class:`GraphOutput`; the graph holds audio nodes' turn.done here.
    It stays open after the graph drained (a truncate's heard still comes): the session ends its
    reader."""

    holds_turn_done = True

    def close(self) -> None:
        return None


@dataclass(eq=False)
class GraphReply:
    """One turn's response: its events, its interruption and pacing (``pace``) and its audio."""

    turn: int
    reply: Reply
    pace: Turn
    delivery: AudioDelivery | None
    pcm: bytes = b""  # audio of the chunk whose reply.progress has not arrived yet (not sent)
    streaming: bool = False  # the chunk was announced (reply.chunk): its audio leaves as it comes
    capped: bool = False  # max_output_bytes reached
    finished: bool = False
    cause: str = "turn_detected"  # why it was interrupted: speech, or client_cancelled

    @property
    def sent_ms(self) -> float:
        return self.delivery.sent_ms if self.delivery else 0.0


class GraphOutput:
    def __init__(
        self,
        outbox: Outbox,
        system: SystemConfig,
        config: Callable[[], SessionConfig],
        input_ended: Callable[[], bool],
        accepted_ms: Callable[[], float],
    ) -> None:
        self._outbox = outbox
        self._system = system
        self._config = config
        self._input_ended = input_ended
        self._accepted_ms = accepted_ms
        self.graph: SessionGraph | None = None
        self.speaker = ""  # the node whose audio is published
        self._queue: asyncio.Queue[Chunk] = asyncio.Queue()
        self._replies: dict[int, GraphReply] = {}
        self._by_item: dict[str, GraphReply] = {}
        self._open: tuple[str, int] | None = None  # the utterance in progress: (item id, start ms)
        self._last_end_ms = 0
        self._last_item: str | None = None
        self._utterances: deque[tuple[str, int]] = deque()  # committed, awaiting their transcripts
        self.conversation = Conversation()
        self._previous: dict[str, str | None] = {}  # a user item's previous_item_id
        self.commits = 0  # utterances committed so far (each gets one final transcript)
        self._speech_at: float | None = None  # monotonic time of the last speech start
        self.on_drained: Callable[[], Awaitable[object]] | None = None  # at DRAINED

    def attach(self, graph: SessionGraph) -> None:
        self.graph = graph
        self.speaker = next(
            n for n, f in graph.decl.publish.items() if "pcm_f32le" in f or "pcm16" in f
        )

    @property
    def utterance_open(self) -> bool:
        return self._open is not None

    @property
    def responding(self) -> GraphReply | None:
        """The response in progress, if any."""
        return next((r for r in self._replies.values() if not r.finished), None)

    @property
    def busy(self) -> bool:
        """An utterance awaits its transcript, or a response is not done."""
        return bool(self._utterances) or any(not r.finished for r in self._replies.values())

    def wake_all(self) -> None:
        """The input ended: stop pacing."""
        for reply in self._replies.values():
            reply.pace.wake()

    def reply_of(self, item_id: str | None, event_id: str | None) -> GraphReply:
        """The audio reply whose output item is ``item_id`` (a truncate's target)."""
        reply = self._by_item.get(item_id or "")
        if reply is None:
            raise ProtocolError(
                "item_not_found",
                f"no item {shown(item_id)} in this conversation",
                param="item_id",
                event_id=event_id,
            )
        if not reply.reply.audio:
            raise ProtocolError(
                "invalid_value",
                f"item {shown(item_id)} has no audio to truncate",
                param="item_id",
                event_id=event_id,
            )
        return reply

    # --- the published chunks, in order -------------------------------------------------------

    async def run(self) -> None:
        """Until the session ends; a node's failure is raised."""
        while (chunk := await self.graph.sink.get()) is not None:
            await self._publish(chunk)

    def drained(self) -> None:
        """The graph has drained: ``on_drained`` runs after everything it published."""
        self.graph.sink.put(control(DRAINED))

    async def _publish(self, chunk: Chunk) -> None:
        name = chunk.control
        if chunk.format == "pcm_f32le" or name in ("reply.chunk", "reply.progress", "turn.done"):
            self._queue.put_nowait(chunk)
        elif chunk.format == "transcript":
            if (
                chunk.payload.is_final
            ):  # a tentative one (a prefetch at a pause) is the server's own
                await self._transcript(chunk)
        elif name == "speech.started":
            await self._speech_started(chunk.t_ms)
        elif name == "speech.stopped" and self._open is not None:
            item, start = self._open
            self._open = None
            end = max(chunk.t_ms, start)
            await self._outbox.send(SpeechStopped(audio_end_ms=end, item_id=item))
            await self.committed(item, start, end)
        elif chunk.format == "messages":
            await self._begin(chunk.turn)
        elif name == "turn.empty":
            await self._finish(await self._begin(chunk.turn), "completed", "empty_turn")
        elif name == "turn.interrupted":
            await self._interrupted(chunk)
        elif name == "reply.heard":
            await self._heard(chunk)
        elif name == DRAINED and self.on_drained is not None:
            await self.on_drained()

    async def _speech_started(self, t_ms: int) -> None:
        start = max(t_ms, self._last_end_ms)
        self._open = (new_id("item"), start)
        self._speech_at = time.monotonic()
        await self._outbox.send(SpeechStarted(audio_start_ms=start, item_id=self._open[0]))

    async def committed(self, item: str, start_ms: int, end_ms: int) -> None:
        """``input_audio_buffer.committed``: the utterance [start_ms, end_ms) awaits its
        transcript."""
        previous, self._last_item, self._last_end_ms = self._last_item, item, end_ms
        self._utterances.append((item, start_ms))
        self.commits += 1
        await self._outbox.send(Committed(item_id=item, previous_item_id=previous))
        self._previous[item] = self.conversation.add(item)
        await self._outbox.send(
            ItemAdded(
                previous_item_id=self._previous[item],
                item=user_item(item, "input_audio", status="in_progress"),
            )
        )

    async def text_item(self, item: str, text: str, kind: str = "input_text") -> None:
        """A user item the client created: added and done at once."""
        previous = self.conversation.add(item)
        body = user_item(item, kind, transcript=text, text=text)
        await self._outbox.send(ItemAdded(previous_item_id=previous, item=body))
        await self._outbox.send(ItemDone(previous_item_id=previous, item=body))

    async def _transcript(self, chunk: Chunk) -> None:
        item, start = (
            self._utterances.popleft() if self._utterances else (new_id("item"), self._last_end_ms)
        )
        seconds = max(0.0, min(chunk.t_ms, self._accepted_ms()) - start) / 1000
        await self._outbox.send(
            TranscriptionCompleted(
                item_id=item,
                transcript=chunk.payload.text,
                usage=TranscriptionUsage(seconds=round(seconds, 3)),
            )
        )
        if item in self._previous:
            await self._outbox.send(
                ItemDone(
                    previous_item_id=self._previous.pop(item),
                    item=user_item(item, "input_audio", transcript=chunk.payload.text),
                )
            )

    async def _begin(self, turn: int) -> GraphReply:
        """``response.created`` of turn N (once)."""
        if turn in self._replies:
            return self._replies[turn]
        reply = Reply(self._outbox, self._config().output_modalities, self.conversation)
        pace = Turn(Utterance(reply.item_id, np.zeros(0, np.float32), 0, 0))
        if self._input_ended():
            pace.wake()
        delivery = AudioDelivery(
            self._outbox,
            pace,
            reply.response_id,
            reply.item_id,
            self._system.max_output_lead_ms,
            lambda: not self._input_ended(),
            first_delay_ms=self._system.reply_delay_ms,
        )
        state = GraphReply(turn, reply, pace, delivery if reply.audio else None)
        self._replies[turn] = self._by_item[reply.item_id] = state
        await reply.created()
        return state

    async def _interrupted(self, chunk: Chunk) -> None:
        state = await self._begin(chunk.turn)
        at = (
            self._speech_at
            if chunk.t_ms is not None and self._speech_at is not None
            else time.monotonic()
        )
        state.pace.interrupt()
        state.cause = "turn_detected" if chunk.t_ms is not None else "client_cancelled"
        if not chunk.payload.data.get("started"):
            await self._finish(state, "cancelled", state.cause)
            return
        played = state.delivery.played_ms(at) if state.delivery else 0.0
        delivered = control(
            "reply.delivered", turn=state.turn, sent_ms=state.sent_ms, played_ms=played
        )
        await self.graph.release(dataclasses.replace(delivered, source=self.speaker))

    async def _heard(self, chunk: Chunk) -> None:
        state = self._replies.get(chunk.turn) or next(
            (r for r in self._by_item.values() if r.turn == chunk.turn), None
        )
        if state is None:
            return
        data = chunk.payload.data
        if data["report"]:
            reply = state.reply
            await self._outbox.send(
                ResponseHeard(
                    response_id=reply.response_id,
                    item_id=reply.item_id,
                    text_end=data["text_end"],
                    audio_ms=data["audio_ms"],
                    text=data["text"],
                )
            )
        if data["final"] and not state.finished:
            interrupted = state.pace.interrupted
            await self._finish(
                state,
                "cancelled" if interrupted else "completed",
                state.cause if interrupted else "stop",
            )

    async def _finish(self, state: GraphReply, status: str, reason: str) -> None:
        state.finished = True
        state.reply.audio_started = state.delivery is not None and state.delivery.sent_bytes > 0
        self._replies.pop(state.turn, None)
        await state.reply.finish(status, reason)

    # --- the delivery task ----------------------------------------------------------------------

    async def deliver(self) -> None:
        """The replies' audio and text, paced, in order; a turn.done once its audio has played."""
        while True:
            chunk = await self._queue.get()
            state = self._replies.get(chunk.turn)
            if state is None or state.pace.interrupted:
                continue  # an interrupted reply: the graph fenced the rest of it
            if chunk.format == "pcm_f32le":
                state.pcm += float_to_pcm16(chunk.payload.samples)
                if state.streaming:
                    await self._stream(state, final=False)
            elif chunk.control == "reply.chunk":
                await self._announced(state, chunk.payload.data["text"])
            elif chunk.control == "reply.progress":
                await self._spoken(state, chunk.payload.data["text"])
            elif chunk.control == "turn.done":
                if state.delivery is not None:
                    await state.delivery.wait_playout()
                if not state.pace.interrupted:
                    done = Control("turn.done", {"sent_ms": state.sent_ms})
                    await self.graph.release(dataclasses.replace(chunk, payload=done))

    async def _announced(self, state: GraphReply, text: str) -> None:
        """A chunk's text before its audio (``reply.chunk``): its transcript delta now, and its
        audio as it comes (paced; what is left at its ``reply.progress``). The events are those of
        :meth:`_spoken`, sent sooner; the audio pieces are the model's, not 100 ms ones."""
        if state.delivery is None or state.capped:
            return
        if self._system.max_output_bytes - state.delivery.sent_bytes <= 0:
            state.capped = True  # max_output_bytes reached: the reply's audio ends here
            return
        state.streaming = True
        await state.reply.text_delta(text)

    async def _stream(self, state: GraphReply, final: bool) -> bool:
        """The announced chunk's audio so far, all of it as it comes (a streaming speech
        model's frame leaves when it is made, paced by the delivery, not held until a whole
        ``PACED_CHUNK_MS`` piece is there: that would hold a reply's first 80 ms frame for the
        model's next step), within ``max_output_bytes``; False when the turn was interrupted."""
        if not final and not state.delivery.paced:
            return True  # unpaced (the input ended): the chunk leaves whole, at its progress
        budget = max(0, self._system.max_output_bytes - state.delivery.sent_bytes)
        take = min(len(state.pcm), budget // 2 * 2)
        pcm, state.pcm = state.pcm[:take], state.pcm[take:]
        if state.pcm:  # max_output_bytes reached: the reply's audio ends here
            state.capped, state.pcm = True, b""
        if not pcm:
            return True
        self._mark_audio(state)
        return await state.delivery.send(pcm)

    async def _spoken(self, state: GraphReply, text: str) -> None:
        """One chunk of the reply: its text, its audio, then its boundary."""
        reply = state.reply
        if state.delivery is None:
            await reply.text_delta(text)
            return
        if state.streaming:  # announced: the text and most of the audio have left
            state.streaming = False
            if not await self._stream(state, final=True):
                return
            await self._progress(state)
            return
        budget = max(0, self._system.max_output_bytes - state.delivery.sent_bytes)
        pcm, state.pcm = state.pcm[: budget // 2 * 2], b""
        if not pcm or state.capped:
            state.capped = True  # max_output_bytes reached: the reply's audio ends here
            return
        await reply.text_delta(text)
        self._mark_audio(state)
        if not await state.delivery.send(pcm):
            return
        await self._progress(state)

    def _mark_audio(self, state: GraphReply) -> None:
        """The stage mark of the graph's first reply audio sent (``session audio.delta``), before
        the delivery emits it: its first piece leaves at once (with ``reply_delay_ms``, that much
        after the mark)."""
        if state.delivery.sent_bytes == 0 and self.graph is not None:
            self.graph.mark("session", "audio.delta")

    async def _progress(self, state: GraphReply) -> None:
        """``sglang.response.progress``: where the reply's spoken text and audio end now."""
        reply = state.reply
        await self._outbox.send(
            ResponseProgress(
                response_id=reply.response_id,
                item_id=reply.item_id,
                text_end=len(reply.text_sent),
                audio_ms=round(state.delivery.sent_ms, 3),
            )
        )
