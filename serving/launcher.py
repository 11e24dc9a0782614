"""Starting a server: ``serve()`` is what ``python -m fdb serve`` calls.

Order: resolve the system (registry name or ``--config launch.yaml``), bind the port (a busy
port fails here, before any model loads), check that every backend package is installed (a
missing one raises :class:`fdb.errors.MissingExtraError`), then run uvicorn on the bound socket.
Models load in the background; ``/health`` answers 503 until they are ready, and the line
``fdb server ready on http://HOST:PORT (system NAME)`` is logged once they are. If loading
fails, the server stops and ``serve()`` raises the loading error.

Once the models are ready, what loading made (hundreds of thousands of objects: the models'
modules) is frozen out of the garbage collector's reach (:func:`freeze_loaded_objects`), and a
collection that holds every thread for ``GC_PAUSE_LOG_MS`` or more is logged as a warning
(:class:`GcPauses`). With ``FDB_STACK_SAMPLES=FILE`` every thread's stack is sampled into FILE
(:mod:`serving.stack_samples`); ``FDB_SWITCH_INTERVAL_MS`` sets the interpreter's thread
switch interval (:func:`switch_interval`).

A launch file's ``services`` start (or are reused) after the dependency check and before
uvicorn runs (:mod:`serving.services`); the models' loading then probes the service nodes. A
started service that exits stops the server, and stopping the server stops the services it
started.
"""

from __future__ import annotations

import errno
import gc
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import uvicorn

from fdb.errors import FdbError
from serving.app import create_app
from serving.launch_profiles import service_port_clash
from serving.models import check_dependencies
from serving.services import Services
from serving.stack_samples import start_from_env as sample_stacks
from serving.systems import resolve_system
from serving.watchdog import watch_parent

log = logging.getLogger("fdb.serving")
PORT_SEARCH = 100
GC_PAUSE_LOG_MS = 50.0  # a garbage collection at least this long is logged


class GcPauses:
    """A ``gc.callbacks`` entry: each collection that held every thread of the server for
    ``threshold_ms`` or more is logged (its generation, length and what it collected); the
    longest so far is ``longest_ms``."""

    def __init__(self, threshold_ms: float = GC_PAUSE_LOG_MS):
        self.threshold_ms, self.longest_ms = threshold_ms, 0.0
        self._started: float | None = None

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        if self._started is None:
            return
        ms, self._started = (time.perf_counter() - self._started) * 1000, None
        self.longest_ms = max(self.longest_ms, ms)
        if ms >= self.threshold_ms:
            log.warning(
                "garbage collection (generation %d) held every thread for %.0f ms "
                "(%d objects collected)",
                info.get("generation", -1),
                ms,
                info.get("collected", 0),
            )


def freeze_loaded_objects() -> int:
    """Every object alive now (after loading: the models' modules and their Python state,
    hundreds of thousands of objects for the GPU cascade's models, whose full collection takes a
    noticeable pause: docs/gpu.md counts and times them) moved to the collector's permanent
    generation (``gc.freeze``, as SGLang and
    vLLM do after start-up), so that no later full collection walks them while sessions wait;
    returns how many. ``FDB_GC_FREEZE=0`` skips it (the A/B of docs/gpu.md)."""
    if os.environ.get("FDB_GC_FREEZE") == "0":
        return 0
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def switch_interval() -> float:
    """The interpreter's thread switch interval, set from ``FDB_SWITCH_INTERVAL_MS`` when given
    (``sys.setswitchinterval``; Python's default is 5 ms: a thread that asks for the GIL waits
    that long before the holder is made to drop it, so a GPU engine's thread, which gives the
    GIL back at every kernel it waits for, can lose up to that much per wait while the event
    loop and the VAD threads run); returns the interval in force, in ms."""
    value = os.environ.get("FDB_SWITCH_INTERVAL_MS")
    if value:
        try:
            sys.setswitchinterval(float(value) / 1000)
        except ValueError as exc:
            raise FdbError(
                f"FDB_SWITCH_INTERVAL_MS={value!r} is not a positive number of milliseconds",
                "set it to e.g. 0.5, or unset it for Python's default (5 ms)",
            ) from exc
    return sys.getswitchinterval() * 1000


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does
        sock.bind((host, port))
    except BaseException:
        sock.close()
        raise
    return sock


def open_port(host: str, port: int, next_free_port: bool = False) -> socket.socket:
    """A socket bound to ``host:port`` (not yet listening). A busy port raises FdbError, or,
    with ``next_free_port``, the next free port above it is taken and logged."""
    last = port + (PORT_SEARCH if next_free_port else 0)
    for candidate in range(port, min(last, 65535) + 1):
        try:
            sock = _bind(host, candidate)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                continue
            raise FdbError(
                f"cannot bind {host}:{candidate} ({exc.strerror})", "pass another --host or --port"
            ) from exc
        if candidate != port:
            log.info("port %d on %s is in use. Using port %d instead", port, host, candidate)
        return sock
    if next_free_port:
        raise FdbError(
            f"ports {port}-{last} on {host} are all in use", "stop other servers or pass --port"
        )
    raise FdbError(
        f"port {port} on {host} is already in use", "stop the other server or pass --port"
    )


