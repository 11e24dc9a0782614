"""Ordered sending of server events on one WebSocket.

Several tasks of a session send (the reader's receipts, the graph's speech and transcription
events, the delivery of replies). ``send`` puts an event in the session's queue and returns at
once; one writer task writes the queue to the socket in order, so frames never interleave and no
sender ever waits for the client. It records the last activity for the idle timeout, and the
outbox drops everything once the session has closed, so nothing follows ``session.closed``.

A client that stops reading makes the writer wait (its socket and ours are full) while the
queue grows. An event that would make more than ``max_chunks`` queued events, or more than
``max_bytes`` of their JSON, is an overflow: it is dropped, the limit is named in ``overflow``,
``failed`` is set and every later ``send`` is refused; only ``send_last`` still queues (the
session's fatal error, close 1008, sent if the client reads again).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable

from starlette.websockets import WebSocket

from fdb.dialects.events import ServerEvent
from serving.realtime.wire import Wire

log = logging.getLogger("fdb.serving")


class Activity:
    """The monotonic time of the last input or output of a session (pings do not count)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.last = clock()

    def touch(self) -> None:
        self.last = self._clock()

    def idle_for(self) -> float:
        return self._clock() - self.last


class Outbox:
    def __init__(
        self,
        websocket: WebSocket,
        activity: Activity,
        max_chunks: int | None = None,
        max_bytes: int | None = None,
    ) -> None:
        self._ws = websocket
        self._activity = activity
        self.wire = Wire()  # the connection's dialect; the session sets it
        self._max_chunks, self._max_bytes = max_chunks, max_bytes
        self._queue: deque[tuple[str, str]] = deque()  # (event type, JSON) not yet written
        self._wake = asyncio.Event()
        self._empty = asyncio.Event()
        self._empty.set()
        self._writer: asyncio.Task | None = None
        self.pending_bytes = 0  # JSON of the events queued or being written
        self.closed = False  # no more events are taken
        self.broken = False  # the client went away while we were sending
        self.overflow: str | None = (
            None  # the pending-output limit a client that stopped reading hit
        )
        self.failed = asyncio.Event()

    async def send(self, event: ServerEvent, bounded: bool = True) -> bool:
        """Queue ``event`` for the socket; False when the session is closed, the socket failed
        or the pending output overflowed (the event is then dropped). An event this connection's
        dialect does not carry (an extension event of a plain GA session) is not sent: True."""
        if self.closed or (bounded and self.overflow is not None):
            return False
        data = self.wire.render(event)
        if data is None:
            return True
        if bounded and self._overflows(len(data)):
            return False
        self.pending_bytes += len(data)
        self._queue.append((event.type, data))
        self._empty.clear()
        self._wake.set()
        if self._writer is None:
            self._writer = asyncio.get_running_loop().create_task(self._write())
        return True

    async def _write(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._queue:
                type_, data = self._queue[0]
                try:
                    await self._ws.send_text(data)
                except Exception as exc:  # client disconnected or socket closed under us
                    log.debug("send of %s failed: %s", type_, exc)
                    self.closed = self.broken = True
                    self._drop()
                    break
                self._queue.popleft()
                self.pending_bytes -= len(data)
                self._activity.touch()
            if not self._queue:
                self._empty.set()

    def _drop(self) -> None:
        self._queue.clear()
        self.pending_bytes = 0
        self._empty.set()

    @property
    def pending(self) -> int:
        """Events queued or being written (the one in flight leaves the queue once written)."""
        return len(self._queue)

    def _overflows(self, size: int) -> bool:
        """Whether one more event of ``size`` bytes passes a bound; if so the outbox fails."""
        events, size = self.pending + 1, self.pending_bytes + size
        over = None
        if self._max_chunks is not None and events > self._max_chunks:
            over = (
                f"{events} output events wait to be sent (max_pending_output_chunks "
                f"{self._max_chunks})"
            )
        elif self._max_bytes is not None and size > self._max_bytes:
            over = (
                f"{size} bytes of output wait to be sent (max_pending_output_bytes "
                f"{self._max_bytes})"
            )
        if over is None:
            return False
        self.overflow = f"the client stopped reading: {over}"
        self.failed.set()
        return True

    async def flush(self, timeout_s: float) -> bool:
        """Wait until everything queued is written (at most ``timeout_s``); True when it was."""
        try:
            await asyncio.wait_for(self._empty.wait(), timeout_s)
        except TimeoutError:
            return False
        return True

    async def send_last(self, event: ServerEvent | None) -> None:
        """Queue ``event`` (if any) and close the outbox: nothing may follow it."""
        if event is not None:
            await self.send(event, bounded=False)  # the last event is queued whatever waits
        self.closed = True

    async def stop(self) -> None:
        """End the writer (after ``flush``); what is still queued is dropped."""
        if self._writer is not None:
            self._writer.cancel()
            await asyncio.gather(self._writer, return_exceptions=True)
            self._writer = None
        self._drop()
