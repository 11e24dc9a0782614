"""Where every thread of the server is, sampled: a diagnosis aid for stalls (docs/gpu.md).

With ``FDB_STACK_SAMPLES=FILE`` in the server's environment, :class:`StackSampler` wakes every
``interval_s`` (20 ms) and appends one JSON line per live thread to FILE: ``t`` (wall clock s),
``thread`` (its name), ``late_ms`` (how much later than asked the sampler woke: it needs the GIL,
so a long lateness is a stretch in which some thread held it) and ``stack`` (its innermost
``DEPTH`` frames, innermost first, as ``file:line function``). A thread whose stack is the same
as at its last sample gets ``"same": true`` in place of its stack, so a long wait costs a few
bytes a sample. ``benchmarks/stack_samples.py FILE --from T0 --to T1`` prints, per thread, where
it spent a stretch of time.

Nothing is sampled without the variable (the default). Written by hand: py-spy would need
ptrace rights that a container may not grant and a binary the GPU machine lacks.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

ENV = "FDB_STACK_SAMPLES"
DEPTH = 10


def frames(frame, depth: int = DEPTH) -> list[str]:
    """A frame's innermost ``depth`` frames as ``file:line function``, innermost first."""
    out = []
    while frame is not None and len(out) < depth:
        code = frame.f_code
        out.append(f"{Path(code.co_filename).name}:{frame.f_lineno} {code.co_name}")
        frame = frame.f_back
    return out


class StackSampler(threading.Thread):
    """Appends every thread's stack to ``path`` each ``interval_s`` until :meth:`stop`."""

    def __init__(self, path: str | os.PathLike, interval_s: float = 0.02):
        super().__init__(name="fdb-stack-sampler", daemon=True)
        self.path, self.interval_s = Path(path), interval_s
        self._stop_event = threading.Event()
        self._last: dict[int, list[str]] = {}

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=1.0)

    def run(self) -> None:
        with self.path.open("a", encoding="utf-8") as out:
            due = time.perf_counter()
            while not self._stop_event.is_set():
                due += self.interval_s
                wait = due - time.perf_counter()
                if wait > 0 and self._stop_event.wait(wait):
                    break
                late_ms = round(max(0.0, time.perf_counter() - due) * 1000, 1)
                due = max(due, time.perf_counter())  # a late wake does not sample in a burst
                self._sample(out, late_ms)
                out.flush()

    def _sample(self, out, late_ms: float) -> None:
        now = round(time.time(), 4)
        names = {t.ident: t.name for t in threading.enumerate()}
        for ident, frame in sys._current_frames().items():
            if ident == self.ident:
                continue
            stack = frames(frame)
            line = {"t": now, "thread": names.get(ident, str(ident)), "late_ms": late_ms}
            if self._last.get(ident) == stack:
                line["same"] = True
            else:
                line["stack"] = stack
                self._last[ident] = stack
            out.write(json.dumps(line) + "\n")


def start_from_env() -> StackSampler | None:
    """A running sampler when ``FDB_STACK_SAMPLES`` names a file, else None."""
    path = os.environ.get(ENV)
    if not path:
        return None
    sampler = StackSampler(path)
    sampler.start()
    return sampler