class _DenialNoise(logging.Filter):
    """uvicorn's sans-I/O WebSocket protocol logs "ASGI callable returned without completing
    handshake." after every upgrade refused with an HTTP response (our 503s); the refusal is
    already logged as such, so that line is noise."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "returned without completing handshake" not in record.getMessage()


class _ClientUtf8Noise(logging.Filter):
    """uvicorn logs a client's text frame that is not UTF-8 with a full traceback (it then
    closes the connection with 1007, as RFC 6455 has it): a client's fault, one warning line."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage().startswith("Invalid UTF-8 sequence received from client"):
            record.msg, record.args = (
                "a client sent a text frame that is not UTF-8: closed with 1007",
                (),
            )
            record.exc_info = record.exc_text = None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


def _setup_logging(level: str) -> None:
    logger = logging.getLogger("fdb")
    logger.setLevel(level.upper())
    if not logger.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s:     %(message)s"))
        logger.addHandler(handler)
    logging.getLogger("uvicorn.error").addFilter(_DenialNoise())
    logging.getLogger("uvicorn.error").addFilter(_ClientUtf8Noise())


def _terminated(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _hung_up(signum: int, frame: object) -> None:
    """SIGHUP stops the server as SIGTERM does (uvicorn's graceful shutdown, then the services)."""
    os.kill(os.getpid(), signal.SIGTERM)


def serve(
    system: str = "embedded-cascade",
    host: str = "127.0.0.1",
    port: int = 8097,
    config: Path | None = None,
    next_free_port: bool = False,
    log_level: str = "info",
    overrides: Sequence[tuple[str, Any]] = (),
    profile: str | None = None,
) -> None:
    """Serve ``system`` on ``host:port`` until interrupted (blocking); ``overrides`` are the
    command line's (path, value) pairs (``serving.overrides``), ``profile`` a shipped launch
    profile's name (``serving.launch_profiles``)."""

    _setup_logging(log_level)
    resolved = resolve_system(system, config, overrides, profile)
    clash = service_port_clash(resolved, port)
    if clash is not None:
        raise FdbError(
            f"--port {port} is also the port of service '{clash}'", "pass another --port"
        )
    sock = open_port(host, port, next_free_port)
    services = Services(resolved.services)
    try:
        check_dependencies(resolved)
        services.start()
    except BaseException:
        sock.close()
        raise
    try:
        interval_ms = switch_interval()
    except BaseException:
        sock.close()
        services.stop()
        raise
    bound_port = sock.getsockname()[1]
    failure: list[BaseException] = []
    server: uvicorn.Server | None = None

    def ready() -> None:
        frozen = freeze_loaded_objects()
        log.info("garbage collector: %d objects of loading frozen", frozen)
        log.info("thread switch interval %.2f ms", interval_ms)
        log.info("fdb server ready on http://%s:%d (system %s)", host, bound_port, resolved.name)

    def failed(error: BaseException) -> None:
        failure.append(error)
        if server is not None:
            server.should_exit = True

    def service_exited(error: BaseException) -> None:  # from the watcher's thread
        log.error("%s", error)
        failed(error)

    app = create_app(resolved, on_ready=ready, on_failure=failed)
    server = uvicorn.Server(
        uvicorn.Config(app, log_level=log_level.lower(), ws_per_message_deflate=False)
    )
    services.watch(service_exited)

    def orphaned() -> None:
        server.should_exit = True

    watch_parent(orphaned)
    if services.started and threading.current_thread() is threading.main_thread():
        # uvicorn shuts down gracefully on SIGTERM and then raises the signal again with the
        # handler found before it ran; with the default one the process died there, before the
        # finally below, and the services it started kept running (and their ports). This
        # handler turns that last SIGTERM into the same KeyboardInterrupt as Ctrl-C. uvicorn
        # does not handle SIGHUP, whose default ends the process at once: it becomes a SIGTERM.
        signal.signal(signal.SIGTERM, _terminated)
        signal.signal(signal.SIGHUP, _hung_up)
    pauses = GcPauses()  # the models load while the server runs: their collections count too
    gc.callbacks.append(pauses)
    sampler = sample_stacks()  # FDB_STACK_SAMPLES=FILE: every thread's stack, for stalls
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:  # uvicorn re-raises Ctrl-C after its graceful shutdown
        log.info("fdb server on port %d stopped", bound_port)
    finally:
        sock.close()
        services.stop()
        gc.callbacks.remove(pauses)
        if sampler is not None:
            sampler.stop()
    if failure:
        raise failure[0]
