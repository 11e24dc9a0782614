"""One user turn: the utterance an engine cut, and the reply it builds for it (the native engine
of ``serving.duplex``; a graph reply's pacing and interruption, ``serving.realtime.graph_output``).

A turn can be *interrupted* (the user started speaking again, or the client sent
``response.cancel``) and *woken* (interrupted, or the input ended so pacing stops). Waits in the
responder go through :meth:`Turn.sleep` and :meth:`Turn.race`, so an interruption takes effect
at once even while a model call is still running in the pool (its result is then dropped).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np

T = TypeVar("T")


class TurnInterrupted(Exception):
    """Raised inside the responder when the turn it works on was interrupted."""


@dataclass(frozen=True)
class Utterance:
    """The user's audio of one turn (16 kHz float32) and where it sits on the input timeline."""

    item_id: str
    samples: np.ndarray
    start_ms: int
    end_ms: int


@dataclass(eq=False)
class Turn:
    utterance: Utterance
    response_id: str | None = None  # set once response.created was sent
    done: bool = False
    cancel_reason: str | None = None
    interrupted_at: float | None = None  # time.monotonic() of the interruption
    _cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    _wake: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def interrupted(self) -> bool:
        return self._cancelled.is_set()

    def interrupt(self, reason: str = "interrupted") -> None:
        if not self._cancelled.is_set():
            self.cancel_reason = reason
            self.interrupted_at = time.monotonic()
            self._cancelled.set()
            self._wake.set()

    def wake(self) -> None:
        """Stop pacing: the input has ended, everything may leave at once."""
        self._wake.set()

    async def sleep(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; False when woken early (interrupted or input ended)."""
        if self._wake.is_set():
            return False
        try:
            await asyncio.wait_for(self._wake.wait(), timeout=max(seconds, 0.0))
        except TimeoutError:
            return True
        return False

    async def race(self, awaitable: Awaitable[T]) -> T:
        """Await ``awaitable`` unless the turn is interrupted first (TurnInterrupted)."""
        task = asyncio.ensure_future(awaitable)
        stopper = asyncio.ensure_future(self._cancelled.wait())
        try:
            await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            task.cancel()
            raise
        finally:
            stopper.cancel()
        if task.done():
            return task.result()
        task.cancel()
        raise TurnInterrupted()
