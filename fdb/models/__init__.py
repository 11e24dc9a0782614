"""Model backends used on both sides (server and scorers): VAD, ASR, TTS, LLM.

Each kind has a small protocol and a registry. Heavy dependencies are imported lazily; a
missing one raises MissingExtraError naming the extra to install. Every backend exposes a
``identity`` record that results store, so numbers from different backends are never mixed.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from pydantic import BaseModel

from fdb.errors import FdbError, MissingExtraError
from fdb.io import sha256_file
from fdb.models.packages import TORCH, BackendPackage


class BackendIdentity(BaseModel):
    kind: str  # vad | asr | tts | llm | speaker | mos
    name: str
    version: str | None = None
    checkpoint: str | None = None
    checkpoint_sha256: str | None = None
    settings: dict[str, object] = {}


def require(module: str, package: str, extra: str, role: str):
    """Import ``module`` or raise an error that names the extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(package, extra, role) from exc


def require_package(package: BackendPackage, role: str, module: str | None = None):
    """Import ``module`` (default: the package's own) of a listed backend package, or raise the
    error that names its requirement and extra."""
    return require(module or package.module, package.requirement, package.extra, role)


def load_torchscript_checkpoint(path, expected_sha256: str, role: str):
    """A local TorchScript checkpoint, its sha256 checked before loading (never downloaded).

    Returns ``(torch, model, sha256)``; a mismatch raises FdbError naming the file and both hashes.
    """
    torch = require_package(TORCH, role)
    if not Path(path).is_file():
        raise FdbError(
            f"{role} checkpoint {path} does not exist",
            "pass the local path of the checkpoint file (fdb never downloads weights)",
        )
    sha = sha256_file(path)
    if sha != expected_sha256:
        raise FdbError(
            f"{role} checkpoint {path} has sha256 {sha}, expected {expected_sha256}",
            "point at the pinned checkpoint, or pass the sha256 of the one you mean to use",
        )
    return torch, torch.jit.load(str(path), map_location="cpu").eval(), sha
