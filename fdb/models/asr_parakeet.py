"""NeMo Parakeet-TDT-0.6b-v2 with word timestamps, from a local ``.nemo`` checkpoint.

The reference ASR of Full-Duplex-Bench (the official ``get_transcript/asr.py`` uses it since
2025-06-05). fdb never downloads it: the user points ``nemo_path`` at the checkpoint
(``nvidia/parakeet-tdt-0.6b-v2`` at revision ae9ad070…), whose sha256 is checked before NeMo
is imported or the file is read by it. ``device`` is ``cpu`` or ``cuda``; ``cuda`` needs exactly
one visible GPU (set ``CUDA_VISIBLE_DEVICES`` to one index), so a job never spreads over, or
silently picks one of, several GPUs.

Transcription follows the official script: the clip is written as a temporary 16 kHz PCM16
WAV, ``model.transcribe([path], timestamps=True)`` is called, and the words are
``hypothesis.timestamp["word"]`` (``word``, ``start``, ``end`` in seconds).
"""

from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path

import numpy as np

from fdb.audio import wav_bytes
from fdb.errors import FdbError
from fdb.io import sha256_file
from fdb.models import BackendIdentity, require_package
from fdb.models.asr import ASR_RATE, Transcript, Word
from fdb.models.packages import NEMO, TORCH_FOR_NEMO, package_version

PARAKEET_MODEL_ID = "nvidia/parakeet-tdt-0.6b-v2"
PARAKEET_REVISION = "ae9ad07059c7c739ffaf932226a8fe64ae2620b0"
PARAKEET_SHA256 = "d99e39955c9d3d0350d8fb7c75e40c64a2b2eaeb003883d7c941fd2e8747b28c"
DEVICES = ("cpu", "cuda")


def check_device(device: str) -> str:
    """``cpu``, or ``cuda`` with exactly one visible GPU; anything else is refused."""
    if device not in DEVICES:
        raise FdbError(f"--device {device!r} is not supported", "use cpu or cuda")
    if device == "cpu":
        return device
    torch = require_package(TORCH_FOR_NEMO, "Parakeet on a GPU")
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count != 1:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        raise FdbError(
            f"--device cuda needs exactly one visible GPU, found {count} "
            f"(CUDA_VISIBLE_DEVICES={visible!r})",
            "set CUDA_VISIBLE_DEVICES to a single GPU index, or use --device cpu",
        )
    return device


def verify_checkpoint(nemo_path: str | os.PathLike, expected_sha256: str) -> tuple[Path, str]:
    """(path, sha256) of the checkpoint after checking it exists and matches ``expected_sha256``."""
    path = Path(nemo_path)
    if not path.is_file():
        raise FdbError(
            f"Parakeet checkpoint {path} does not exist",
            f"download {PARAKEET_MODEL_ID} (revision {PARAKEET_REVISION[:7]}) and pass its .nemo "
            "file",
        )
    actual = sha256_file(path)
    if actual != expected_sha256.lower():
        raise FdbError(
            f"Parakeet checkpoint {path} has sha256 {actual[:12]}…, expected "
            f"{expected_sha256[:12]}…",
            "use the pinned parakeet-tdt-0.6b-v2 .nemo file (or pass the sha256 of the checkpoint "
            "you mean)",
        )
    return path, actual


class ParakeetAsr:
    """Parakeet-TDT-0.6b-v2 via NeMo, on ``cpu`` or one visible GPU."""

    def __init__(
        self,
        nemo_path: str | os.PathLike,
        expected_sha256: str = PARAKEET_SHA256,
        device: str = "cpu",
        batch_size: int = 1,
    ):
        device = check_device(device)
        path, actual = verify_checkpoint(nemo_path, expected_sha256)
        require_package(NEMO, "the Parakeet ASR backend")
        asr_models = require_package(NEMO, "the Parakeet ASR backend", "nemo.collections.asr")
        # lazy: torch is optional (the embedded extra)
        import torch

        self._model = asr_models.models.ASRModel.restore_from(
            restore_path=str(path), map_location=torch.device(device)
        )
        self._model.eval()
        self._batch_size = batch_size
        self._lock = threading.Lock()
        self.identity = BackendIdentity(
            kind="asr",
            name=f"nemo/{PARAKEET_MODEL_ID}",
            version=package_version(NEMO.distribution),
            checkpoint=str(path),
            checkpoint_sha256=actual,
            settings={
                "device": device,
                "timestamps": "word",
                "decoding": "checkpoint default",
                "pinned_sha256": actual == PARAKEET_SHA256,
                "revision": PARAKEET_REVISION,
            },
        )

    def transcribe(self, samples: np.ndarray) -> Transcript:
        """16 kHz mono float32 in; word times in seconds from the start of ``samples``."""
        samples = np.ascontiguousarray(samples, dtype=np.float32)
        if len(samples) == 0:
            return Transcript("", [])

        with tempfile.TemporaryDirectory(prefix="fdb-parakeet-") as tmp, self._lock:
            wav = Path(tmp) / "clip.wav"
            wav.write_bytes(wav_bytes(samples, ASR_RATE))
            out = self._model.transcribe(
                [str(wav)], batch_size=self._batch_size, timestamps=True, verbose=False
            )
        return words_from_hypotheses(out)


def words_from_hypotheses(out) -> Transcript:
    """The first hypothesis' word timestamps (NeMo returns a list, or (best, all) for RNNT)."""
    if isinstance(out, tuple):
        out = out[0]
    if not out:
        return Transcript("", [])
    stamps = (getattr(out[0], "timestamp", None) or {}).get("word") or []
    words = []
    for stamp in stamps:
        text = str(stamp["word"]).strip()
        if text:
            end = stamp.get("end")
            words.append(Word(text, float(stamp["start"]), None if end is None else float(end)))
    return Transcript(" ".join(w.text for w in words), words)
