"""The recorder's event loop and clock.

Recording runs on uvloop where it is installed (a core dependency on Linux and macOS): its C
transports and scheduler cut the per-message cost of the stock asyncio loop, which is what limits
how many paced sessions one process holds (``benchmarks/recorder_capacity.py``). Set
``FDB_EVENT_LOOP=asyncio`` to use the stock loop instead.

Every recorder time (trace rows, packet slots, loop lag) is read from ``CLOCK`` =
``time.monotonic``, the stock loop's own clock: uvloop's ``loop.time()`` counts whole
milliseconds, too coarse for packet lateness.

Paced waits (``sleep_until``, ``paced_sleep``) share one timer per event loop (``Pacer``): with
hundreds of sessions each sleeping to its next packet, a timer per wait cost more CPU than
sending the packets, and woke later (measured: docs/benchmarks.md#recorder-timers).

On a loop made by ``run`` (Linux) that timer is a ``TimerFd``, armed to the microsecond: a loop
timer fires on a whole millisecond, so packets left up to 1-2 ms after their slot; the timerfd
cuts the median lateness well below a millisecond (measured: docs/benchmarks.md#recorder-timers).
"""

from __future__ import annotations

import asyncio
import ctypes
import heapq
import itertools
import math
import os
import sys
import time
import weakref
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
CLOCK = time.monotonic


