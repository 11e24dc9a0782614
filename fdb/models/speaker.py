"""Speaker-embedding backends for voice similarity (16 kHz mono float32 in, a vector out).

- ``Resemblyzer``: the GE2E encoder of ``resemblyzer`` 0.1.4 (``pretrained.pt`` inside the
  wheel, extra ``embedded``), labeled ``resemblyzer-ge2e``; input through its
  ``preprocess_wav`` (volume normalisation, long-silence trimming).
- ``EcapaCheckpoint``: a WavLM-large ECAPA from a local TorchScript file whose sha256 must equal
  the one given; called as ``model(wav[1, n])``. Not shipped, not tested against a real
  checkpoint here.
"""

from __future__ import annotations

import os
import threading
import warnings

import numpy as np

from fdb.errors import FdbError
from fdb.io import sha256_file
from fdb.models import BackendIdentity, load_torchscript_checkpoint, require_package
from fdb.models.packages import RESEMBLYZER, TORCH, package_version

SPEAKER_RATE = 16000


class Resemblyzer:
    def __init__(self):
        require_package(TORCH, "the resemblyzer speaker encoder")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rz = require_package(RESEMBLYZER, "the resemblyzer speaker encoder")

        weights = os.path.join(os.path.dirname(rz.__file__), "pretrained.pt")
        self._rz = rz
        self._encoder = rz.VoiceEncoder(device="cpu", verbose=False)
        self._lock = threading.Lock()
        self.identity = BackendIdentity(
            kind="speaker",
            name="resemblyzer-ge2e",
            version=package_version(RESEMBLYZER.distribution),
            checkpoint="resemblyzer/pretrained.pt",
            checkpoint_sha256=sha256_file(weights),
            settings={"preprocess_wav": True, "label": "resemblyzer (not WavLM ECAPA)"},
        )

    def embed(self, samples: np.ndarray) -> np.ndarray:
        with self._lock:
            wav = self._rz.preprocess_wav(
                np.asarray(samples, dtype=np.float32), source_sr=SPEAKER_RATE
            )
            return np.asarray(self._encoder.embed_utterance(wav), dtype=np.float64)


class EcapaCheckpoint:
    def __init__(self, path: str | os.PathLike, expected_sha256: str):
        self._torch, self._model, sha = load_torchscript_checkpoint(
            path, expected_sha256, "the WavLM ECAPA speaker encoder"
        )
        self.identity = BackendIdentity(
            kind="speaker",
            name="wavlm-large-ecapa",
            checkpoint=str(path),
            checkpoint_sha256=sha,
            settings={"rate": SPEAKER_RATE},
        )

    def embed(self, samples: np.ndarray) -> np.ndarray:
        with self._torch.no_grad():
            wav = self._torch.from_numpy(np.ascontiguousarray(samples, dtype=np.float32))[None]
            return self._model(wav).reshape(-1).double().numpy()


def load_speaker(ecapa_path: str | None = None, ecapa_sha256: str | None = None):
    """WavLM ECAPA when a local checkpoint and its hash are given, else resemblyzer."""
    if ecapa_path:
        if not ecapa_sha256:
            raise FdbError("a speaker checkpoint needs its expected sha256")
        return EcapaCheckpoint(ecapa_path, ecapa_sha256)
    return Resemblyzer()
