"""The ``services`` of a launch file: processes the server starts, waits for and stops.

Each entry is started in the order listed, before the models load. Whether a service answers
is its ``health``: ``models`` (the default: ``GET http://127.0.0.1:<port>/v1/models`` answers
200), a path such as ``/health`` (``GET`` of that path answers 2xx), or ``port`` (the port
accepts a TCP connection). A service that already answers is reused (``service 'tts' already
serving on :8105``) and left running when the server stops. Otherwise ``command`` runs with the
server's environment plus ``env``, in the directory the server was started from, in a process
group of its own; the check is repeated every second for up to 600 s (sooner at first: after
0.1, 0.2 and 0.4 s, so a service that is up at once is not waited on for a second). A service
that exits first fails the start with ``service '<name>' exited with code <n> before :<port>
answered``, one that does not answer in time with ``service '<name>' did not answer on :<port>
within 600 s`` and what the last check saw. A started service whose ``models`` check gets 404 or
405 (it has no model list) fails at once, naming ``health: port`` or a path as the fix.

While the server runs, a started service that exits stops the server (``service '<name>' exited
with code <n>``). Stopping sends SIGTERM to every started service's process group and SIGKILL to
any still running 15 s later. The server stops its services on SIGTERM as on Ctrl-C
(``serving.launcher``), and a server killed with -9 takes them along: each started service gets
SIGTERM from the kernel when the server process dies (Linux's parent-death signal).
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx
from pydantic import BaseModel, ConfigDict, Field

from fdb.errors import FdbError

log = logging.getLogger("fdb.serving")


class ServiceEntry(BaseModel):
    """One ``services`` entry."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    command: list[str] = Field(min_length=1)  # argv, no shell
    port: int = Field(ge=1, le=65535)
    env: dict[str, str] = {}
    health: str = Field("models", pattern=r"^(models|port|/\S*)$")  # models | port | /a/path


def check(port: int, health: str = "models", timeout_s: float = 2.0) -> tuple[bool, str]:
    """(answers, what the check saw) for ``health`` on ``127.0.0.1:<port>`` (see the module's
    text)."""

    if health == "port":
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=timeout_s):
                return True, "the port accepts connections"
        except OSError as exc:
            return False, f"no connection ({exc.strerror or type(exc).__name__})"
    path = "/v1/models" if health == "models" else health
    try:
        code = httpx.get(f"http://127.0.0.1:{port}{path}", timeout=timeout_s).status_code
    except httpx.HTTPError as exc:
        return False, f"GET {path}: {type(exc).__name__}"
    return (code == 200 if health == "models" else 200 <= code < 300), f"GET {path} answered {code}"


def answers(port: int, timeout_s: float = 2.0, health: str = "models") -> bool:
    """Whether the service on ``port`` passes its ``health`` check (default: /v1/models answers
    200)."""
    return check(port, health, timeout_s)[0]


@dataclass
class _Started:
    entry: ServiceEntry
    process: subprocess.Popen


