"""Non-intrusive MOS backends for listening quality (16 kHz mono float32 in, one score out).

- ``DnsMos``: Microsoft DNSMOS (P.835 OVRL) through the ``speechmos`` wheel, whose ONNX models
  ship inside it (extra ``embedded``). Labeled ``dnsmos-ovrl``: it detects noise and clicks but
  ranks TTS naturalness weakly, so it is not UTMOS and its numbers are never mixed with UTMOS.
- ``UtmosCheckpoint``: UTMOS from a local TorchScript file whose sha256 must equal the one
  given before it is loaded; called as ``model(wav[1, n], 16000)``. Not shipped, not tested
  against a real checkpoint here.
"""

from __future__ import annotations

import os
import threading
import warnings

import numpy as np

from fdb.errors import FdbError
from fdb.io import sha256_file
from fdb.models import BackendIdentity, load_torchscript_checkpoint, require_package
from fdb.models.packages import SPEECHMOS, package_version

MOS_RATE = 16000


class DnsMos:
    """DNSMOS overall (OVRL) of ``speechmos`` 0.0.1.1, sessions built once."""

    def __init__(self):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dns = require_package(SPEECHMOS, "the DNSMOS backend", "speechmos.dnsmos")

        folder = os.path.join(os.path.dirname(dns.__file__), "dnsmos_models")
        primary, p808 = (
            os.path.join(folder, "sig_bak_ovr.onnx"),
            os.path.join(folder, "model_v8.onnx"),
        )
        self._model = dns.DNSMOS(primary, p808)
        self._lock = threading.Lock()
        self.identity = BackendIdentity(
            kind="mos",
            name="dnsmos-ovrl",
            version=package_version(SPEECHMOS.distribution),
            checkpoint="speechmos/dnsmos_models/sig_bak_ovr.onnx",
            checkpoint_sha256=sha256_file(primary),
            settings={
                "field": "ovrl_mos",
                "personalized": False,
                "clip": [-1.0, 1.0],
                "label": "DNSMOS (not UTMOS)",
            },
        )

    def score(self, samples: np.ndarray) -> float:
        with self._lock:
            clipped = np.clip(
                np.asarray(samples, dtype=np.float32), -1.0, 1.0
            )  # speechmos refuses |x| > 1
            out = self._model(clipped, MOS_RATE, False)
        return float(out["ovrl_mos"])


class UtmosCheckpoint:
    """UTMOS from a local TorchScript checkpoint, hash-checked before loading."""

    def __init__(self, path: str | os.PathLike, expected_sha256: str):
        self._torch, self._model, sha = load_torchscript_checkpoint(path, expected_sha256, "UTMOS")
        self.identity = BackendIdentity(
            kind="mos",
            name="utmos",
            version=None,
            checkpoint=str(path),
            checkpoint_sha256=sha,
            settings={"rate": MOS_RATE},
        )

    def score(self, samples: np.ndarray) -> float:
        with self._torch.no_grad():
            wav = self._torch.from_numpy(np.ascontiguousarray(samples, dtype=np.float32))[None]
            return float(self._model(wav, MOS_RATE).reshape(-1)[0])


def load_mos(utmos_path: str | None = None, utmos_sha256: str | None = None):
    """UTMOS when a local checkpoint and its hash are given, else the embedded DNSMOS."""
    if utmos_path:
        if not utmos_sha256:
            raise FdbError("a UTMOS checkpoint needs its expected sha256")
        return UtmosCheckpoint(utmos_path, utmos_sha256)
    return DnsMos()
