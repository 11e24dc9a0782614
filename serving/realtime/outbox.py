"""Ordered sending of server events on one WebSocket.

Several tasks of a session send (the reader's receipts, the graph's speech and transcription
events, the delivery of replies); the outbox serializes them so frames never interleave, records
the last activity for the idle timeout, and drops everything once the session has closed, so
nothing follows ``session.closed``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from starlette.websockets import WebSocket

from serving.realtime.events import ServerEvent

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
    def __init__(self, websocket: WebSocket, activity: Activity) -> None:
        self._ws = websocket
        self._activity = activity
        self._lock = asyncio.Lock()
        self.closed = False
        self.broken = False  # the client went away while we were sending

    async def send(self, event: ServerEvent) -> bool:
        """Send ``event``; False when the session is closed or the socket failed."""
        if self.closed:
            return False
        async with self._lock:
            if self.closed:
                return False
            try:
                await self._ws.send_text(event.model_dump_json())
            except Exception as exc:  # client disconnected or socket closed under us
                log.debug("send of %s failed: %s", event.type, exc)
                self.closed = True
                self.broken = True
                return False
            self._activity.touch()
            return True

    async def send_last(self, event: ServerEvent | None) -> None:
        """Send ``event`` (if any) and close the outbox: nothing may follow it."""
        if event is not None:
            await self.send(event)
        async with self._lock:
            self.closed = True
