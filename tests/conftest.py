"""Shared test fixtures. Reference data is read from ../shared (never copied into the repo)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
REFERENCE = SHARED / "fdb-reference"
# The pieces of the reference data that tests read (the same layout as ``v1_v1.5/evaluation/`` of a
# Full-Duplex-Bench checkout).
EXAMPLES = REFERENCE / "example_data"
BEHAVIOR_TXT = REFERENCE / "instruction" / "behavior.txt"
UPSTREAM = "github.com/DanielLin94144/Full-Duplex-Bench"

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def git_commit_all(root: Path) -> str:
    """Make ``root`` a git work tree with everything in one commit; its full commit hash (a
    stand-in Full-Duplex-Bench checkout whose revision a test accepts)."""

    def git(*args: str) -> str:
        return subprocess.run(
            [
                "git",
                "-C",
                str(root),
                "-c",
                "user.name=fdb-test",
                "-c",
                "user.email=t@example.invalid",
                *args,
            ],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout.strip()

    git("init", "-q")
    git("add", "-A")
    git("commit", "-q", "-m", "stand-in checkout")
    return git("rev-parse", "HEAD")


def missing_shared(path: Path, what: str) -> str | None:
    """The skip reason for a test that reads ``path`` (under ../shared/fdb-reference) when it is
    missing, else None. The reference data is Full-Duplex-Bench's (CC BY-NC 4.0): fdb never ships
    it, so a clone without the team's ../shared skips these tests and runs everything else."""
    if path.exists():
        return None
    try:
        upstream = f"v1_v1.5/evaluation/{path.relative_to(REFERENCE).as_posix()}"
    except ValueError:
        upstream = path.name
    return (
        f"needs {what}, missing at {path}: Full-Duplex-Bench reference data (CC BY-NC 4.0) that "
        "fdb does not ship. Put the team's shared/ folder beside the repository, or copy it there "
        f"from {upstream} of a Full-Duplex-Bench checkout ({UPSTREAM})"
    )


def requires_shared(path: Path, what: str) -> pytest.MarkDecorator:
    """Mark a test (or a module, as ``pytestmark``) to skip, with a reason naming ``what`` and how
    to get it, when ``path`` under ../shared is missing."""
    reason = missing_shared(path, what)
    return pytest.mark.skipif(reason is not None, reason=reason or "")


def skip_without_shared(path: Path, what: str) -> Path:
    """Skip the calling test or fixture now when ``path`` under ../shared is missing;
    else return it."""
    reason = missing_shared(path, what)
    if reason is not None:
        pytest.skip(reason)
    return path


needs_behavior_prompt = requires_shared(
    BEHAVIOR_TXT, "the v1.5 behavior-judge prompt instruction/behavior.txt"
)
needs_examples = requires_shared(
    EXAMPLES, "the three Full-Duplex-Bench v1.0 example samples (example_data/)"
)


@pytest.fixture
def reference_dir() -> Path:
    return skip_without_shared(REFERENCE, "the Full-Duplex-Bench reference data")


@dataclass(frozen=True)
class ServerInfo:
    port: int
    base_url: str
    ws_url: str
    log_path: Path
    saw_starting: bool  # /health answered 503 "starting" while the models loaded

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")


def wait_healthy(
    proc: subprocess.Popen, base_url: str, log_path: Path, timeout: float = 120.0
) -> bool:
    """Poll /health until 200; True when it answered 503 "starting" on the way."""
    saw_starting = False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"server exited with {proc.returncode}:\n{log_path.read_text()}")
        try:
            reply = httpx.get(f"{base_url}/health", timeout=2.0)
        except httpx.HTTPError:
            time.sleep(0.1)
            continue
        if reply.status_code == 200:
            return saw_starting
        saw_starting = saw_starting or reply.json().get("status") == "starting"
        time.sleep(0.1)
    pytest.fail(f"server not healthy after {timeout} s:\n{log_path.read_text()}")


@contextmanager
def launched_server(
    folder: Path, launch_yaml: str, env: dict[str, str] | None = None
) -> Iterator[ServerInfo]:
    """``serving.launcher.serve`` with ``launch_yaml`` in a subprocess on a free loopback port
    (real models, ``env`` added to the environment); stopped with SIGINT (then SIGKILL) on exit.
    Its log is ``folder/server.log``."""
    config = folder / "launch.yaml"
    config.write_text(launch_yaml, encoding="utf-8")
    log_path = folder / "server.log"
    port = free_port()
    code = (
        f"from pathlib import Path; from serving.launcher import serve; "
        f"serve(port={port}, config=Path({str(config)!r}))"
    )
    full_env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1", **(env or {})}
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-c", code],
            cwd=REPO,
            env=full_env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    base_url = f"http://127.0.0.1:{port}"
    try:
        saw_starting = wait_healthy(proc, base_url, log_path)
        yield ServerInfo(
            port, base_url, f"ws://127.0.0.1:{port}/v1/realtime", log_path, saw_starting
        )
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
