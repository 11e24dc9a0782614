"""One real server for the serving tests: ``serving.launcher.serve`` in a subprocess on a free
loopback port, with real models and a launch.yaml that shortens the timeouts."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from tests.conftest import ServerInfo, launched_server

__all__ = ["LAUNCH_YAML", "ServerInfo", "launched_server"]

LAUNCH_YAML = """\
system: embedded-cascade
max_sessions: 2
session_update_timeout_s: 1.0
idle_timeout_s: 2.0
vad: {silence_duration_ms: 500}
"""


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerInfo]:
    with launched_server(tmp_path_factory.mktemp("server"), LAUNCH_YAML) as info:
        yield info


def _pcm16(samples: np.ndarray) -> bytes:
    from fdb.audio import float_to_pcm16

    return float_to_pcm16(samples)


@pytest.fixture(scope="session")
def say():
    """Text spoken by Piper (deterministic synthesis) at 16 kHz float32."""
    from fdb.audio import resample
    from fdb.models.tts import PiperTts

    tts = PiperTts(deterministic=True)
    return lambda text: resample(tts.synthesize(text), tts.rate, 16000)


@pytest.fixture(scope="session")
def speech(say):
    """Piper-spoken test utterances at 16 kHz float32 (deterministic synthesis)."""
    return {
        "question": say("What is the capital of France?"),
        "long_question": say("Why is the sky blue?"),  # SmolLM2 answers it at length
        "barge_in": say("Tell me about the weather in Spain instead, please."),
    }


def silence(seconds: float) -> np.ndarray:
    return np.zeros(int(round(seconds * 16000)), dtype=np.float32)


@pytest.fixture(scope="session")
def question_pcm(speech) -> bytes:
    """0.25 s silence, the question, 1.5 s silence: 16 kHz mono PCM16."""
    return _pcm16(np.concatenate([silence(0.25), speech["question"], silence(1.5)]))
