"""One ``/v1/realtime`` connection: the session protocol every system shares.

Lifecycle (the OpenAI Realtime GA session, and the Full-Duplex Guide's "Full-duplex protocol"
and turn-based session protocol as its extension; :mod:`serving.realtime.wire` says which events
a connection gets in which dialect):

1. On connect the server sends ``session.created`` with the default session. A turn-based
   session (:attr:`RealtimeSession.requires_update` false) is active from there, as in GA: input
   may come at once, at 24 kHz. A native session waits up to ``session_update_timeout_s`` for a
   session.update that it can grant; else it closes with 1008 ``session_update_timeout``.
2. A granted ``session.update`` is answered with ``session.updated`` (the effective settings
   and, with the extensions, the grant), then one ``warning`` error event per field it took
   without applying. Refused updates get an ``error`` and change nothing.
3. ``input_audio_buffer.append``: ``sglang.seq``, when sent, counts up from 0 without gaps
   (else ``bad_seq``); with the extensions each append is acknowledged with
   ``sglang.input_audio.accepted``. Input at 24 kHz is resampled to the models' 16 kHz as it
   arrives (soxr, streaming); the receipts count the client's own audio.
4. ``sglang.input_audio.end`` is acknowledged with ``sglang.input_audio.ended`` (tail policy
   ``flush``); once the tail unit is flushed and every reply delivered, the server sends
   ``sglang.input_audio.drained``. No append may follow the end.
5. ``session.close`` is answered with ``session.closed`` and close code 1000.

A session with neither input nor output (and no reply in the works) for ``idle_timeout_s``
closes with 1008 ``idle_timeout``; a client that stops reading while more than
``max_pending_output_chunks`` events (or ``max_pending_output_bytes``) wait to be sent closes
with 1008 ``max_pending_output``; an internal failure sends a fatal ``server_error`` and closes
with 1011. Every other refusal is a non-fatal ``error`` event and the session continues.
However it ends (these closes, ``session.close``, the client's close frame or a dropped
connection), the session gives up its slot of ``max_sessions`` at that moment (``on_end``),
before its last event and close frame are sent, while its tasks are still winding down.

What turns the input into replies is a subclass's session graph (``serving.graph.runtime``):
the turn-based session (:mod:`serving.realtime.graph_session`) or the native full-duplex session
(``serving.duplex.session``), whose graph is one native node.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
import soxr
from starlette.websockets import WebSocket

from fdb.dialects.events import (
    InputAudioAccepted,
    ServerEvent,
    SessionClosed,
    SessionCreated,
    SessionUpdated,
    error_event,
    new_id,
)
from serving.hub import ModelHub
from serving.realtime import protocol as p
from serving.realtime.audio_input import decode_pcm16, samples_to_ms
from serving.realtime.negotiation import (
    INPUT_RATE,
    SessionConfig,
    apply_update,
    initial_config,
    not_applied,
    session_object,
)
from serving.realtime.outbox import Activity, Outbox
from serving.realtime.wire import beta_session_object, dialect_of

log = logging.getLogger("fdb.serving")
LAST_TRY_S = 2.0  # the error event and close frame for a client that may not read them


class InputResampler:
    """The client's input at ``rate`` as the models' 16 kHz, streamed (soxr HQ): each chunk
    comes out as soon as the filter allows (up to about 20 ms is held until the next one).
    ``per_chunk``: each chunk resampled on its own instead (nothing held, so a unit is whole as
    soon as its last packet arrived; the filter sees no audio across chunk edges)."""

    def __init__(self, rate: int, per_chunk: bool = False) -> None:
        self.rate = rate
        self.per_chunk = per_chunk and rate != INPUT_RATE
        self._stream = (
            None
            if rate == INPUT_RATE or per_chunk
            else soxr.ResampleStream(rate, INPUT_RATE, 1, dtype="float32", quality="HQ")
        )

    @property
    def stateful(self) -> bool:
        """Whether audio pushed once is inside the filter (a refused chunk cannot be pushed
        again)."""
        return self._stream is not None

    def push(self, samples: np.ndarray, last: bool = False) -> np.ndarray:
        if self.per_chunk:
            if not len(samples):
                return samples.astype(np.float32, copy=False)
            return soxr.resample(
                samples.astype(np.float32, copy=False), self.rate, INPUT_RATE, quality="HQ"
            )
        if self._stream is None:
            return samples
        return self._stream.resample_chunk(samples.astype(np.float32, copy=False), last=last)


class RealtimeSession:
    # A native session waits for a granted session.update before input (the Guide); a
    # turn-based one is a GA session, active from session.created.
    requires_update = True
    # The session protocol's extension events from the start (native), or once a session.update
    # carries ``sglang`` (turn-based).
    extensions_always = True
    # resample each input chunk on its own (a native model's units are whole when their last
    # packet arrived) instead of streaming through the filter
    resample_per_chunk = False

    def __init__(self, websocket: WebSocket, hub: ModelHub) -> None:
        self.id = new_id("sess")
        self._ws = websocket
        self._hub = hub
        self._system = hub.system
        self._activity = Activity()
        self._outbox = Outbox(
            websocket,
            self._activity,
            hub.system.max_pending_output_chunks,
            hub.system.max_pending_output_bytes,
        )
        self._wire = self._outbox.wire
        self._wire.dialect = dialect_of(getattr(websocket, "headers", None))
        self._wire.extensions = self.extensions_always
        self.config = self._initial_config()
        self.opened = False
        self.input_ended = False
        self._next_seq = 0
        self._accepted_samples = 0  # at the models' 16 kHz
        self._client_samples = 0  # as the client sent them, at config.input_rate
        self._resampler: InputResampler | None = None
        # (seq, resampled samples) of an append the engine refused (input_queue_full) after the
        # resampler took it: its resend feeds these instead of resampling the audio twice
        self._refused: tuple[int, np.ndarray] | None = None
        self._build_engine()
        self._finished = asyncio.Event()
        self._closing = False
        self._close: tuple[int, str] | None = None
        self._started = time.monotonic()
        # Called once, the moment the session ends (the endpoint frees its slot there): before
        # the last event and the close frame are queued, so no client sees them first.
        self.on_end: Callable[[], None] = lambda: None

    def _initial_config(self) -> SessionConfig:
        return initial_config(self._system)

    def _session_body(self) -> dict[str, Any]:
        """The session object of session.created / session.updated in this connection's dialect."""
        body = session_object(self.id, self._system, self.config, self._wire.extensions)
        if self._wire.dialect == "beta":
            return beta_session_object(body, self.config.sampling.temperature)
        return body

    # --- the engine: a subclass's (the session graph it builds and runs) ----------------------

    def _build_engine(self) -> None:
        """Set up what turns the input into replies (called by ``__init__``)."""

    def _engine_work(self) -> list[Awaitable[None]]:
        """The engine's loops, run as the session's tasks (a failure fails the session)."""
        return []

    def _busy(self) -> bool:
        """A reply is in the works: the idle timeout waits."""
        return False

    async def _stop_engine(self) -> None:
        """The session ended and its tasks are done: stop the engine, before the last events are
        flushed and the socket closes."""

    async def _configure(self, new: SessionConfig, extensions: bool) -> None:
        """A granted session.update (``self.config`` is still the previous one)."""
        raise NotImplementedError

    async def _feed(self, samples: np.ndarray, event_id: str | None) -> None:
        """Accepted input audio (ProtocolError: refused, nothing of it taken)."""
        raise NotImplementedError

    # --- lifecycle ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Serve the connection until it closes (the socket must already be accepted)."""
        await self._outbox.send(SessionCreated(session=self._created_body()))
        tasks = [
            asyncio.create_task(self._guard(coro))
            for coro in (self._read(), *self._engine_work(), self._watchdog(), self._backpressure())
        ]
        try:
            await self._finished.wait()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self._stop_engine()
            await self._close_socket()

    def _created_body(self) -> dict[str, Any]:
        return self._session_body()

    async def _guard(self, work: Awaitable[None]) -> None:
        """Any failure inside the session is fatal: a server_error event, then close 1011."""
        try:
            await work
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("session %s failed", self.id)
            await self._finish(
                1011,
                "internal",
                error_event(
                    "internal_error",
                    f"{type(exc).__name__}: {exc}",
                    kind="server_error",
                    fatal=True,
                ),
            )

    def _end(self, code: int, reason: str) -> bool:
        """Mark the session ended with close ``code`` (False when it already was); from here
        it takes no input and holds no slot."""
        if self._closing:
            return False
        self._closing, self._close = True, (code, reason)
        self.on_end()
        return True

    async def _finish(self, code: int, reason: str, last: ServerEvent | None) -> None:
        """Send ``last`` as the final event and end the session with close ``code``."""
        if not self._end(code, reason):
            return
        await self._outbox.send_last(last)
        self._finished.set()

    async def _close_socket(self) -> None:
        """The queued events (the last one included), then the close frame; both bounded, as a
        client that stopped reading takes neither."""
        try:
            if self._outbox.broken or self._close is None:
                return
            await self._outbox.flush(LAST_TRY_S)
            code, reason = self._close
            try:
                await asyncio.wait_for(self._ws.close(code=code, reason=reason), LAST_TRY_S)
            except Exception as exc:  # already closed by the client, or not reading
                log.debug("close of session %s: %s", self.id, exc)
        finally:
            await self._outbox.stop()

    async def _watchdog(self) -> None:
        system = self._system
        tick = max(0.05, min(1.0, system.session_update_timeout_s / 10, system.idle_timeout_s / 10))
        while True:
            await asyncio.sleep(tick)
            if (
                self.requires_update
                and not self.opened
                and time.monotonic() - self._started > system.session_update_timeout_s
            ):
                message = f"no session.update granted within {system.session_update_timeout_s:g} s"
                await self._finish(
                    1008,
                    "session_update_timeout",
                    error_event("session_update_timeout", message, kind="server_error", fatal=True),
                )
            elif self._activity.idle_for() > system.idle_timeout_s and not self._busy():
                message = f"no input and no output for {system.idle_timeout_s:g} s"
                await self._finish(
                    1008,
                    "idle_timeout",
                    error_event("idle_timeout", message, kind="server_error", fatal=True),
                )

    async def _backpressure(self) -> None:
        """A client that stopped reading (the outbox's pending-output bound): the session fails
        naming the limit, close 1008. The error event is sent if the socket still takes it."""
        await self._outbox.failed.wait()
        log.warning("session %s failed: %s", self.id, self._outbox.overflow)
        if not self._end(1008, "max_pending_output"):
            return
        # queued behind the stuck write: sent if the client reads again
        await self._outbox.send_last(
            error_event(
                "max_pending_output", self._outbox.overflow or "", kind="server_error", fatal=True
            )
        )
        self._finished.set()

    # --- reading -----------------------------------------------------------------------------

    async def _read(self) -> None:
        while not self._closing:
            message = await self._ws.receive()
            if message["type"] == "websocket.disconnect":
                self._outbox.broken = True
                await self._finish(1000, "disconnect", None)
                return
            self._activity.touch()
            try:
                text = message.get("text")
                if text is None:
                    raise p.ProtocolError(
                        "binary_frame", "binary frames are not accepted; send JSON text"
                    )
                await self._dispatch(p.parse_client_event(text, beta=self._wire.dialect == "beta"))
            except p.ProtocolError as exc:
                await self._outbox.send(
                    error_event(
                        exc.code,
                        exc.message,
                        param=exc.param,
                        event_id=exc.event_id,
                        kind=exc.kind,
                        fatal=exc.fatal,
                    )
                )

    async def _dispatch(self, event: object) -> None:
        handlers = {
            p.SessionUpdate: self._on_update,
            p.InputAudioBufferAppend: self._on_append,
            p.InputAudioBufferCommit: self._on_commit,
            p.InputAudioEnd: self._on_end,
            p.ResponseCancel: self._on_cancel,
            p.SessionClose: self._on_close,
            p.InputAudioBufferClear: self._on_clear,
            p.ResponseCreate: self._on_response_create,
            p.ConversationItemTruncate: self._on_truncate,
            p.ConversationItemCreate: self._on_item_create,
            p.ConversationItemOther: self._refuse,
            p.OutputAudioBufferClear: self._on_output_clear,
        }
        await handlers[type(event)](event)

    def _require_input_open(self, event_id: str | None) -> None:
        if self.requires_update and not self.opened:
            raise p.ProtocolError(
                "session_not_open",
                "send session.update and wait for session.updated before sending input",
                event_id=event_id,
            )
        if self.input_ended:
            raise p.ProtocolError(
                "input_ended",
                "the input already ended with sglang.input_audio.end",
                event_id=event_id,
            )

    # --- handlers ----------------------------------------------------------------------------

    async def _on_update(self, event: p.SessionUpdate) -> None:
        patch = event.session
        asks = patch.sglang is not None and patch.sglang.events is not False
        strict = self._wire.extensions or asks
        new = apply_update(
            self.config,
            patch,
            self._system,
            event.event_id,
            self.opened,
            strict=strict,
            input_flowed=self._client_samples > 0,
        )
        await self._configure(new, self._wire.extensions or asks)
        self.config, self.opened = new, True
        self._wire.extensions = self._wire.extensions or asks
        await self._outbox.send(
            SessionUpdated(client_event_id=event.event_id, session=self._session_body())
        )
        for param, message in not_applied(patch, strict):
            await self._outbox.send(
                error_event(
                    "not_applied", message, param=param, event_id=event.event_id, kind="warning"
                )
            )

    def _accepted_ms(self) -> int | float:
        """The client's input accepted so far, in ms of its own timeline."""
        rate = self.config.input_rate
        if rate == INPUT_RATE:
            return samples_to_ms(self._client_samples)
        ms = self._client_samples * 1000 / rate
        return int(ms) if ms == int(ms) else ms

    async def _on_append(self, event: p.InputAudioBufferAppend) -> None:
        """Contiguous seq from 0; the receipt reports the input accepted so far in ms."""
        self._require_input_open(event.event_id)
        seq = event.sglang.seq if event.sglang and event.sglang.seq is not None else self._next_seq
        if seq != self._next_seq:
            raise p.ProtocolError(
                "bad_seq",
                f"seq {seq} is out of order; expected {self._next_seq}",
                param="sglang.seq",
                event_id=event.event_id,
            )
        raw = decode_pcm16(event.audio, self._system.max_input_bytes, event.event_id)
        if self._refused is not None and self._refused[0] == seq:
            samples = self._refused[1]
        else:
            if self._resampler is None or self._resampler.rate != self.config.input_rate:
                self._resampler = InputResampler(self.config.input_rate, self.resample_per_chunk)
            samples = self._resampler.push(raw)
        try:
            await self._feed(samples, event.event_id)
        except p.ProtocolError:
            self._refused = (
                (seq, samples) if self._resampler is not None and self._resampler.stateful else None
            )
            raise
        self._refused = None
        self._next_seq += 1
        self._client_samples += len(raw)
        self._accepted_samples += len(samples)
        await self._outbox.send(
            InputAudioAccepted(
                seq=seq, accepted_end_ms=self._accepted_ms(), client_event_id=event.event_id
            )
        )

    async def _on_commit(self, event: p.InputAudioBufferCommit) -> None:
        raise NotImplementedError

    async def _on_end(self, event: p.InputAudioEnd) -> None:
        """``sglang.input_audio.ended`` now; ``drained`` once every reply is delivered."""
        raise NotImplementedError

    async def _on_cancel(self, event: p.ResponseCancel) -> None:
        """Cancel the reply in progress; with none (or cancelled already) it does nothing."""
        raise NotImplementedError

    async def _on_truncate(self, event: p.ConversationItemTruncate) -> None:
        """Cut a reply's history at the last boundary heard by ``audio_end_ms`` (clamped to the
        audio sent): ``conversation.item.truncated``, then ``sglang.response.heard``."""
        raise NotImplementedError

    @staticmethod
    def _check_truncate(event: p.ConversationItemTruncate) -> None:
        if event.item_id is None or event.audio_end_ms is None:
            missing = "item_id" if event.item_id is None else "audio_end_ms"
            raise p.ProtocolError(
                "missing_required_parameter",
                f"conversation.item.truncate needs {missing}",
                param=missing,
                event_id=event.event_id,
            )
        if event.audio_end_ms < 0 or event.content_index not in (None, 0):
            param = "audio_end_ms" if event.audio_end_ms < 0 else "content_index"
            raise p.ProtocolError(
                "invalid_value",
                f"{param} must be {'>= 0' if param == 'audio_end_ms' else '0'}",
                param=param,
                event_id=event.event_id,
            )

    async def _on_close(self, event: p.SessionClose) -> None:
        await self._finish(
            1000,
            "client_closed",
            SessionClosed(reason="client_closed", client_event_id=event.event_id),
        )

    async def _on_clear(self, event: p.InputAudioBufferClear) -> None:
        await self._refuse(event)

    async def _on_output_clear(self, event: p.OutputAudioBufferClear) -> None:
        await self._refuse(event)

    async def _on_item_create(self, event: p.ConversationItemCreate) -> None:
        await self._refuse(event)

    async def _on_response_create(self, event: p.ResponseCreate) -> None:
        raise p.ProtocolError(
            "not_granted", "manual turn commands are not granted", event_id=event.event_id
        )

    async def _refuse(self, event: Any) -> None:
        raise p.ProtocolError(
            "not_supported",
            f"{event.type} is not supported by this server",
            event_id=event.event_id,
        )
