"""Fault injection for benchmarks/faults.py and tests/runs/test_kill.py, put on PYTHONPATH as
sitecustomize so that fdb itself carries no fault hooks. It acts only in the process whose
parent's pid is FDB_FAULT_PARENT (the phase the battery started, not a server that one starts).

- FDB_FAULT_COUNT=FILE: write the number of os.replace calls to FILE at exit (a reference run);
- FDB_FAULT_AT=k, FDB_FAULT_WHEN=before|after: SIGKILL this process right before or right after
  its k-th os.replace (the commit of an atomic write).
"""

import atexit
import os
import signal

_real = os.replace
_n = [0]
_at = int(os.environ.get("FDB_FAULT_AT") or 0)
_when = os.environ.get("FDB_FAULT_WHEN", "before")
_count = os.environ.get("FDB_FAULT_COUNT")
if os.getppid() != int(
    os.environ.get("FDB_FAULT_PARENT") or -1
):  # only the phase itself, not a server it starts
    _at, _count = 0, None


def _replace(src, dst, *args, **kwargs):
    _n[0] += 1
    if _n[0] == _at and _when == "before":
        os.kill(os.getpid(), signal.SIGKILL)
    result = _real(src, dst, *args, **kwargs)
    if _n[0] == _at and _when == "after":
        os.kill(os.getpid(), signal.SIGKILL)
    return result


def _write_count() -> None:
    with open(_count, "w") as handle:
        handle.write(str(_n[0]))


os.replace = _replace
if _count:
    atexit.register(_write_count)
