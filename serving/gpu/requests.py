"""What the GPU engines with a thread of their own share about requests (``csm_gpu``'s
:class:`~serving.gpu.csm.CsmEngine`, ``causal_lm_gpu``'s
:class:`~serving.gpu.lm_slots.SlotLmEngine`): a request's output handed from the GPU thread to
the caller's event loop (:class:`LoopQueue`), awaited item by item (:func:`received`), and the
queue of waiting requests with the engine's closing and ending (:class:`PendingRequests`).

An output queue carries the request's items, then ``None`` at its end; an exception in it is
raised to the caller.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

from fdb.errors import FdbError

log = logging.getLogger("fdb.serving")


class LoopQueue:
    """A request's output handed from the GPU thread to an asyncio queue on the caller's loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, items: asyncio.Queue):
        self.loop, self.items = loop, items

    def put(self, item) -> None:
        try:
            self.loop.call_soon_threadsafe(self.items.put_nowait, item)
        except RuntimeError:  # the caller's loop has closed: nobody reads this request any more
            pass


async def received(items: asyncio.Queue, request: Any) -> AsyncIterator[Any]:
    """``request``'s items as they arrive in ``items`` (its :class:`LoopQueue`'s); leaving early
    marks it cancelled (the GPU thread ends it at its next step)."""
    try:
        while True:
            item = await items.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        request.cancelled = True


class PendingRequests:
    """The waiting requests of an engine whose GPU thread (``_thread``) admits them; the engine
    sets ``_pending``, ``_wake``, ``_stop`` and ``_thread`` and names its closed error
    (:meth:`_closed`)."""

    _pending: queue.SimpleQueue
    _wake: threading.Event
    _stop: bool
    _thread: threading.Thread
    _slots: list  # the requests in flight, by slot (None: free)

    _failed: str | None = None  # the GPU thread's failure (it has ended), if it failed

    def _closed(self) -> FdbError:
        raise NotImplementedError

    def _ended_error(self) -> FdbError:
        """What a request that can no longer run ends with: the thread's failure, or closed."""
        # a new error each time: one raised in many callers' threads would pile up their frames
        if self._failed is not None:
            return FdbError(self._failed, "see the server log; restart it")
        return self._closed()

    def _run_loop(self, loop: Callable[[], None], what: str) -> None:
        """The GPU thread: ``loop()`` until closed. If it fails outside a step (a failed device,
        where even an admission's write fails), the failure is logged once with its traceback,
        and every request in flight, waiting or submitted later ends with it."""
        try:
            loop()
        except Exception as exc:  # noqa: BLE001 - logged, and every request ends with it
            log.exception("%s: the GPU thread failed", what)
            self._failed = f"{what} failed: {exc}"
        finally:  # closed (or failed): no request may wait on this thread any more
            self._ended()

    def _finish(self, slot: int, error: BaseException | None) -> None:
        raise NotImplementedError

    def _admit(self) -> None:
        raise NotImplementedError

    def _arrival(self) -> Any | None:
        """The next waiting request, or None if none waits (``close()`` may have drained the
        queue from another thread meanwhile: never block on it)."""
        try:
            return self._pending.get_nowait()
        except queue.Empty:
            return None

    def _in_flight(self) -> list[int]:
        """The busy slots, in order."""
        return [i for i, r in enumerate(self._slots) if r is not None]

    def _busy(self) -> list[int]:
        """The slots in flight; with none, the waiting requests are admitted, or the thread
        waits for one (50 ms at most) and the caller asks again."""
        busy = self._in_flight()
        if not busy:
            self._admit()
            if not self._in_flight():
                self._wake.wait(0.05)
                self._wake.clear()
        return busy

    def _ended(self) -> None:
        """The GPU thread has ended (closed or failed): every request in flight or waiting ends
        with the closed error (or the thread's failure); none may wait on the thread any more."""
        self._stop = True
        for i, request in enumerate(self._slots):
            if request is not None:
                self._finish(i, self._ended_error())
        self._fail_pending()

    def _submit(self, request: Any) -> Any:
        if self._stop:
            raise self._ended_error()
        self._pending.put(request)
        self._wake.set()
        if self._stop:  # closed meanwhile: the GPU thread may have drained the queue already
            self._fail_pending()
        return request

    def close(self) -> None:
        """Stop the GPU thread; every request in flight or waiting ends with an error (a
        stream left waiting would hold its caller, and the process, forever)."""
        self._stop = True
        self._wake.set()
        self._thread.join(timeout=10)

    def _fail_pending(self) -> None:
        while True:
            try:
                request = self._pending.get_nowait()
            except queue.Empty:
                return
            request.out.put(self._ended_error())
            request.out.put(None)
