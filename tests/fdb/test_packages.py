"""The one list of backend packages agrees with pyproject.toml's extras."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from fdb.models.packages import BACKEND_PACKAGES, CTRANSLATE2, PIPECAT, SMOLLM2, TORCH_FOR_NEMO
from fdb.provenance import CORE_PACKAGES

REPO = Path(__file__).resolve().parents[2]
# installed with --no-deps by the Makefile (SMOLLM2, PIPECAT), or a dependency of a listed one
NOT_AN_EXTRA_LINE = {SMOLLM2, PIPECAT, CTRANSLATE2, TORCH_FOR_NEMO}


def test_every_listed_package_is_in_its_extra():
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    for package in BACKEND_PACKAGES:
        if package in NOT_AN_EXTRA_LINE:
            continue
        names = {re.split(r"[\[<>=!~; ]", line, maxsplit=1)[0] for line in extras[package.extra]}
        assert package.distribution in names, (package, extras[package.extra])


def test_provenance_records_the_runtimes_in_order():
    assert CORE_PACKAGES == (
        "numpy",
        "scipy",
        "soundfile",
        "soxr",
        "pydantic",
        "websockets",
        "fastapi",
        "uvicorn",
        "torch",
        "silero-vad",
        "onnxruntime",
        "faster-whisper",
        "ctranslate2",
        "piper-tts",
        "llama-cpp-python",
        "jiwer",
        "whisper-normalizer",
    )
