"""Shared fixtures: the real Silero VAD and faster-whisper backends, loaded once per session."""

from __future__ import annotations

import pytest

from tests.scorers.treebuild import REFERENCE


@pytest.fixture(scope="session")
def reference():
    if not REFERENCE.exists():
        pytest.skip(f"reference data not found at {REFERENCE}")
    return REFERENCE


@pytest.fixture(scope="session")
def silero():
    from fdb.models.vad import SileroVad

    return SileroVad()


@pytest.fixture(scope="session")
def whisper():
    from scorers.asr_phase import default_asr

    return default_asr()
