"""One native ``/v1/realtime`` connection: the session protocol of a full-duplex model.

A native system's session graph is one node of a ``native`` kind (``serving.graph.registry``:
``duplex_baseline``, ``moshi_gpu``), and that node is the whole session: the endpoint starts this
session for a graph whose protocol is ``native``, and the session runs the node's unit loop (the
kind's registered ``node``, a :class:`NativeEngine`: :class:`~serving.duplex.engine.DuplexEngine`,
:class:`~serving.duplex.native.MoshiSessionEngine`) in place of the graph runtime. The unit loop
takes the input in order and sends the session's reply events and ``sglang.unit.done`` itself; a
new native backend is its options class, its unit loop and one registry entry.

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
  policy ``pad`` and ``sglang.input_audio.drained`` the padding of the last unit;
- ``response.cancel`` ends the reply being spoken at the next unit (cancelled/interrupted);
- ``session.close`` first ends any open response cancelled/``client_closed``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import numpy as np
from starlette.websockets import WebSocket

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
from serving.graph import registry
from serving.hub import ModelHub
from serving.realtime import protocol as p
from serving.realtime.audio_input import samples_to_ms
from serving.realtime.listener import AudioChunk, EndMark
from serving.realtime.outbox import Outbox
from serving.realtime.session import RealtimeSession


class NativeEngine(Protocol):
    """A native kind's unit loop for one session (its registry entry's ``node``), made as
    ``cls(hub, outbox, config, on_exhausted)``: ``config()`` is the session's granted settings,
    ``on_exhausted()`` ends the session at ``max_context_ms``. ``resample_per_chunk`` (a class
    attribute): 24 kHz input is resampled per packet, so a unit is whole once its packet arrived.
    """

    resample_per_chunk: bool
    worker: Any  # the session's responder loop: ``run()``, ``busy`` while a reply is in the works
    consumed_samples: int  # real input that went through units (sglang.input_audio.drained)
    padding_samples: int  # silence added to the last unit

    def __init__(
        self,
        hub: ModelHub,
        outbox: Outbox,
        config: Callable[[], NativeConfig],
        on_exhausted: Callable[[], Awaitable[None]],
    ) -> None: ...

    def put(self, item: AudioChunk | EndMark) -> None: ...

    async def run(self) -> None: ...

    def cancel(self) -> None: ...

    async def close_open(self, reason: str) -> None: ...


class NativeSession(RealtimeSession):
    def __init__(self, websocket: WebSocket, hub: ModelHub) -> None:
        super().__init__(websocket, hub)
        self.config = initial_config(self._system)
        node = hub.graph.native_node
        assert node is not None, "a native session runs a native graph"
        engine: type[NativeEngine] = registry.native_engine(node.kind)
        self.resample_per_chunk = engine.resample_per_chunk
        self._engine = engine(hub, self._outbox, lambda: self.config, self._context_exhausted)
        # The base lifecycle runs these two loops: units and decisions, and reply generation.
        self._listener = self._engine  # type: ignore[assignment]
        self._responder = self._engine.worker  # type: ignore[assignment]

    async def _context_exhausted(self) -> None:
        limit = self._system.duplex.max_context_ms if self._system.duplex else 0
        await self._engine.close_open("context_exhausted")
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
        audio its filter still holds, so the units tile all of it; ``drained`` after the last
        unit."""
        self._require_input_open(event.event_id)
        self.input_ended = True
        if self._resampler is not None and self._resampler.stateful:
            rest = self._resampler.push(np.zeros(0, np.float32), last=True)
            if len(rest):
                await self._feed(rest, event.event_id)
                self._accepted_samples += len(rest)
        accepted = self._accepted_ms()
        await self._outbox.send(
            InputAudioEnded(
                accepted_end_ms=accepted, tail_policy="pad", client_event_id=event.event_id
            )
        )

        async def drained() -> None:
            await self._outbox.send(
                InputAudioDrained(
                    accepted_end_ms=accepted,
                    consumed_ms=samples_to_ms(self._engine.consumed_samples),
                    padding_ms=samples_to_ms(self._engine.padding_samples),
                    client_event_id=event.event_id,
                )
            )

        self._engine.put(EndMark(drained))

    async def _on_cancel(self, event: p.ResponseCancel) -> None:
        self._engine.cancel()

    async def _on_close(self, event: p.SessionClose) -> None:
        await self._engine.close_open("client_closed")
        await super()._on_close(event)
