"""One real server for the serving tests: ``serving.launcher.serve`` in a subprocess on a free
loopback port, with real models and a launch.yaml that shortens the timeouts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.conftest import REPO, free_port

LAUNCH_YAML = """\
system: embedded-cascade
max_sessions: 2
session_update_timeout_s: 1.0
idle_timeout_s: 2.0
vad: {silence_duration_ms: 500}
"""


@dataclass(frozen=True)
class ServerInfo:
    port: int
    base_url: str
    ws_url: str
    log_path: Path
    saw_starting: bool  # /health answered 503 "starting" while the models loaded

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")


def _wait_healthy(proc: subprocess.Popen, base_url: str, log_path: Path, timeout: float = 90.0) -> bool:
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


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("server")
    config = folder / "launch.yaml"
    config.write_text(LAUNCH_YAML, encoding="utf-8")
    log_path = folder / "server.log"
    port = free_port()
    code = (f"from pathlib import Path; from serving.launcher import serve; "
            f"serve(port={port}, config=Path({str(config)!r}))")
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, env=env, stdout=log,
                                stderr=subprocess.STDOUT)
    base_url = f"http://127.0.0.1:{port}"
    try:
        saw_starting = _wait_healthy(proc, base_url, log_path)
        yield ServerInfo(port, base_url, f"ws://127.0.0.1:{port}/v1/realtime", log_path, saw_starting)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _pcm16(samples: np.ndarray) -> bytes:
    from fdb.audio import float_to_pcm16

    return float_to_pcm16(samples)


@pytest.fixture(scope="session")
def speech():
    """Piper-spoken test utterances at 16 kHz float32 (deterministic synthesis)."""
    from fdb.audio import resample
    from fdb.models.tts import PiperTts

    tts = PiperTts(deterministic=True)

    def say(text: str) -> np.ndarray:
        return resample(tts.synthesize(text), tts.rate, 16000)

    return {"question": say("What is the capital of France?"),
            "long_question": say("Why is the sky blue?"),  # SmolLM2 answers it at length
            "barge_in": say("Tell me about the weather in Spain instead, please.")}


def silence(seconds: float) -> np.ndarray:
    return np.zeros(int(round(seconds * 16000)), dtype=np.float32)


@pytest.fixture(scope="session")
def question_pcm(speech) -> bytes:
    """0.25 s silence, the question, 1.5 s silence: 16 kHz mono PCM16."""
    return _pcm16(np.concatenate([silence(0.25), speech["question"], silence(1.5)]))
