"""Request bodies: the decoding a judge config pins, sent exactly as configured."""

from __future__ import annotations

from typing import Any

from judges.config import JudgeSettings

KEEP = object()


def decoding(
    settings: JudgeSettings,
    *,
    enable_thinking: Any = KEEP,
    temperature: float | None = None,
    max_tokens: int | None = None,
) -> dict[str, Any]:
    """Decoding fields for a custom judge (none for an OpenAI judge, which the official code
    calls with the API defaults). Optional fields are sent only when the config has them;
    ``enable_thinking`` goes in ``chat_template_kwargs`` as SGLang and vLLM expect."""
    if settings.config is None:
        return {}
    dec = settings.config.decoding
    body: dict[str, Any] = {
        "temperature": dec.temperature if temperature is None else temperature,
        "top_p": dec.top_p,
        "max_tokens": max_tokens or dec.max_tokens,
    }
    for name in ("top_k", "min_p", "repetition_penalty"):
        value = getattr(dec, name)
        if value is not None:
            body[name] = value
    thinking = settings.config.enable_thinking if enable_thinking is KEEP else enable_thinking
    if thinking is not None:
        body["chat_template_kwargs"] = {"enable_thinking": thinking}
    return body


def chat(
    model: str, system: str, user: str, seed: int | None, extra: dict[str, Any]
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
    }
    if seed is not None:
        body["seed"] = seed
    return {**body, **extra}