def loop_factory() -> asyncio.AbstractEventLoop:
    if os.environ.get("FDB_EVENT_LOOP", "").lower() != "asyncio":
        try:
            # lazy: uvloop is absent on win32 (pyproject marker); FDB_EVENT_LOOP=asyncio skips it
            import uvloop
        except ImportError:
            pass
        else:
            return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def run(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on the recorder's loop; its pacer wakes from a ``TimerFd`` where the
    platform has one."""
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        loop = runner.get_loop()
        paced = _PACERS[loop] = Pacer(loop, precise=True)
        try:
            return runner.run(coro)
        finally:
            _PACERS.pop(loop, None)
            paced.close()


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


class TimerFd:
    """A Linux timerfd on ``CLOCK_MONOTONIC`` (``CLOCK``'s clock) watched by the event loop:
    ``arm(when)`` makes it readable at the absolute time ``when`` to the microsecond, where a
    loop timer fires on a whole millisecond (uvloop) and so up to 1-2 ms after its time.
    ``TimerFd.create`` returns None where there is no timerfd (not Linux, no libc)."""

    _CLOCK_MONOTONIC, _TFD_TIMER_ABSTIME = 1, 1
    _TFD_CLOEXEC, _TFD_NONBLOCK = 0o2000000, 0o4000
    _libc = None

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int, callback: Callable[[], None]):
        self.loop, self.fd, self.callback = loop, fd, callback
        self._spec = _Itimerspec()
        loop.add_reader(fd, self._readable)

    @classmethod
    def create(
        cls, loop: asyncio.AbstractEventLoop, callback: Callable[[], None]
    ) -> TimerFd | None:
        if not sys.platform.startswith("linux"):
            return None
        try:
            if cls._libc is None:
                cls._libc = ctypes.CDLL(None, use_errno=True)
            fd = cls._libc.timerfd_create(
                cls._CLOCK_MONOTONIC, cls._TFD_CLOEXEC | cls._TFD_NONBLOCK
            )
        except (OSError, AttributeError):
            return None
        if fd < 0:
            return None
        try:
            return cls(loop, fd, callback)
        except Exception:
            os.close(fd)
            return None

    def arm(self, when: float) -> None:
        """Fire at ``CLOCK()`` time ``when`` (at once if it has passed)."""
        ns = max(int(when * 1e9), 1)
        value = self._spec.it_value
        value.tv_sec, value.tv_nsec = divmod(ns, 1_000_000_000)
        if (
            self._libc.timerfd_settime(
                self.fd, self._TFD_TIMER_ABSTIME, ctypes.byref(self._spec), None
            )
            != 0
        ):
            raise OSError(ctypes.get_errno(), "timerfd_settime failed")

    def _readable(self) -> None:
        try:
            os.read(self.fd, 8)
        except BlockingIOError:  # disarmed or re-armed after it became readable
            return
        self.callback()

    def close(self) -> None:
        if self.fd >= 0:
            if not self.loop.is_closed():
                self.loop.remove_reader(self.fd)
            os.close(self.fd)
            self.fd = -1


class Pacer:
    """Wakes every paced wait of one event loop from a single timer.

    ``wait(due)`` returns a future that resolves (with the ``CLOCK`` time it fired) once
    ``CLOCK()`` has reached ``due``, never before. The pending waits are a heap; one loop timer
    is armed for the earliest, at least ``MIN_TIMER_S`` ahead (uvloop rounds a shorter delay
    down to 0 ms and would fire at once, over and over), and when it fires it resolves every
    wait that is due and arms itself for the next. So the loop runs about one timer callback
    per millisecond however many sessions wait, instead of one (or two, when a timer fires
    early) per packet. A wait whose task was cancelled stays in the heap until its time and
    is then dropped. With ``precise`` (the loop of ``run``) the timer is a ``TimerFd`` armed
    for the earliest wait exactly (no whole-millisecond rounding, no minimum delay); ``close``
    releases it.
    """

    MIN_TIMER_S = 0.001

    def __init__(self, loop: asyncio.AbstractEventLoop, precise: bool = False):
        self.loop = loop
        self._heap: list[tuple[float, int, asyncio.Future[float]]] = []
        self._order = itertools.count()  # ties keep their arrival order (futures do not compare)
        self._timer: asyncio.TimerHandle | None = None
        self._fires_at = math.inf  # when the armed timer fires
        self._fd = TimerFd.create(loop, self._on_timer) if precise else None

    def wait(self, due: float) -> asyncio.Future[float]:
        future: asyncio.Future[float] = self.loop.create_future()
        now = CLOCK()
        if now >= due:
            future.set_result(now)
            return future
        heapq.heappush(self._heap, (due, next(self._order), future))
        soonest = due if self._fd is not None else max(due, now + self.MIN_TIMER_S)
        if soonest < self._fires_at:  # re-armed only to fire sooner
            self._arm(now)
        return future

    def _arm(self, now: float) -> None:
        if self._fd is not None:
            self._fires_at = self._heap[0][0]
            self._fd.arm(self._fires_at)
            return
        if self._timer is not None:
            self._timer.cancel()
        delay = max(self._heap[0][0] - now, self.MIN_TIMER_S)
        self._fires_at = now + delay
        self._timer = self.loop.call_later(delay, self._fire)

    def _on_timer(self) -> None:
        self._fire()

    def _fire(self) -> None:
        self._timer, self._fires_at = None, math.inf
        now, heap = CLOCK(), self._heap
        while heap and heap[0][0] <= now:
            future = heapq.heappop(heap)[2]
            if not future.done():
                future.set_result(now)
        if heap:
            self._arm(now)

    def __len__(self) -> int:
        return len(self._heap)

    def close(self) -> None:
        if self._fd is not None:
            self._fd.close()
            self._fd = None


_PACERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Pacer] = weakref.WeakKeyDictionary()


def loop_local(
    registry: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, T],
    factory: Callable[[asyncio.AbstractEventLoop], T],
) -> T:
    """The running loop's entry of ``registry``, made by ``factory(loop)`` on first use."""
    loop = asyncio.get_running_loop()
    found = registry.get(loop)
    if found is None:
        found = registry[loop] = factory(loop)
    return found


def pacer() -> Pacer:
    """The running loop's pacer (created on first use)."""
    return loop_local(_PACERS, Pacer)


async def sleep_until(due: float) -> float:
    """Sleep until ``CLOCK()`` reaches ``due`` on the loop's ``Pacer`` (never waking before
    it); returns the time the caller resumed."""
    if CLOCK() < due:
        await pacer().wait(due)
    return CLOCK()


async def paced_sleep(delay: float) -> None:
    """``asyncio.sleep`` on the loop's ``Pacer``: the ``sleep`` that ``send_paced`` takes."""
    await sleep_until(CLOCK() + delay)
