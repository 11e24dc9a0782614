"""A server that fdb started dies with the process that started it.

``runs.server.ManagedServer`` puts its own pid in ``FDB_PARENT_PID``; the server then checks
twice a second that this process is still its parent. When it is gone (killed with -9, a crashed
phase), the server shuts down as on SIGTERM (services stopped, port released), and exits at once
if that has not finished within ``grace_s``. A server started by hand has no such variable and is
never watched."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

log = logging.getLogger("fdb.server")
PARENT_ENV = "FDB_PARENT_PID"


def parent_gone(expected: int) -> bool:
    return os.getppid() != expected


def watch_parent(
    stop: Callable[[], None],
    *,
    interval_s: float = 0.5,
    grace_s: float = 20.0,
    env: dict[str, str] | None = None,
) -> threading.Thread | None:
    """Start the watchdog when the environment names a parent; returns its thread (or None)."""
    value = (env if env is not None else os.environ).get(PARENT_ENV)
    if not value or not value.isdigit():
        return None
    expected = int(value)

    def run() -> None:
        while not parent_gone(expected):
            time.sleep(interval_s)
        log.error("the process that started this server (pid %d) is gone: shutting down", expected)
        stop()
        time.sleep(grace_s)
        log.error("shutdown took over %.0f s: exiting now", grace_s)
        os._exit(1)

    thread = threading.Thread(target=run, name="parent-watchdog", daemon=True)
    thread.start()
    return thread
