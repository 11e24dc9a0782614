"""One native ``/v1/realtime`` connection: the session protocol of a full-duplex model.

The lifecycle, receipts, limits, timeouts and errors are those of the turn-based session
(:class:`serving.realtime.session.RealtimeSession`, which this class extends): session.created
→ session.update → session.updated with the grant, ``input_audio_buffer.append`` with
``sglang.seq`` acknowledged by ``sglang.input_audio.accepted``, ``sglang.input_audio.end`` →
``sglang.input_audio.ended`` → ``sglang.input_audio.drained``, ``session.close`` →
``session.closed``; close codes 1000, 1008 (``session_update_timeout``, ``idle_timeout``,
``context_exhausted``) and 1011. What differs (the Full-Duplex Guide, "Full-duplex protocol"):

- session.update follows :mod:`serving.duplex.negotiation` (no turn detection; unit choice);
- the input goes to a :class:`~serving.duplex.engine.DuplexEngine`, which decides per unit
  when to speak (:mod:`serving.duplex.policy`);
- ``input_audio_buffer.commit`` is not granted; ``sglang.input_audio.ended`` reports tail
  policy ``pad`` and ``sglang.input_audio.drained`` the padding of the last unit;
- ``response.cancel`` ends the reply being spoken at the next unit (cancelled/interrupted);
- ``session.close`` first ends any open response cancelled/``client_closed``.
"""

from __future__ import annotations

import numpy as np
from starlette.websockets import WebSocket

from fdb.dialects.events import (
    InputAudioDrained,
    InputAudioEnded,
    SessionUpdated,
    error_event,
)
from serving.duplex.engine import DuplexEngine
from serving.duplex.native import MoshiSessionEngine
from serving.duplex.negotiation import apply_native_update, initial_config, native_session_object
from serving.hub import ModelHub
from serving.realtime import protocol as p
from serving.realtime.audio_input import samples_to_ms
from serving.realtime.listener import EndMark
from serving.realtime.session import RealtimeSession


class NativeSession(RealtimeSession):
    def __init__(self, websocket: WebSocket, hub: ModelHub) -> None:
        super().__init__(websocket, hub)
        self.config = initial_config(self._system)
        engine = DuplexEngine
        if hub.native is not None:  # a native model (serving.duplex.native) instead of the policy
            engine = MoshiSessionEngine
            self.resample_per_chunk = True  # a unit is whole once its packet arrived
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
