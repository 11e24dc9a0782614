"""Shared fixtures: the real Silero VAD and faster-whisper backends, loaded once per session."""

from __future__ import annotations

import pytest

from benchmarks.support.treebuild import REFERENCE
from tests.conftest import skip_without_shared


@pytest.fixture(scope="session")
def reference():
    return skip_without_shared(
        REFERENCE, "the three Full-Duplex-Bench v1.0 example samples (example_data/)"
    )


@pytest.fixture(scope="session")
def silero():
    from fdb.models.vad import SileroVad

    return SileroVad()


@pytest.fixture(scope="session")
def whisper():
    from scorers.asr_phase import default_asr

    return default_asr()
