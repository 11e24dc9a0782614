"""One native ``/v1/realtime`` connection: the session protocol of a full-duplex model.

A native system's session graph is one node of a ``native`` kind (``serving.graph.registry``:
``duplex_baseline``, ``moshi_gpu``), and that node is the whole session: the endpoint starts this
session for a graph whose protocol is ``native``, and the session runs that graph on the graph
runtime (:class:`~serving.graph.runtime.SessionGraph`), as every session does. Each accepted
append is one ``pcm16`` chunk of the graph's input, and the node (the kind's registered graph
node, a :class:`~serving.duplex.node.NativeNode`: the unit loop
:class:`~serving.duplex.engine.DuplexEngine` or :class:`~serving.duplex.native.MoshiSessionEngine`)
processes each unit as soon as its last packet arrived, sending the session's reply events and
``sglang.unit.done`` to the session's outbox itself (its :class:`~serving.duplex.node.NativePort`).
A new native backend is its options class, its node and one registry entry.

The lifecycle, receipts, limits, timeouts and errors are those of the turn-based session
(:class:`serving.realtime.session.RealtimeSession`, which this class extends): session.created
→ session.update → session.updated with the grant, ``input_audio_buffer.append`` with
``sglang.seq`` acknowledged by ``sglang.input_audio.accepted``, ``sglang.input_audio.end`` →
``sglang.input_audio.ended`` → ``sglang.input_audio.drained``, ``session.close`` →
``session.closed``; close codes 1000, 1008 (``session_update_timeout``, ``idle_timeout``,
``context_exhausted``) and 1011. What differs (the Full-Duplex Guide, "Full-duplex protocol"):

- session.update follows :mod:`serving.duplex.negotiation` (no turn detection; unit choice);
- the input goes to the native node's unit loop (duplex_baseline's
  :class:`~serving.duplex.engine.DuplexEngine` decides per unit when to speak:
  :mod:`serving.duplex.policy`);
- ``input_audio_buffer.commit`` is not granted; ``sglang.input_audio.ended`` reports tail
  policy ``pad``, and ``sglang.input_audio.drained``, once the graph has drained (the node's
  ``on_end``: the padded last unit and every reply), the padding of the last unit;
- ``response.cancel`` ends the reply being spoken at the next unit (cancelled/interrupted);
- ``session.close`` first ends any open response cancelled/``client_closed``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

import numpy as np
from starlette.websockets import WebSocket

from fdb.audio import float_to_pcm16
from fdb.dialects.events import (
    InputAudioDrained,
    InputAudioEnded,
    SessionUpdated,
    error_event,
)
from serving.duplex.negotiation import (
    NativeConfig,
    apply_native_update,
    initial_config,
    native_session_object,
)
from serving.duplex.node import NativeNode, NativePort
from serving.graph.nodes import build_nodes
from serving.graph.runtime import SessionGraph
from serving.graph.streams import Chunk, Pcm16
from serving.hub import ModelHub
from serving.realtime import protocol as p
from serving.realtime.audio_input import samples_to_ms
from serving.realtime.session import RealtimeSession


class NativeSession(RealtimeSession):
    config: NativeConfig

    def __init__(self, websocket: WebSocket, hub: ModelHub) -> None:
        super().__init__(websocket, hub)
        self.config = initial_config(self._system)
        graph = hub.graph
        assert graph.native_node is not None, "a native session runs a native graph"
        port = NativePort(self._outbox, lambda: self.config, self._context_exhausted)
        nodes = build_nodes(graph, hub, session=port)
        node = nodes[graph.native_node.name]
        assert isinstance(node, NativeNode), "a native kind's node is a NativeNode"
        self._node = node
        self.resample_per_chunk = node.resample_per_chunk
        self._graph = SessionGraph(graph, nodes)
        self._drain_task: asyncio.Future | None = None
        self._end_rest: np.ndarray | None = None  # the resampler's flushed tail, once taken

    def _engine_work(self) -> list[Awaitable[None]]:
        return [self._watch(), *self._node.loops()]

    def _busy(self) -> bool:
        return self._node.busy

    async def run(self) -> None:
        await self._graph.open()
        await super().run()

    async def _stop_engine(self) -> None:
        if self._drain_task is not None:
            self._drain_task.cancel()
        await self._graph.close()

    async def _watch(self) -> None:
        """The graph publishes nothing of a native node (its unit loop sends the session's
        events itself); a failure of the node is raised here, and fails the session."""
        while await self._graph.sink.get() is not None:
            pass

    async def _feed(self, samples: np.ndarray, event_id: str | None) -> None:
        chunk = Chunk("pcm16", Pcm16(float_to_pcm16(samples), samples))
        if not await self._graph.append(chunk):
            raise p.ProtocolError(
                "input_queue_full",
                f"the session's input queue is full; resend seq {self._next_seq} later",
                param="sglang.seq",
                event_id=event_id,
            )

    async def _context_exhausted(self) -> None:
        limit = self._system.duplex.max_context_ms if self._system.duplex else 0
        await self._node.close_open("context_exhausted")
        await self._finish(
            1008,
            "context_exhausted",
            error_event(
                "context_exhausted",
                f"the session reached its context of {limit / 1000:g} s of input; "
                "open a new session",
                kind="server_error",
                fatal=True,
            ),
        )

    def _created_body(self) -> dict:
        return native_session_object(self.id, self._system, None)

    async def _on_update(self, event: p.SessionUpdate) -> None:
        new = apply_native_update(
            self.config, event.session, self._system, event.event_id, self.opened
        )
        self.config, self.opened = new, True
        await self._outbox.send(
            SessionUpdated(
                client_event_id=event.event_id,
                session=native_session_object(self.id, self._system, new),
            )
        )

    async def _on_commit(self, event: p.InputAudioBufferCommit) -> None:
        raise p.ProtocolError(
            "not_granted", "manual turn commands are not granted", event_id=event.event_id
        )

    async def _on_end(self, event: p.InputAudioEnd) -> None:
        """``ended`` at the client's accepted input; the resampler of a 24 kHz input gives up the
        audio its filter still holds, so the units tile all of it; ``drained`` once the graph
        has drained (the node's ``on_end`` returned)."""
        self._require_input_open(event.event_id)
        if self._end_rest is None:  # taken once: an end refused below (input_queue_full) is resent
            stateful = self._resampler is not None and self._resampler.stateful
            rest = self._resampler.push(np.zeros(0, np.float32), last=True) if stateful else None
            self._end_rest = rest if rest is not None else np.zeros(0, np.float32)
        if len(self._end_rest):
            await self._feed(self._end_rest, event.event_id)
            self._accepted_samples += len(self._end_rest)
            self._end_rest = self._end_rest[:0]
        self.input_ended = True
        accepted = self._accepted_ms()
        await self._outbox.send(
            InputAudioEnded(
                accepted_end_ms=accepted, tail_policy="pad", client_event_id=event.event_id
            )
        )
        self._graph.end_input()
        self._drain_task = asyncio.ensure_future(self._guard(self._drain(accepted, event.event_id)))

    async def _drain(self, accepted: int | float, event_id: str | None) -> None:
        await self._graph.wait_done()
        await self._outbox.send(
            InputAudioDrained(
                accepted_end_ms=accepted,
                consumed_ms=samples_to_ms(self._node.consumed_samples),
                padding_ms=samples_to_ms(self._node.padding_samples),
                client_event_id=event_id,
            )
        )

    async def _on_cancel(self, event: p.ResponseCancel) -> None:
        self._node.cancel()

    async def _on_close(self, event: p.SessionClose) -> None:
        await self._node.close_open("client_closed")
        await super()._on_close(event)
