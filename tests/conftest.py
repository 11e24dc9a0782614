"""Shared test fixtures. Reference data is read from ../shared (never copied into the repo)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
REFERENCE = SHARED / "fdb-reference"

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def reference_dir() -> Path:
    if not REFERENCE.exists():
        pytest.fail(f"reference data missing at {REFERENCE}: CI must provide ../shared")
    return REFERENCE
