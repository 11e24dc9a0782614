"""A turn-based ``/v1/realtime`` session of ``embedded-cascade``, run on the session graph: the
protocol of :class:`~serving.realtime.session.RealtimeSession` (handshake, receipts, limits,
timeouts, errors) with a per-connection :class:`~serving.graph.runtime.SessionGraph` built
from ``serving/graph/embedded-cascade.yaml``.

- Each accepted append is one pcm16 chunk of the graph's input (a full input edge refuses it
  with ``input_queue_full``: resend the same seq); the input is cut into 200 ms units for
  ``sglang.unit.done`` as it is taken.
- session.update is a ``configure`` (turn_detection, instructions, output_modalities, sampling),
  input_audio_buffer.commit a ``commit``, response.cancel an ``interrupt`` without a turn and
  conversation.item.truncate a ``truncate`` of the reply's turn (``audio_end_ms``, clamped to
  the audio sent).
- Without turn detection the session commits the audio since the last commit itself; with it,
  a commit needs an utterance in progress among the boundaries published so far.
- What the graph publishes becomes events in :class:`~serving.realtime.graph_output.GraphOutput`.
- At sglang.input_audio.end the tail unit is flushed and the graph's input ends; once the graph
  has drained (every reply delivered) the session sends ``sglang.input_audio.drained``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from functools import cache
from pathlib import Path

import numpy as np

from fdb.audio import float_to_pcm16
from serving.graph.declare import GraphDecl, load_graph
from serving.graph.nodes import EmbeddedModels, build_nodes
from serving.graph.runtime import SessionGraph
from serving.graph.streams import Chunk, Pcm16, control
from serving.realtime import protocol as p
from serving.realtime.audio_input import SAMPLES_PER_MS, Unit, UnitCutter, samples_to_ms
from serving.realtime.events import (
    InputAudioDrained,
    InputAudioEnded,
    ItemTruncated,
    MediaTime,
    UnitDone,
    UnitSglang,
    new_id,
)
from serving.realtime.graph_output import DeliverySink, GraphOutput
from serving.realtime.negotiation import SessionConfig
from serving.realtime.session import RealtimeSession

CASCADE = Path(__file__).resolve().parents[1] / "graph" / "embedded-cascade.yaml"
CONTROL_RETRY_S = 0.01


@cache
def cascade() -> GraphDecl:
    return load_graph(CASCADE)


def _models(hub) -> EmbeddedModels:
    """The hub's loaded models, shared by every session's graph."""
    if "graph_models" not in hub.__dict__:
        hub.__dict__["graph_models"] = EmbeddedModels.of(hub.asr, hub.llm, hub.tts, hub.turn,
                                                         hub.executor, hub.vad_executor, hub.gate)
    return hub.__dict__["graph_models"]


class GraphRealtimeSession(RealtimeSession):
    def _build_engine(self) -> None:
        system = self._system
        self._cutter = UnitCutter()
        self._commit_end = 0  # without turn detection: the input sample the last utterance ended at
        self._units: list[Unit] = []  # the units an append completed
        self._drain_task: asyncio.Future | None = None
        self._output = GraphOutput(self._outbox, system, lambda: self.config, lambda: self.input_ended,
                                   lambda: samples_to_ms(self._accepted_samples))
        nodes = build_nodes(cascade(), _models(self._hub), vad_settings={**system.vad.model_dump(), "prefetch_ms": system.prefetch_ms},
                            max_history_messages=system.max_history_messages)
        self._graph = SessionGraph(cascade(), nodes, DeliverySink())
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

    async def _configure(self, new: SessionConfig) -> None:
        td = new.turn_detection.model_dump() if new.turn_detection else None
        await self._control(control("configure", turn_detection=td, instructions=new.instructions,
                                    output_modalities=list(new.output_modalities),
                                    sampling=new.sampling.model_dump()))

    async def _feed(self, samples: np.ndarray, event_id: str | None) -> None:
        if not await self._graph.append(Chunk("pcm16", Pcm16(float_to_pcm16(samples)))):
            raise p.ProtocolError("input_queue_full", f"the session's input queue is full; resend seq "
                                  f"{self._next_seq} later", param="sglang.seq", event_id=event_id)
        self._units = self._cutter.push(samples)

    async def _on_append(self, event: p.InputAudioBufferAppend) -> None:
        self._units = []
        await super()._on_append(event)
        for unit in self._units:
            await self._unit_done(unit)

    async def _unit_done(self, unit: Unit) -> None:
        await self._outbox.send(UnitDone(unit_id=unit.unit_id, sglang=UnitSglang(
            media_time=MediaTime(t_start_ms=unit.t_start_ms, duration_ms=unit.duration_ms))))

    async def _on_commit(self, event: p.InputAudioBufferCommit) -> None:
        self._require_input_open(event.event_id)
        if self.config.turn_detection is None:
            if not await self._commit_rest():
                raise p.ProtocolError("input_audio_buffer_commit_empty",
                                      "nothing to commit: no audio since the last commit", event_id=event.event_id)
        elif not self._output.utterance_open:
            raise p.ProtocolError("input_audio_buffer_commit_empty", "nothing to commit: no open utterance",
                                  event_id=event.event_id)
        await self._control(control("commit"))

    async def _commit_rest(self) -> bool:
        """Without turn detection: the audio since the last commit is an utterance (if any)."""
        if self._accepted_samples <= self._commit_end:
            return False
        start, self._commit_end = self._commit_end, self._accepted_samples
        await self._output.committed(new_id("item"), start // SAMPLES_PER_MS, self._commit_end // SAMPLES_PER_MS)
        return True

    async def _on_end(self, event: p.InputAudioEnd) -> None:
        self._require_input_open(event.event_id)
        self.input_ended = True
        accepted_ms = samples_to_ms(self._accepted_samples)
        await self._outbox.send(InputAudioEnded(accepted_end_ms=accepted_ms, client_event_id=event.event_id))
        self._output.wake_all()
        tail = self._cutter.flush()
        if tail is not None:
            await self._unit_done(tail)
        if self.config.turn_detection is None:
            await self._commit_rest()
        self._output.on_drained = lambda: self._outbox.send(InputAudioDrained(
            accepted_end_ms=accepted_ms, consumed_ms=accepted_ms, client_event_id=event.event_id))
        self._graph.end_input()
        self._drain_task = asyncio.ensure_future(self._guard(self._drain()))

    async def _drain(self) -> None:
        await self._graph.wait_done()
        self._output.drained()

    async def _on_cancel(self, event: p.ResponseCancel) -> None:
        await self._control(control("interrupt"))

    async def _on_truncate(self, event: p.ConversationItemTruncate) -> None:
        self._check_truncate(event)
        reply = self._output.reply_of(event.item_id, event.event_id)
        position = min(float(event.audio_end_ms), reply.sent_ms)
        await self._outbox.send(ItemTruncated(item_id=event.item_id, audio_end_ms=int(position)))
        await self._control(control("truncate", turn=reply.turn, audio_end_ms=position, sent_ms=reply.sent_ms))
