"""The recorder's own event-loop lag, measured by one ticker task per event loop.

A ticker sleeps ``interval`` and records how late it woke up. Every session in the loop shares
the ticker (a per-session ticker would itself load the loop at high concurrency); a session
takes the samples between its start and its end. A lag beyond the pacing tolerance while the input
is being sent means this process fell behind its own schedule (``client_behind``), so the
session's pacing violations are the load generator's, not the server's.
"""

from __future__ import annotations

import asyncio
import gc
import weakref
from array import array
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from fdb.session_records import LoopLagStats
from recorders.eventloop import CLOCK, loop_local

TICK_S = 0.02

# numpy imports numpy.ma on the first np.percentile (through np.unique): a stall of the loop
# that paces every session, at the first session's end (measured:
# docs/benchmarks.md#recorder-finisher). Import it with this module instead.
np.percentile(np.zeros(2), 99)


@dataclass(frozen=True)
class LagSamples:
    """One session's ticker samples as plain data (it pickles to the finisher process).

    ``LoopMonitor.release`` only copies the session's slice of the ticks: working out the
    statistics in the paced loop cost it time for every session (measured:
    docs/benchmarks.md#recorder-finisher), and the ends of hundreds of sessions fall between other
    sessions' packets. ``stats`` is called where the session is finished."""

    interval: float
    tolerance_ms: float
    window: tuple[float, float] | None  # loop times of the input being sent
    lags: array  # lag in seconds per tick
    times: array  # loop time of each tick's wake-up

    def stats(self) -> LoopLagStats:
        """Lag over the session's ticks; ``client_behind`` counts only ticks inside ``window``,
        where lag can delay packets."""
        lags = np.frombuffer(self.lags, dtype=np.float64) * 1000.0
        times = np.frombuffer(self.times, dtype=np.float64)
        interval_ms, tolerance_ms, window = self.interval * 1000.0, self.tolerance_ms, self.window
        if len(lags) == 0:
            return LoopLagStats(interval_ms=interval_ms)
        over = int((lags > tolerance_ms).sum())
        inside = (
            np.ones(len(lags), bool)
            if window is None
            else (times >= window[0]) & (times <= window[1] + tolerance_ms / 1000)
        )
        behind = bool(((lags > tolerance_ms) & inside).any())
        return LoopLagStats(
            interval_ms=interval_ms,
            ticks=len(lags),
            max_ms=round(float(lags.max()), 3),
            p99_ms=round(float(np.percentile(lags, 99)), 3),
            mean_ms=round(float(lags.mean()), 3),
            over_tolerance=over,
            client_behind=behind,
        )


class LoopMonitor:
    """Shared ticker of one event loop; ``acquire`` / ``release`` count the sessions using it."""

    def __init__(self, loop: asyncio.AbstractEventLoop, interval: float = TICK_S):
        self.loop, self.interval = loop, interval
        self.lags = array("d")  # lag in seconds per tick (untracked by the GC)
        self.times = array("d")  # loop time of each tick's wake-up
        self.base = 0  # index of lags[0] in the ever-growing tick count
        self.users = 0
        self.task: asyncio.Task | None = None

    def acquire(self) -> int:
        self.users += 1
        if self.task is None:
            self.task = self.loop.create_task(self._tick())
        return self.base + len(self.lags)

    def release(
        self, start: int, tolerance_ms: float, window: tuple[float, float] | None = None
    ) -> LagSamples:
        """The session's samples (from tick ``start`` on) and its window; the statistics are
        computed from them later, off the paced loop (``LagSamples.stats``)."""
        first = max(0, start - self.base)
        samples = LagSamples(
            self.interval, tolerance_ms, window, self.lags[first:], self.times[first:]
        )
        self.users -= 1
        if self.users == 0 and self.task is not None:
            self.task.cancel()
            self.task = None
            self.base += len(self.lags)
            self.lags, self.times = array("d"), array("d")
        return samples

    async def _tick(self) -> None:
        interval = self.interval
        while True:
            due = CLOCK() + interval
            await asyncio.sleep(interval)
            now = CLOCK()
            self.lags.append(max(0.0, now - due))
            self.times.append(now)
            gc_valve()


_MONITORS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopMonitor] = (
    weakref.WeakKeyDictionary()
)


def monitor() -> LoopMonitor:
    """The running loop's monitor (created on first use)."""
    return loop_local(_MONITORS, LoopMonitor)


# The cyclic garbage collector is off while sessions are paced. A collection stops the loop that
# sends every session's packets: a full one walks every tracked object of the process, and even
# the young-generation passes that stayed on in an earlier design took milliseconds each while a
# batch was opening its sessions (measured: docs/benchmarks.md#recorder-gc). A
# recording makes no reference cycles of its own: with the collector off, a batch left no
# unreachable objects for ``gc.collect`` to find. What exists before
# the sessions is collected once and frozen (never scanned again); objects freed by reference
# counting are freed as always. A safety valve runs a collection (and freezes again) if the
# tracked objects made since the last one exceed GC_VALVE (far above a batch's own peak):
# some unforeseen path that makes cycles cannot grow the process without bound.
GC_VALVE = 1_000_000
_paced_users = 0
_was_enabled = True


@contextmanager
def paced_gc() -> Iterator[None]:
    """No garbage-collector pauses while paced sessions run (nestable); see ``gc_valve``."""
    global _paced_users, _was_enabled
    if _paced_users == 0:
        gc.collect()
        gc.freeze()
        _was_enabled = gc.isenabled()
        gc.disable()
    _paced_users += 1
    try:
        yield
    finally:
        _paced_users -= 1
        if _paced_users == 0:
            gc.unfreeze()
            if _was_enabled:
                gc.enable()


def gc_valve() -> bool:
    """While ``paced_gc`` holds the collector off: collect and freeze again once more than
    GC_VALVE tracked objects were made since the last collection. Returns whether it ran
    (the loop monitor's ticker calls it on every tick)."""
    if _paced_users and gc.get_count()[0] > GC_VALVE:
        gc.collect()
        gc.freeze()
        return True
    return False
