"""The one way fdb talks to a judge: the ``openai`` SDK (async) against any OpenAI-compatible
endpoint, with no SDK retries (fdb's attempt loops are bounded and logged), a per-request
timeout, and a cap on requests in flight shared by every task of a phase.

Errors are reduced to a short message with every known secret removed, so a server that echoes
the key (an ``Incorrect API key provided: sk-...`` reply) cannot leak it into a ledger or log.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from dataclasses import dataclass
from typing import Any

from fdb.errors import MissingExtraError
from fdb.io import redact_values
from judges.config import CUSTOM_KEY_ENV, OPENAI_KEY_ENV, JudgeSettings

SDK_FIELDS = ("model", "messages", "seed", "temperature", "top_p", "max_tokens")
_DATED = re.compile(r"-\d{4}-\d{2}-\d{2}$")


def secret_values() -> list[str]:
    """Key values that must never be written (placeholders such as EMPTY are not secrets)."""
    out = []
    for name in (OPENAI_KEY_ENV, CUSTOM_KEY_ENV):
        value = os.environ.get(name) or ""
        if len(value) >= 8:
            out.append(value)
    return out


def redact(text: str, secrets: list[str] | None = None, keylike: bool = False) -> str:
    """Remove every known key value; ``keylike`` also masks ``sk-...`` tokens (error texts)."""
    return redact_values(text, secrets if secrets is not None else secret_values(), keylike)


def model_matches(requested: str, returned: str | None) -> bool:
    """A reply is from the configured model when it names exactly that model, or, for an
    undated alias such as ``gpt-4-turbo``, a dated snapshot of it (``gpt-4-turbo-2024-04-09``)."""
    if returned is None:
        return False
    if returned == requested:
        return True
    return (
        not _DATED.search(requested)
        and returned.startswith(requested)
        and bool(_DATED.fullmatch(returned[len(requested) :]))
    )


@dataclass(frozen=True)
class Reply:
    model: str | None
    content: str | None
    finish_reason: str | None
    raw: dict[str, Any]
    elapsed_s: float


class TransportFailure(Exception):
    """The request did not produce a reply: connection, timeout, HTTP status, bad body."""

    def __init__(self, message: str, elapsed_s: float):
        super().__init__(message)
        self.message = message
        self.elapsed_s = elapsed_s


def split_body(body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """SDK keyword arguments, and the rest (top_k, min_p, chat_template_kwargs, ...) as
    extra_body."""
    known = {k: v for k, v in body.items() if k in SDK_FIELDS}
    extra = {k: v for k, v in body.items() if k not in SDK_FIELDS}
    return known, extra


class JudgeClient:
    """One SDK client per phase; ``complete`` holds one of ``concurrency`` slots while in flight."""

    def __init__(self, settings: JudgeSettings):
        try:
            # lazy: openai is slow to import; only the remote client needs it
            from openai import AsyncOpenAI
        except ImportError as exc:  # pragma: no cover - openai is a core dependency
            raise MissingExtraError("openai", "judge", "the LLM judge") from exc
        self._secrets = secret_values()
        self._sdk = AsyncOpenAI(
            api_key=settings.api_key(),
            base_url=settings.base_url,
            max_retries=0,
            timeout=settings.timeout_s,
        )
        self._slots = asyncio.Semaphore(settings.concurrency)
        self.in_flight = 0
        self.max_in_flight = 0

    async def complete(self, body: dict[str, Any]) -> Reply:
        known, extra = split_body(body)
        async with self._slots:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            start = time.monotonic()
            try:
                resp = await self._sdk.chat.completions.create(**known, extra_body=extra or None)
            except Exception as exc:  # every SDK/transport error is a transport failure
                raise TransportFailure(self._describe(exc), time.monotonic() - start) from None
            finally:
                self.in_flight -= 1
        elapsed = time.monotonic() - start
        raw = resp.model_dump(mode="json")
        choices = resp.choices or []
        if not choices:
            raise TransportFailure("the reply has no choices", elapsed)
        choice = choices[0]
        return Reply(
            model=resp.model,
            content=choice.message.content if choice.message else None,
            finish_reason=choice.finish_reason,
            raw=raw,
            elapsed_s=elapsed,
        )

    def _describe(self, exc: Exception) -> str:
        status = getattr(exc, "status_code", None)
        kind = type(exc).__name__
        detail = str(exc)[:500]
        text = f"{kind}" + (f" (HTTP {status})" if status else "") + f": {detail}"
        return redact(text, self._secrets, keylike=True)

    async def close(self) -> None:
        await self._sdk.close()
