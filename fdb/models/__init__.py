"""Model backends used on both sides (server and scorers): VAD, ASR, TTS, LLM.

Each kind has a small protocol and a registry. Heavy dependencies are imported lazily; a
missing one raises MissingExtraError naming the extra to install. Every backend exposes a
``identity`` record that results store, so numbers from different backends are never mixed.
"""

from __future__ import annotations

import importlib

from pydantic import BaseModel

from fdb.errors import MissingExtraError


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
