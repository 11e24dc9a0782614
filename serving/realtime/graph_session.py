"""A turn-based ``/v1/realtime`` session of ``embedded-cascade``, run on the session graph: the
protocol of :class:`~serving.realtime.session.RealtimeSession` (handshake, receipts, limits,
timeouts, errors) with a per-connection :class:`~serving.graph.runtime.SessionGraph` built
from ``serving/graph/embedded-cascade.yaml``.

- Each accepted append is one pcm16 chunk of the graph's input (a full input edge refuses it
  with ``input_queue_full``: resend the same seq); the input is cut into 200 ms units for
  ``sglang.unit.done`` as it is taken.
- session.update is a ``configure`` (turn_detection, instructions, output_modalities, sampling,
  interrupt_response, create_response), input_audio_buffer.commit a ``commit``,
  input_audio_buffer.clear a ``clear``, response.cancel (and output_audio_buffer.clear) an
  ``interrupt`` without a turn, conversation.item.truncate a ``truncate`` of the reply's turn
  (``audio_end_ms``; a GA session is refused one past the audio sent, the Guide's is clamped),
  conversation.item.create an ``item`` (a user text, or the transcript of a user audio item)
  and response.create a ``respond``.
- A GA session answers a commit only at response.create when turn detection is off (GA's
  manual turns); a session with the extensions answers each commit, as the Guide has it.
- Without turn detection the session commits the audio since the last commit itself; with it,
  a commit needs an utterance in progress among the boundaries published so far.
- What the graph publishes becomes events in :class:`~serving.realtime.graph_output.GraphOutput`.
- At sglang.input_audio.end the tail unit is flushed and the graph's input ends; once the graph
  has drained (every reply delivered) the session sends ``sglang.input_audio.drained``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

import numpy as np

from fdb.audio import float_to_pcm16
from fdb.dialects.events import (
    InputAudioCleared,
    InputAudioDrained,
    InputAudioEnded,
    ItemTruncated,
    MediaTime,
    OutputAudioCleared,
    TranscriptionCompleted,
    TranscriptionUsage,
    UnitDone,
    UnitSglang,
    new_id,
)
from serving.graph.gate import TRANSCRIBE
from serving.graph.nodes import build_nodes
from serving.graph.runtime import SessionGraph
from serving.graph.streams import Chunk, Pcm16, control
from serving.realtime import protocol as p
from serving.realtime.audio_input import (
    SAMPLES_PER_MS,
    Unit,
    UnitCutter,
    decode_pcm16,
    samples_to_ms,
)
from serving.realtime.graph_output import DeliverySink, GraphOutput
from serving.realtime.negotiation import GA_INPUT_RATE, SessionConfig, initial_config
from serving.realtime.session import InputResampler, RealtimeSession

CONTROL_RETRY_S = 0.01


class GraphRealtimeSession(RealtimeSession):
    requires_update = False
    extensions_always = False

    def _initial_config(self) -> SessionConfig:
        return initial_config(self._system, GA_INPUT_RATE)

    def _build_engine(self) -> None:
        system = self._system
        self._end_rest: np.ndarray | None = None  # the resampler's flushed tail, once taken
        self._cutter = UnitCutter()
        self._commit_end = 0  # without turn detection: the input sample the last utterance ended at
        self._units: list[Unit] = []  # the units an append completed
        self._drain_task: asyncio.Future | None = None
        self._output = GraphOutput(
            self._outbox,
            system,
            lambda: self.config,
            lambda: self.input_ended,
            lambda: samples_to_ms(self._accepted_samples),
        )
        graph = self._hub.graph
        nodes = build_nodes(
            graph,
            self._hub,
            vad_settings={**system.vad.model_dump(), "prefetch_ms": system.prefetch_ms},
            max_history_messages=system.max_history_messages,
        )
        self._graph = SessionGraph(graph, nodes, DeliverySink())
        self._output.attach(self._graph)

    def _engine_work(self) -> list[Awaitable[None]]:
        return [self._output.run(), self._output.deliver()]

    def _busy(self) -> bool:
        return self._output.busy

    async def run(self) -> None:
        await self._graph.open()
        try:
            await super().run()
        finally:
            await self._graph.close()

    async def _control(self, chunk: Chunk) -> None:
        """A client control into the graph (it waits for room on a full input edge)."""
        while not await self._graph.control(chunk):
            await asyncio.sleep(CONTROL_RETRY_S)

    # --- input ---------------------------------------------------------------------------------

    async def _configure(self, new: SessionConfig, extensions: bool) -> None:
        td = new.turn_detection.model_dump() if new.turn_detection else None
        # without turn detection a GA session waits for
        # response.create; the Guide's answers a commit
        create = td["create_response"] if td else extensions
        await self._control(
            control(
                "configure",
                turn_detection=td,
                instructions=new.instructions,
                output_modalities=list(new.output_modalities),
                sampling=new.sampling.model_dump(),
                interrupt_response=td["interrupt_response"] if td else True,
                create_response=create,
            )
        )

    async def _feed(self, samples: np.ndarray, event_id: str | None) -> None:
        if not await self._graph.append(Chunk("pcm16", Pcm16(float_to_pcm16(samples)))):
            raise p.ProtocolError(
                "input_queue_full",
                f"the session's input queue is full; resend seq {self._next_seq} later",
                param="sglang.seq",
                event_id=event_id,
            )
        self._units = self._cutter.push(samples)

    async def _on_append(self, event: p.InputAudioBufferAppend) -> None:
        self._units = []
        await super()._on_append(event)
        for unit in self._units:
            await self._unit_done(unit)

    async def _unit_done(self, unit: Unit) -> None:
        await self._outbox.send(
            UnitDone(
                unit_id=unit.unit_id,
                sglang=UnitSglang(
                    media_time=MediaTime(t_start_ms=unit.t_start_ms, duration_ms=unit.duration_ms)
                ),
            )
        )

    async def _on_commit(self, event: p.InputAudioBufferCommit) -> None:
        self._require_input_open(event.event_id)
        if self.config.turn_detection is None:
            if not await self._commit_rest():
                raise p.ProtocolError(
                    "input_audio_buffer_commit_empty",
                    "nothing to commit: no audio since the last commit",
                    event_id=event.event_id,
                )
        elif not self._output.utterance_open:
            raise p.ProtocolError(
                "input_audio_buffer_commit_empty",
                "nothing to commit: no open utterance",
                event_id=event.event_id,
            )
        await self._control(control("commit"))

    async def _commit_rest(self) -> bool:
        """Without turn detection: the audio since the last commit is an utterance (if any)."""
        if self._accepted_samples <= self._commit_end:
            return False
        start, self._commit_end = self._commit_end, self._accepted_samples
        await self._output.committed(
            new_id("item"), start // SAMPLES_PER_MS, self._commit_end // SAMPLES_PER_MS
        )
        return True

    async def _on_end(self, event: p.InputAudioEnd) -> None:
        self._require_input_open(event.event_id)
        if (
            self._end_rest is None
        ):  # the resampler's last few ms, taken once (an end refused below is resent)
            resampling = self._resampler is not None and self._resampler.stateful
            self._end_rest = (
                self._resampler.push(np.zeros(0, np.float32), last=True) if resampling else None
            )
        if self._end_rest is not None and len(self._end_rest):
            self._units = []
            await self._feed(self._end_rest, event.event_id)
            self._accepted_samples += len(self._end_rest)
            self._end_rest = self._end_rest[:0]
            for unit in self._units:
                await self._unit_done(unit)
        self.input_ended = True
        accepted_ms = self._accepted_ms()  # the client's timeline, as the receipts count it
        await self._outbox.send(
            InputAudioEnded(accepted_end_ms=accepted_ms, client_event_id=event.event_id)
        )
        self._output.wake_all()
        tail = self._cutter.flush()
        if tail is not None:
            await self._unit_done(tail)
        if self.config.turn_detection is None:
            await self._commit_rest()
        self._output.on_drained = lambda: self._outbox.send(
            InputAudioDrained(
                accepted_end_ms=accepted_ms, consumed_ms=accepted_ms, client_event_id=event.event_id
            )
        )
        self._graph.end_input()
        self._drain_task = asyncio.ensure_future(self._guard(self._drain()))

    async def _drain(self) -> None:
        await self._graph.wait_done()
        self._output.drained()

    async def _on_cancel(self, event: p.ResponseCancel) -> None:
        """GA: an error when no response is in progress (the session goes on); the Guide's
        session: nothing happens then."""
        active = self._output.responding
        if active is None or (
            event.response_id is not None and event.response_id != active.reply.response_id
        ):
            if self._wire.extensions:
                return
            what = f"response {event.response_id!r}" if event.response_id else "a response"
            raise p.ProtocolError(
                "response_cancel_not_active",
                f"cannot cancel: {what} is not in progress",
                param="response_id" if event.response_id else None,
                event_id=event.event_id,
            )
        await self._control(control("interrupt"))

    async def _on_output_clear(self, event: p.OutputAudioBufferClear) -> None:
        """Over WebSocket: stop the reply in progress, as response.cancel does."""
        active = self._output.responding
        if active is not None:
            await self._control(control("interrupt"))
        await self._outbox.send(
            OutputAudioCleared(response_id=active.reply.response_id if active else None)
        )

    async def _on_clear(self, event: p.InputAudioBufferClear) -> None:
        """Without turn detection: the audio since the last commit is dropped. With it: nothing
        is buffered outside an utterance; one in progress cannot be taken back."""
        self._require_input_open(event.event_id)
        if self.config.turn_detection is None:
            self._commit_end = self._accepted_samples
            await self._control(control("clear"))
        elif self._output.utterance_open:
            raise p.ProtocolError(
                "not_supported",
                "input_audio_buffer.clear cannot take back an utterance "
                "the turn detection has started; send it between utterances, or use "
                "turn_detection null",
                event_id=event.event_id,
            )
        await self._outbox.send(InputAudioCleared())

    async def _on_item_create(self, event: p.ConversationItemCreate) -> None:
        """A user message with ``input_text`` or ``input_audio`` parts (the audio at the
        session's input rate, transcribed here); other items are refused by name."""
        self._require_input_open(event.event_id)
        item = event.item
        item_id = item.get("id") if isinstance(item.get("id"), str) else new_id("item")
        if item.get("type", "message") != "message" or item.get("role") != "user":
            raise p.ProtocolError(
                "not_supported",
                "conversation.item.create takes user messages only "
                f"(got type {item.get('type')!r}, role {item.get('role')!r}); this server "
                "has no tool calls, and system text goes in session.instructions",
                param="item",
                event_id=event.event_id,
            )
        content = item.get("content")
        if not isinstance(content, list) or not content:
            raise p.ProtocolError(
                "invalid_value",
                "item.content must be a non-empty list of input_text or input_audio parts",
                param="item.content",
                event_id=event.event_id,
            )
        texts: list[str] = []
        kind = "input_text"
        for i, part in enumerate(content):
            part_type = part.get("type") if isinstance(part, dict) else None
            if part_type == "input_text" and isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif part_type == "input_audio" and isinstance(part.get("audio"), str):
                kind = "input_audio"
                texts.append(await self._transcribe_item(part["audio"], event.event_id))
            else:
                raise p.ProtocolError(
                    "invalid_value",
                    f"item.content[{i}] must be input_text with text or input_audio with audio",
                    param=f"item.content[{i}]",
                    event_id=event.event_id,
                )
        text = " ".join(t for t in texts if t)
        await self._output.text_item(item_id, text, kind)
        if kind == "input_audio":
            await self._outbox.send(
                TranscriptionCompleted(
                    item_id=item_id, transcript=text, usage=TranscriptionUsage(seconds=0.0)
                )
            )
        await self._control(control("item", text=text))

    async def _transcribe_item(self, audio: str, event_id: str | None) -> str:
        raw = decode_pcm16(audio, self._system.max_input_bytes, event_id)
        samples = InputResampler(self.config.input_rate).push(raw, last=True)
        models = self._hub
        if models.asr is None:
            raise p.ProtocolError(
                "not_supported",
                f"{self._system.name} has no server-level ASR (backends.asr: "
                "none) to transcribe an audio item; send the audio to the input buffer",
                param="item.content",
                event_id=event_id,
            )
        gate = {"backend": models.asr, "priority": TRANSCRIBE, "resource": f"asr-{id(models.asr)}"}
        return (await models.run(models.asr.transcribe, samples, **gate)).text.strip()

    async def _on_response_create(self, event: p.ResponseCreate) -> None:
        """A response to the items waiting (a manual turn, a text item), once the utterances
        committed before it are transcribed; refused while one is in progress. A session that
        asked for the Guide's protocol (the extensions) answers each commit itself, and there
        manual turn commands are not granted (the Guide, "Rejected in a realtime session")."""
        if self._wire.extensions:
            raise p.ProtocolError(
                "not_granted", "manual turn commands are not granted", event_id=event.event_id
            )
        self._require_input_open(event.event_id)
        if self._output.responding is not None:
            raise p.ProtocolError(
                "conversation_already_has_active_response",
                "a response is in progress; cancel it or wait for its response.done",
                event_id=event.event_id,
            )
        await self._control(control("respond", after=self._output.commits))

    async def _on_truncate(self, event: p.ConversationItemTruncate) -> None:
        self._check_truncate(event)
        reply = self._output.reply_of(event.item_id, event.event_id)
        if not self._wire.extensions and event.audio_end_ms > reply.sent_ms + 1:
            raise p.ProtocolError(
                "invalid_value",
                f"audio_end_ms {event.audio_end_ms} is beyond the "
                f"{reply.sent_ms:.0f} ms of audio sent for this item",
                param="audio_end_ms",
                event_id=event.event_id,
            )
        position = min(float(event.audio_end_ms), reply.sent_ms)
        await self._outbox.send(ItemTruncated(item_id=event.item_id, audio_end_ms=int(position)))
        await self._control(
            control("truncate", turn=reply.turn, audio_end_ms=position, sent_ms=reply.sent_ms)
        )
