"""The recorder's event loop and clock.

Recording runs on uvloop where it is installed (a core dependency on Linux and macOS): its C
transports and scheduler cut the per-message cost of the stock asyncio loop, which is what limits
how many paced sessions one process holds (``benchmarks/recorder_capacity.py``). Set
``FDB_EVENT_LOOP=asyncio`` to use the stock loop instead.

Every recorder time (trace rows, packet slots, loop lag) is read from ``CLOCK`` =
``time.monotonic``, the stock loop's own clock: uvloop's ``loop.time()`` counts whole
milliseconds, too coarse for packet lateness.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
CLOCK = time.monotonic


def loop_factory() -> asyncio.AbstractEventLoop:
    if os.environ.get("FDB_EVENT_LOOP", "").lower() != "asyncio":
        try:
            import uvloop
        except ImportError:
            pass
        else:
            return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def run(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on the recorder's loop."""
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(coro)


async def sleep_until(due: float) -> float:
    """Sleep until ``CLOCK()`` reaches ``due`` (a timer may fire up to half a millisecond
    early on uvloop, so this sleeps again for the rest); returns the time it woke."""
    now = CLOCK()
    while now < due:
        await asyncio.sleep(due - now)
        now = CLOCK()
    return now
