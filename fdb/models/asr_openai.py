"""ASR through any OpenAI-compatible ``POST {base_url}/audio/transcriptions`` endpoint.

The clip is sent as a 16 kHz mono PCM16 WAV (multipart field ``file``) with ``model``,
``response_format=verbose_json``, ``timestamp_granularities[]=word`` and ``temperature=0``
(plus ``language`` when given); the reply's ``words`` list (``word``, ``start``, ``end``)
becomes the transcript. A reply without ``words`` is an error, never an empty transcript.

The key is read from the environment variable named by ``api_key_env`` (default
``OPENAI_API_KEY``; set it to ``EMPTY`` for an endpoint without authentication) and is only ever
put in the Authorization header: the identity records the variable's name, errors quote at most
200 characters of a reply body, and nothing here logs. Transport errors, timeouts, 408, 409,
429 and 5xx replies are retried up to ``max_attempts`` in all, with ``retry_sleep_s`` doubling
between attempts; any other 4xx reply fails at once.

The cascade's ``openai_transcription`` node (:mod:`serving.service_nodes`) uses this client with
``key_required=False`` (no Authorization header while the variable is unset),
``response_format="json"`` where asked, and ``words_required=False`` (only the text is needed).
"""

from __future__ import annotations

import dataclasses
import os
import time

import httpx
import numpy as np

from fdb.audio import wav_bytes
from fdb.errors import FdbError
from fdb.models import BackendIdentity
from fdb.models.asr import ASR_RATE, Transcript, Word
from fdb.models.packages import package_version

RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})


class AsrEndpointError(FdbError):
    """The endpoint failed or answered something that is not a word-timestamped transcript."""


class OpenAiCompatibleAsr:
    """Word-timestamped transcripts from an OpenAI-compatible transcription endpoint."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str = "OPENAI_API_KEY",
        language: str | None = "en",
        timeout_s: float = 120.0,
        max_attempts: int = 3,
        retry_sleep_s: float = 2.0,
        key_required: bool = True,
        response_format: str = "verbose_json",
        words_required: bool = True,
    ):
        if not base_url.startswith(("http://", "https://")):
            raise FdbError(
                f"ASR endpoint {base_url!r} is not an http(s) URL", "pass e.g. http://host:8000/v1"
            )
        if max_attempts < 1:
            raise FdbError("max_attempts must be at least 1")
        if key_required and not os.environ.get(api_key_env):
            raise FdbError(
                f"the ASR endpoint key variable {api_key_env} is not set",
                f"export {api_key_env}=<key> (or {api_key_env}=EMPTY for an endpoint without "
                "authentication)",
            )
        self._url = base_url.rstrip("/") + "/audio/transcriptions"
        self._key_env = api_key_env
        self._model = model
        self._language = language
        self._timeout = timeout_s
        self._attempts = max_attempts
        self._sleep = retry_sleep_s
        self._format = response_format
        self._words_required = words_required
        self.identity = BackendIdentity(
            kind="asr",
            name=f"openai-compatible/{model}",
            version=None,
            checkpoint=None,
            settings={
                "base_url": base_url.rstrip("/"),
                "model": model,
                "response_format": response_format,
                "timestamp_granularities": ["word"],
                "temperature": 0.0,
                "language": language,
                "api_key_env": api_key_env,
                "client": f"httpx {package_version('httpx')}",
            },
        )

    def _form(self) -> dict[str, str]:
        form = {"model": self._model, "response_format": self._format, "temperature": "0"}
        if self._format == "verbose_json":
            form["timestamp_granularities[]"] = "word"
        if self._language:
            form["language"] = self._language
        return form

    def _post(self, wav: bytes) -> dict:
        """One transcription request with bounded retries; the parsed JSON reply."""
        key = os.environ.get(self._key_env)
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        last = "no attempt"
        for attempt in range(1, self._attempts + 1):
            if attempt > 1:
                time.sleep(self._sleep * 2 ** (attempt - 2))
            try:
                reply = httpx.post(
                    self._url,
                    data=self._form(),
                    files={"file": ("audio.wav", wav, "audio/wav")},
                    headers=headers,
                    timeout=self._timeout,
                )
            except httpx.HTTPError as exc:
                last = f"{type(exc).__name__}: {exc}"
                continue
            if reply.status_code == 200:
                try:
                    return reply.json()
                except ValueError as exc:
                    raise AsrEndpointError(
                        f"ASR endpoint {self._url} answered non-JSON: {reply.text[:200]!r}"
                    ) from exc
            last = f"HTTP {reply.status_code}: {reply.text[:200]!r}"
            if reply.status_code not in RETRY_STATUS:
                raise AsrEndpointError(
                    f"ASR endpoint {self._url} refused the request ({last})",
                    _hint(reply.status_code, self._key_env),
                )
        raise AsrEndpointError(
            f"ASR endpoint {self._url} failed {self._attempts} attempts (last: {last})",
            "check that the server is up and reachable, then rerun with --retry-failed",
        )

    def transcribe(self, samples: np.ndarray) -> Transcript:
        """16 kHz mono float32 in; word times in seconds from the start of ``samples``."""
        samples = np.ascontiguousarray(samples, dtype=np.float32)
        if len(samples) == 0:
            return Transcript("", [])
        reply = self._post(wav_bytes(samples, ASR_RATE))
        language = (
            reply.get("language")
            if isinstance(reply, dict) and isinstance(reply.get("language"), str)
            else None
        )
        if not self._words_required and not (
            isinstance(reply, dict) and isinstance(reply.get("words"), list)
        ):
            text = str(reply.get("text") or "").strip() if isinstance(reply, dict) else ""
            return Transcript(text, [], language or None)
        return dataclasses.replace(parse_verbose_json(reply, self._url), language=language or None)


def _hint(status: int, key_env: str) -> str:
    if status in (401, 403):
        return f"check the key in {key_env}"
    if status == 404:
        return "check --asr-url: it should end in /v1 (the client appends /audio/transcriptions)"
    return "check that the endpoint supports response_format=verbose_json with word timestamps"


def parse_verbose_json(reply: object, url: str = "the ASR endpoint") -> Transcript:
    """Words of a verbose_json reply; a reply without a ``words`` list is an error."""
    words_in = reply.get("words") if isinstance(reply, dict) else None
    if not isinstance(words_in, list):
        raise AsrEndpointError(
            f"{url} returned no word timestamps (no 'words' list in the reply)",
            "the endpoint must support timestamp_granularities=['word'] with verbose_json",
        )
    words = []
    for i, item in enumerate(words_in):
        try:
            text = str(item["word"]).strip()
            start = float(item["start"])
            end = None if item.get("end") is None else float(item["end"])
        except (KeyError, TypeError, ValueError) as exc:
            raise AsrEndpointError(
                f"{url} returned a malformed word {i}: {str(item)[:120]}"
            ) from exc
        if text:
            words.append(Word(text, start, end))
    return Transcript(" ".join(w.text for w in words), words)
