"""End-of-turn detection: is the user's utterance so far a complete turn?

Default: Smart Turn v3.2 (BSD-2), the ``smart-turn-v3.2-cpu.onnx`` file shipped inside the
``pipecat-ai`` wheel (installed with ``--no-deps``, see the Makefile: pipecat's own Python needs
its heavy dependencies, so only the file is used). The file is located through the package
metadata without importing pipecat, its sha256 is checked, and it runs with onnxruntime.

Input: the last 8 s of 16 kHz mono audio (zero-padded at the start when shorter), normalized to
zero mean and unit variance, as Whisper log-mel features (80 x 800) computed by faster-whisper's
:class:`~faster_whisper.feature_extractor.FeatureExtractor` (the same features as
``transformers.WhisperFeatureExtractor(chunk_length=8)``). Output: the probability that the
turn is complete.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Protocol

import numpy as np

from fdb.errors import FdbError, MissingExtraError
from fdb.io import sha256_file
from fdb.models import BackendIdentity, require_package
from fdb.models.packages import FASTER_WHISPER, ONNXRUNTIME, PIPECAT, package_version
from fdb.registry import Registry, choose_one_of_sorted

TURN_RATE = 16000
WINDOW_S = 8
SMART_TURN_FILE = "pipecat/audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx"
SMART_TURN_SHA256 = "2bb026316b14a660486a75b1733cd3fbab8c2fd0314dc9af7be49f8cca967e4f"
_NORM_EPS = 1e-7


class TurnBackend(Protocol):
    identity: BackendIdentity

    def complete_probability(self, samples: np.ndarray) -> float:
        """P(the turn is complete) for 16 kHz mono float32 audio ending at the pause."""


def smart_turn_path() -> Path:
    """The ONNX file inside the installed pipecat-ai wheel (pipecat is not imported)."""
    try:
        dist = metadata.distribution(PIPECAT.distribution)
    except metadata.PackageNotFoundError as exc:
        raise MissingExtraError(
            PIPECAT.requirement, PIPECAT.extra, "Smart Turn end-of-turn detection"
        ) from exc
    path = Path(str(dist.locate_file(SMART_TURN_FILE)))
    if not path.is_file():
        raise FdbError(
            f"pipecat-ai {dist.version} has no {SMART_TURN_FILE}",
            "install pipecat-ai==1.14.0 with --no-deps (make venv does)",
        )
    return path


@functools.cache
def smart_turn_installed() -> bool:
    """Whether the Smart Turn file is installed (cheap: package metadata only)."""
    try:
        smart_turn_path()
    except FdbError:
        return False
    return True


def last_window(samples: np.ndarray) -> np.ndarray:
    """The last 8 s of ``samples``, zero-padded at the start, normalized (mean 0, variance 1)."""
    size = WINDOW_S * TURN_RATE
    x = np.asarray(samples, dtype=np.float32)[-size:]
    x = np.pad(x, (size - len(x), 0))
    return (x - x.mean()) / np.sqrt(x.var() + _NORM_EPS)


class SmartTurn:
    """Smart Turn v3.2 on CPU; one call scores one utterance (its time:
    docs/benchmarks.md#smart-turn)."""

    def __init__(
        self,
        path: str | Path | None = None,
        expected_sha256: str = SMART_TURN_SHA256,
        threads: int = 1,
    ) -> None:
        ort = require_package(ONNXRUNTIME, "Smart Turn")
        features = require_package(FASTER_WHISPER, "Smart Turn", "faster_whisper.feature_extractor")
        path = Path(path) if path is not None else smart_turn_path()
        sha = sha256_file(path)
        if sha != expected_sha256:
            raise FdbError(
                f"Smart Turn model {path} has sha256 {sha}, expected {expected_sha256}",
                "install pipecat-ai==1.14.0, or pass the sha256 of the file you mean to use",
            )
        options = ort.SessionOptions()
        options.inter_op_num_threads = 1
        options.intra_op_num_threads = threads
        self._session = ort.InferenceSession(
            str(path), sess_options=options, providers=["CPUExecutionProvider"]
        )
        self._features = features.FeatureExtractor(
            feature_size=80,
            sampling_rate=TURN_RATE,
            hop_length=160,
            chunk_length=WINDOW_S,
            n_fft=400,
        )
        self._lock = threading.Lock()
        self.identity = BackendIdentity(
            kind="turn",
            name="smart-turn-v3.2-cpu",
            version=package_version(PIPECAT.distribution),
            checkpoint=str(path),
            checkpoint_sha256=sha,
        )

    def complete_probability(self, samples: np.ndarray) -> float:
        mel = self._features(last_window(samples), padding=0)[:, : WINDOW_S * 100]
        with self._lock:
            (logits,) = self._session.run(None, {"input_features": mel[None].astype(np.float32)})
        return float(np.asarray(logits).reshape(-1)[0])  # the model ends in a sigmoid


TURN = Registry[Callable[[], TurnBackend]](
    "turn backend", {"smart-turn": SmartTurn}, hint=choose_one_of_sorted
)
TURN_BACKENDS = TURN.names()


def load_turn_backend(name: str = "smart-turn") -> TurnBackend:
    return TURN[name]()