class Services:
    """Starts, watches and stops the services of one server (all methods are blocking)."""

    def __init__(
        self,
        entries: list[ServiceEntry],
        poll_s: float = 1.0,
        ready_timeout_s: float = 600.0,
        stop_grace_s: float = 15.0,
    ) -> None:
        self._entries = list(entries)
        self._poll_s = poll_s
        self._ready_timeout_s = ready_timeout_s
        self._stop_grace_s = stop_grace_s
        self.started: list[_Started] = []
        self._stopping = threading.Event()

    def start(self) -> None:
        """Start (or reuse) every service in order; on a failure the ones started are stopped.
        A SIGTERM or SIGHUP meanwhile (in the main thread) stops them too, as Ctrl-C does, then
        raises KeyboardInterrupt."""
        main = threading.current_thread() is threading.main_thread()
        previous = (
            {sig: signal.signal(sig, _interrupt) for sig in STOP_SIGNALS}
            if main and self._entries
            else {}
        )
        try:
            for entry in self._entries:
                self._start_one(entry)
        except BaseException:
            self.stop()
            raise
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _start_one(self, entry: ServiceEntry) -> None:
        if answers(entry.port, health=entry.health):
            log.info("service '%s' already serving on :%d", entry.name, entry.port)
            return
        log.info("starting service '%s' on :%d", entry.name, entry.port)
        main = threading.current_thread() is threading.main_thread()
        try:
            process = subprocess.Popen(
                entry.command,
                env={**os.environ, **entry.env},
                start_new_session=True,
                preexec_fn=_die_with(os.getpid()) if main else None,
            )
        except OSError as exc:
            raise FdbError(
                f"service '{entry.name}' could not start: {exc.strerror}: {entry.command[0]}",
                "fix the service's command in the launch file",
            ) from exc
        self.started.append(_Started(entry, process))
        deadline = time.monotonic() + self._ready_timeout_s
        pause = min(0.1, self._poll_s)
        change = f"services.{entry.name}.health (models, port or a path such as /health)"
        while True:
            if process.poll() is not None:
                raise FdbError(
                    f"service '{entry.name}' exited with code {process.returncode} "
                    f"before :{entry.port} answered",
                    "run its command by hand to see why",
                )
            ready, seen = check(entry.port, entry.health)
            if ready:
                log.info("service '%s' ready on :%d", entry.name, entry.port)
                return
            if entry.health == "models" and seen.endswith((" 404", " 405")):
                raise FdbError(
                    f"service '{entry.name}' answers on :{entry.port} but {seen}: it has no model "
                    "list",
                    f"set {change} in the launch file, e.g. health: port",
                )
            if time.monotonic() >= deadline:
                raise FdbError(
                    f"service '{entry.name}' did not answer on :{entry.port} within "
                    f"{self._ready_timeout_s:g} s (health {entry.health}: {seen})",
                    f"check its command, port and log, or {change}",
                )
            time.sleep(pause)
            pause = min(2 * pause, self._poll_s)

    def watch(
        self, on_exit: Callable[[BaseException], None], poll_s: float = 0.5
    ) -> threading.Thread:
        """Call ``on_exit(error)`` (from a daemon thread) once a started service exits on its
        own."""

        def work() -> None:
            while not self._stopping.wait(poll_s):
                for item in self.started:
                    code = item.process.poll()
                    if code is not None:
                        on_exit(
                            FdbError(
                                f"service '{item.entry.name}' exited with code {code}",
                                "the server stopped with it; see the service's log",
                            )
                        )
                        return

        thread = threading.Thread(target=work, name="fdb-services-watch", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        """SIGTERM to every started service (last first), SIGKILL after the grace period."""
        self._stopping.set()
        running = [item for item in reversed(self.started) if item.process.poll() is None]
        for item in running:
            log.info("stopping service '%s'", item.entry.name)
            _signal(item.process, signal.SIGTERM)
        deadline = time.monotonic() + self._stop_grace_s
        for item in running:
            try:
                item.process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("service '%s' ignored SIGTERM; killing it", item.entry.name)
                _signal(item.process, signal.SIGKILL)
                item.process.wait()


# The signals that stop a server as Ctrl-C does (kill, systemd and docker send SIGTERM; a closed
# terminal or a process supervisor's reload, SIGHUP); SIGINT is Ctrl-C itself.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _die_with(parent: int) -> Callable[[], None] | None:
    """For the service's child, before exec: SIGTERM it when the server process dies, however it
    dies (kill -9 included; then no ``stop`` can run). Linux only (prctl); elsewhere None. The
    signal follows the thread that started the child, so it is set only when the main thread
    starts the services (the server's own start-up), which lives as long as the process."""

    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None

    def arm() -> None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent:  # the server died before the signal was armed
            os._exit(1)

    return arm


def _signal(process: subprocess.Popen, sig: signal.Signals) -> None:
    """``sig`` to the service's process group (its own children too)."""
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:
        pass
