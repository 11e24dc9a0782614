"""One fake judge server per test module; each test resets its script state."""

from __future__ import annotations

import pytest

from benchmarks.support.fake_openai import FakeJudge

CUSTOM_KEY = "custom-key-7f3a9c1e5b2d4f60"
OPENAI_KEY = "sk-test-openai-2b8e61d0c4a97f35"


@pytest.fixture(scope="module")
def fake_server():
    with FakeJudge(api_key=CUSTOM_KEY) as server:
        yield server


@pytest.fixture
def fake(fake_server, monkeypatch):
    monkeypatch.setenv("CUSTOM_JUDGE_API_KEY", CUSTOM_KEY)
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    fake_server.reset(api_key=CUSTOM_KEY)
    return fake_server
