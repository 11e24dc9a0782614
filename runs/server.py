"""Lifecycle of a model server that a phase starts: spawn, wait for /health, watch, stop."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import httpx

from fdb.errors import FdbError
from runs.logstream import LogFollower


def port_is_served(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


@dataclass(frozen=True)
class PortHolder:
    """The process listening on a port, as far as /proc shows it (another user's process may
    show only its uid)."""

    pid: int | None
    command: str | None
    uid: int | None

    def describe(self) -> str:
        if self.pid is None:
            return "an unknown process" + (f" of uid {self.uid}" if self.uid is not None else "")
        return f"pid {self.pid}: {self.command or '(command line not readable)'}"


def _listening_inodes(port: int, proc: Path) -> dict[int, int]:
    """inode -> uid of the TCP sockets listening on ``port`` (IPv4 and IPv6)."""
    found = {}
    for table in ("tcp", "tcp6"):
        try:
            rows = (proc / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            try:
                if len(cols) > 9 and cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                    found[int(cols[9])] = int(cols[7])
            except ValueError:  # a row this reader does not understand names no holder
                continue
    return found


def _cmdline(pid_dir: Path, limit: int = 160) -> str | None:
    try:
        raw = (pid_dir / "cmdline").read_bytes()
    except OSError:
        return None
    text = " ".join(
        " ".join(part.decode(errors="replace").split()) for part in raw.split(b"\0") if part
    )
    return text if len(text) <= limit else text[: limit - 1] + "…"


def port_holder(port: int, proc: Path = Path("/proc")) -> PortHolder:
    """Who listens on ``port``: the socket's inode from /proc/net/tcp{,6}, then the process
    with a descriptor on that socket; an unknown process when /proc does not tell."""
    inodes = _listening_inodes(port, proc)
    if not inodes:
        return PortHolder(None, None, None)
    wanted = {f"socket:[{inode}]": inode for inode in inodes}
    try:
        processes = list(proc.iterdir())
    except OSError:
        processes = []
    for pid_dir in processes:
        if pid_dir.name.isdigit():
            for link in _fd_links(pid_dir):
                if link in wanted:
                    return PortHolder(int(pid_dir.name), _cmdline(pid_dir), inodes[wanted[link]])
    return PortHolder(None, None, next(iter(inodes.values())))


def _fd_links(pid_dir: Path) -> list[str]:
    """Where a process's descriptors point; none for another user's process or one that ended."""
    try:
        fds = list((pid_dir / "fd").iterdir())
    except OSError:
        return []
    links = []
    for fd in fds:
        try:
            links.append(os.readlink(fd))
        except OSError:  # closed meanwhile
            continue
    return links


def tail(path: Path, lines: int = 15) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return "".join(deque(handle, maxlen=lines))
    except FileNotFoundError:
        return "(no log)"


# The bundled server shares the host with the recorder that paces its input. At nice 5 its model
# threads still take every idle cycle, but they no longer starve the recorder's event loop (a
# few % of one core), whose late packets would otherwise make sessions ineligible and a sweep
# level "client-limited" instead of measuring the server.
SERVER_NICE = 5


def _lower_priority() -> None:
    """Runs in the child before exec, so every thread the server starts inherits the niceness."""
    os.nice(SERVER_NICE)


class ManagedServer:
    """A bundled server (`python -m fdb serve`) run as a child process for one phase, at
    ``SERVER_NICE`` (see above)."""

    def __init__(
        self,
        *,
        system: str,
        host: str,
        port: int,
        log_path: Path,
        ready_timeout_s: float = 300.0,
        env: dict[str, str] | None = None,
        follow: bool = False,
        config: Path | None = None,
    ):
        self.system = system
        self.config = (
            config  # a launch.yaml overriding the system's settings (`fdb serve --config`)
        )
        self.host = host
        self.port = port
        self.log_path = log_path
        self.ready_timeout_s = ready_timeout_s
        self.env = env or {}
        self.follow = follow  # --log-level debug: print the log prefixed with its name
        self.proc: subprocess.Popen | None = None
        self._follower = None

    @property
    def name(self) -> str:
        return self.log_path.stem

    @property
    def http_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://{self.host}:{self.port}/v1/realtime"

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "fdb",
            "serve",
            "--system",
            self.system,
            "--host",
            self.host,
            "--port",
            str(self.port),
            *(["--config", str(self.config)] if self.config else []),
        ]

    def start(self) -> None:
        if port_is_served(self.host, self.port):
            holder = port_holder(self.port)
            stop = f"stop it (kill {holder.pid})" if holder.pid is not None else "stop it"
            raise FdbError(
                f"something already serves {self.host}:{self.port} ({holder.describe()})",
                f"often a server left from an interrupted run: {stop}, set SERVER_PORT to a free "
                "port, or pass --url to use it",
            )
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        cmd = self.command()
        # the server watches this process and stops when it is gone (serving/watchdog.py)
        env = dict(os.environ, PYTHONUNBUFFERED="1", FDB_PARENT_PID=str(os.getpid()), **self.env)
        if self.follow:
            self._follower = LogFollower(self.name, self.log_path).start()
        self.proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=_lower_priority,
        )
        log.close()
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            self.check_alive("while starting")
            try:
                if httpx.get(f"{self.http_url}/health", timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.stop()
        raise FdbError(
            f"the model server did not become ready within {self.ready_timeout_s:.0f} s; "
            "last log lines:\n" + tail(self.log_path),
            f"full log: {self.log_path}",
        )

    def check_alive(self, phase: str = "during the recordings") -> None:
        if self.proc is not None and self.proc.poll() is not None:
            code = self.proc.returncode
            fix = f"full log: {self.log_path}"
            if phase == "during the recordings":
                fix = (
                    f"fix the cause (full log: {self.log_path}), "
                    "delete the repeat and generate it again"
                )
            raise FdbError(
                f"the model server exited with code {code} {phase}; last log lines:\n"
                + tail(self.log_path),
                fix,
            )

    def stop(self) -> None:
        try:
            self._stop_process()
        finally:
            if self._follower is not None:
                self._follower.stop()

    def _stop_process(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=15)
        except (subprocess.TimeoutExpired, ProcessLookupError):
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=5)

    def __enter__(self) -> ManagedServer:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


class ServerFleet:
    """The bundled model servers of one generate: one per planned GPU, each on its own port
    with its own caches ($FDB_WORK/cache/gpu-<index>) and log (logs/model-server-gpu<N>.log)."""

    def __init__(self, plans, opts, settings, rep):
        debug = opts.log_level.lower() == "debug"
        self.servers = []
        for plan in plans:
            cache = settings.work / "cache" / f"gpu-{plan.gpu}"
            env = {"CUDA_VISIBLE_DEVICES": str(plan.gpu), "XDG_CACHE_HOME": str(cache)}
            self.servers.append(
                ManagedServer(
                    system=opts.system,
                    host="127.0.0.1",
                    port=plan.port,
                    log_path=rep.logs / f"{plan.name}.log",
                    env=env,
                    follow=debug,
                )
            )

    @property
    def ws_urls(self) -> list[str]:
        return [server.ws_url for server in self.servers]

    def start(self) -> None:
        for server in self.servers:
            server.start()

    def check_alive(self) -> None:
        for server in self.servers:
            server.check_alive()

    def stop(self) -> None:
        for server in self.servers:
            server.stop()
