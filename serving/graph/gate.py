"""The compute gate: one server's model calls share the CPU cores by priority, not by the OS's
time slices.

Without it, every session's recognitions, reply tokens and syntheses run at once, each on its
own threads, and the cores are shared evenly: with 4 sessions whose turns end together on 2
cores, each turn's first audio waits for nearly all four turns' work (processor sharing). The
gate lets at most ``slots`` calls compute at once (one per core, each call on one thread) and
hands a freed slot to the waiting call of the highest priority, among equals to the one whose
work began first (a reply's token steps carry the reply's start, so the reply that began first
gets through to its first chunk first instead of every reply sharing the cores step by step):

=============  ===========================================================================
FIRST_AUDIO    the synthesis of a reply's first chunk (its audio is what the user waits for)
FIRST_TEXT     a reply's tokens until its first speakable chunk
TRANSCRIBE     a turn's transcription
REST           everything after a reply's first chunk: later tokens and chunks, whose audio
               has the first chunk's playing time to follow
=============  ===========================================================================

A work that finished ahead of its turn therefore waits only for work nearer to the user's ear.
``reserved`` slots never go to REST work: a first chunk then finds a core within one token
step, instead of waiting behind long syntheses of later chunks that cannot be stopped midway.
With one of 2 slots reserved on 2 cores, the first audio after the speech end comes sooner at
4 sessions while replies are still made faster than real time (measured:
docs/benchmarks.md#compute-gate).
A call may name a ``resource`` that serves one call at a time (a model with a lock of its
own, such as the recognizer or the voice): the gate then starts it only when that resource is
free, so no slot is held by a call that waits for another call's lock.

Calls hold a slot only while they compute: a reply's token stream takes one per token, so it
never holds a slot while it waits for a free LLM context or for its first chunk's synthesis.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

T = TypeVar("T")
FIRST_AUDIO, FIRST_TEXT, TRANSCRIBE, REST = 0, 1, 2, 3
PRIORITY_NAMES = {
    FIRST_AUDIO: "first_audio",
    FIRST_TEXT: "first_text",
    TRANSCRIBE: "transcribe",
    REST: "rest",
}


@dataclass(order=True)
class _Waiter:
    priority: int
    since: float  # the call's (or its whole work's) start: the earlier first among equals
    seq: int
    resource: str | None = field(compare=False)
    ready: threading.Event = field(compare=False, default_factory=threading.Event)


class ComputeGate:
    """At most ``slots`` calls at once, by priority (see the module's docstring)."""

    def __init__(self, slots: int, reserved: int = 0):
        if slots < 1:
            raise ValueError(f"a compute gate needs at least one slot, got {slots}")
        if not 0 <= reserved < slots:
            raise ValueError(
                f"reserved slots must be from 0 to slots - 1, got {reserved} of {slots}"
            )
        self.slots, self.reserved = slots, reserved
        self._lock = threading.Lock()
        self._busy = 0
        self._held: set[str] = set()  # resources in use
        self._waiting: list[_Waiter] = []
        self._seq = itertools.count()
        self.calls = dict.fromkeys(PRIORITY_NAMES.values(), 0)  # calls started, per priority

    def _dispatch(self) -> None:
        """Start waiting calls while slots are free: the best first whose resource is free."""
        while self._busy < self.slots and self._waiting:
            runnable = [
                w
                for w in self._waiting
                if (w.resource is None or w.resource not in self._held)
                and (w.priority != REST or self._busy < self.slots - self.reserved)
            ]
            if not runnable:
                return
            best = min(runnable)
            self._waiting.remove(best)
            self._busy += 1
            if best.resource is not None:
                self._held.add(best.resource)
            self.calls[PRIORITY_NAMES[best.priority]] += 1
            best.ready.set()

    def acquire(
        self, priority: int, resource: str | None = None, since: float | None = None
    ) -> None:
        """Block until this call may compute (a blocking call: from a worker thread only).
        ``since``: when the work this call belongs to began (``time.monotonic()``; default now),
        so that the steps of a reply queue by the reply's start, not each step's."""
        if priority not in PRIORITY_NAMES:
            raise ValueError(f"unknown priority {priority}")
        waiter = _Waiter(
            priority, time.monotonic() if since is None else since, next(self._seq), resource
        )
        with self._lock:
            self._waiting.append(waiter)
            self._dispatch()
        waiter.ready.wait()

    def release(self, resource: str | None = None) -> None:
        with self._lock:
            self._busy -= 1
            self._held.discard(resource)
            self._dispatch()

    def call(
        self,
        priority: int,
        fn: Callable[..., T],
        *args,
        resource: str | None = None,
        since: float | None = None,
    ) -> T:
        """``fn(*args)`` once the gate lets it compute (``since``: see :meth:`acquire`)."""
        self.acquire(priority, resource, since)
        try:
            return fn(*args)
        finally:
            self.release(resource)
