"""Service nodes: a cascade role (ASR, LLM or TTS) served by any OpenAI-compatible endpoint.

A launch file picks a node for a role instead of an embedded backend's registry key::

    backends:
      asr: {kind: openai_transcription, base_url: http://127.0.0.1:8102/v1, model: whisper-1}
      llm: {kind: openai_chat, base_url: http://127.0.0.1:8103/v1, model: smollm2}
      tts: {kind: openai_speech, base_url: http://127.0.0.1:8105/v1, model: fdb/embedded-cascade}

- ``openai_transcription`` sends each finished utterance as a 16 kHz WAV to
  ``{base_url}/audio/transcriptions`` (the client of :mod:`fdb.models.asr_openai`);
- ``openai_chat`` streams one chat completion (SSE) from ``{base_url}/chat/completions`` per
  turn, with the session's ``max_tokens`` and ``temperature`` plus ``extra_body``;
- ``openai_speech`` cuts the text into sentences, drops markup, emoji and URLs
  (:func:`serving.realtime.chunker.speakable`), skips a sentence with no word left, writes the
  numbers of an English-tagged sentence as words (:mod:`serving.spoken_numbers`), and sends
  one streaming request per sentence to ``{base_url}/audio/speech`` with ``response_format:
  pcm`` and ``stream: true``. The answer is PCM16 at its ``X-Sample-Rate`` header's rate, else
  at ``sample_rate`` (24 kHz, as OpenAI's pcm), resampled to ``sample_rate``.

The bearer token is read from the environment variable named by ``api_key_env`` at each
request, and nothing is sent when it is unset; it never appears in an identity, error or log.
Before the server reports ready every node is probed (:func:`probe`): ``{base_url}/models``
must answer 200 and list the node's model, and ``openai_chat`` streams one token sampled with
the node's settings.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from fdb.errors import FdbError
from fdb.io import redact_values
from fdb.models import BackendIdentity
from serving.spoken_numbers import spoken_numbers

HTTP_URL = r"^https?://"
FORBIDDEN_EXTRA = ("model", "messages", "stream", "max_tokens", "temperature")
_SENTENCE_END = re.compile(r"([.!?;…][\"')\]”’]*)\s+")
_WORD = re.compile(r"\w")
_TIGHT = re.compile(r"\s+([.,!?;:…])")
_CHINESE = re.compile(r"[\u3400-\u9fff]")
_CHINESE_END = re.compile(r"([。！？；][”’」』）]*)(?=\S)")


class _Node(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    base_url: str = Field(pattern=HTTP_URL)
    model: str = Field(min_length=1)
    api_key_env: str = "OPENAI_API_KEY"
    timeout_s: float = Field(120.0, gt=0)

    def url(self, path: str) -> str:
        return self.base_url.rstrip("/") + path

    def headers(self) -> dict[str, str]:
        key = os.environ.get(self.api_key_env)
        return {"Authorization": f"Bearer {key}"} if key else {}

    def settings(self) -> dict[str, Any]:
        """The identity's settings: every option (the key variable's name, never its value)."""
        return self.model_dump(mode="json")


class OpenAiTranscriptionNode(_Node):
    kind: Literal["openai_transcription"]
    language: str = ""
    response_format: Literal["verbose_json", "json"] = "verbose_json"


class OpenAiChatNode(_Node):
    kind: Literal["openai_chat"]
    max_tokens: int | None = Field(None, ge=1, le=1024)  # set: the sessions' default
    temperature: float | None = Field(None, ge=0.0, le=2.0)  # set: the sessions' default
    extra_body: dict[str, Any] = {}

    @field_validator("extra_body")
    @classmethod
    def _no_core_fields(cls, value: dict[str, Any]) -> dict[str, Any]:
        clash = sorted(set(value) & set(FORBIDDEN_EXTRA))
        if clash:
            raise ValueError(f"extra_body cannot set {clash}")
        return value


class OpenAiSpeechNode(_Node):
    kind: Literal["openai_speech"]
    voice: str = "default"
    language: str = ""
    reference_audio_path: str = ""
    reference_text: str = ""
    max_sentence_words: int = Field(24, ge=1)
    sample_rate: int = Field(24000, ge=8000, le=192000)


NODE_KINDS: dict[str, dict[str, type[_Node]]] = {
    "asr": {"openai_transcription": OpenAiTranscriptionNode},
    "llm": {"openai_chat": OpenAiChatNode},
    "tts": {"openai_speech": OpenAiSpeechNode},
}
ServiceNode = OpenAiTranscriptionNode | OpenAiChatNode | OpenAiSpeechNode


def parse_node(role: str, raw: dict[str, Any]) -> _Node:
    """The node of ``role`` that ``raw`` describes; errors name the role and the field."""
    from pydantic import ValidationError

    kinds = NODE_KINDS.get(role, {})
    kind = raw.get("kind")
    if kind not in kinds:
        allowed = sorted(kinds) or "none (use a registry key)"
        raise ValueError(f"{role}.kind: {kind!r} is not a service node kind for {role} (use {allowed})")
    try:
        return kinds[kind].model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise ValueError(f"{role}.{where}: {first['msg']}") from None


def _failure(role: str, node: _Node, message: str) -> FdbError:
    return FdbError(f"{role} node ({node.kind}, model {node.model!r}): {message}",
                    "check that the service runs and that the node's base_url, model and api_key_env are right")


def redact(text: str, node: _Node) -> str:
    """``text`` without the node's key (a service may echo it: "Incorrect API key provided")."""
    key = os.environ.get(node.api_key_env) or ""
    return redact_values(text, [key], keylike=False) if len(key) >= 4 else text


def _answer_text(reply: Any, node: _Node) -> str:
    try:
        return redact(reply.text, node)[:200]
    except Exception:  # a streamed body that was not read
        return ""


# --------------------------------------------------------------------------------- clients


class OpenAiTranscription:
    """``openai_transcription``: the :class:`fdb.models.asr_openai.OpenAiCompatibleAsr` client."""

    remote = True

    def __init__(self, node: OpenAiTranscriptionNode) -> None:
        from fdb.models.asr_openai import OpenAiCompatibleAsr

        self.node = node
        self._client = OpenAiCompatibleAsr(
            node.base_url, node.model, api_key_env=node.api_key_env, language=node.language or None,
            timeout_s=node.timeout_s, max_attempts=1, key_required=False,
            response_format=node.response_format, words_required=False)
        self.identity = BackendIdentity(kind="asr", name=f"openai_transcription/{node.model}",
                                        settings=node.settings())

    def transcribe(self, samples: np.ndarray):
        try:
            return self._client.transcribe(samples)
        except FdbError as exc:  # no chained original: it may quote a reply that echoes the key
            raise _failure("asr", self.node, redact(exc.message, self.node)) from None


class OpenAiChat:
    """``openai_chat``: the same interface as :class:`fdb.models.llm.SmolLm2`."""

    remote = True

    def __init__(self, node: OpenAiChatNode) -> None:
        self.node = node
        self.identity = BackendIdentity(kind="llm", name=f"openai_chat/{node.model}", settings=node.settings())

    def _body(self, messages: list[dict[str, str]], max_tokens: int, temperature: float | None) -> dict:
        body = {**self.node.extra_body, "model": self.node.model, "messages": messages, "stream": True,
                "max_tokens": max_tokens}
        if temperature is not None:
            body["temperature"] = temperature
        return body

    def stream_reply(self, messages: list[dict[str, str]], max_tokens: int = 48,
                     temperature: float | None = 0.0) -> Iterator[str]:
        """The reply's text pieces as the service streams them; ``close()`` ends the request."""
        import httpx

        url = self.node.url("/chat/completions")
        with httpx.Client(timeout=self.node.timeout_s) as client:
            try:
                with client.stream("POST", url, json=self._body(messages, max_tokens, temperature),
                                   headers=self.node.headers()) as reply:
                    if reply.status_code != 200:
                        reply.read()
                        raise _failure("llm", self.node, f"{url} answered {reply.status_code}: "
                                       f"{_answer_text(reply, self.node)!r}")
                    yield from _sse_pieces(reply.iter_lines(), url, self.node)
            except httpx.HTTPError as exc:
                raise _failure("llm", self.node, f"cannot reach {url}: {type(exc).__name__}: {exc}") from exc

    def reply(self, messages: list[dict[str, str]], max_tokens: int = 48, temperature: float | None = 0.0) -> str:
        return "".join(self.stream_reply(messages, max_tokens, temperature)).strip()


def _sse_pieces(lines: Iterator[str], url: str, node: _Node) -> Iterator[str]:
    """The ``choices[0].delta.content`` pieces of a chat completion event stream."""
    for line in lines:
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            return
        try:
            event = json.loads(data)
        except ValueError as exc:
            raise FdbError(f"{url} streamed a line that is not JSON: {data[:120]!r}") from exc
        if "error" in event:
            raise FdbError(f"{url} streamed an error: {redact(str(event['error']), node)[:200]}")
        choices = event.get("choices") or [{}]
        piece = (choices[0].get("delta") or {}).get("content")
        if piece:
            yield piece


def sentences(text: str, max_words: int) -> list[str]:
    """``text`` cut after ``. ! ? ; …`` (closing quotes and brackets included), after Chinese end
    punctuation followed by more text, and at line ends,
    each piece at most ``max_words`` words (a longer one is cut at a comma, colon or dash in its
    second half of words, else at ``max_words``)."""
    out = []
    text = _CHINESE_END.sub("\\1\n", _SENTENCE_END.sub("\\1\n", text))
    for sentence in text.split("\n"):
        words = sentence.split()
        while len(words) > max_words:
            cut = max_words
            for i in range(max_words, max(max_words // 2, 1) - 1, -1):
                if words[i - 1][-1:] in ",:—–-":
                    cut = i
                    break
            out.append(" ".join(words[:cut]))
            words = words[cut:]
        if words:
            out.append(" ".join(words))
    return out


class OpenAiSpeech:
    """``openai_speech``: the :class:`fdb.models.tts.TtsBackend` protocol, one request per
    sentence, float32 chunks at ``rate`` (the node's ``sample_rate``)."""

    remote = True

    def __init__(self, node: OpenAiSpeechNode) -> None:
        self.node = node
        self.rate = node.sample_rate
        self.identity = BackendIdentity(kind="tts", name=f"openai_speech/{node.model}", settings=node.settings())

    def _language(self, sentence: str, heard: str | None = None) -> str | None:
        """The sentence's tag: none without ``language``; a fixed name as it is; for ``auto``
        the language the recognizer last heard in an answered turn (``heard``, a code such as
        "en" or a name such as "english", written as a name: "English"). With a fixed name, and
        with ``auto`` before the recognizer has named one, a sentence with Chinese characters is
        Chinese and ``auto`` tags the others English."""
        if not self.node.language:
            return None
        if self.node.language == "auto" and heard:
            return language_name(heard)
        if _CHINESE.search(sentence):
            return "Chinese"
        return "English" if self.node.language == "auto" else self.node.language

    def _body(self, sentence: str, heard: str | None = None) -> dict[str, Any]:
        node = self.node
        language = self._language(sentence, heard)
        if language is not None and language.lower() in ("english", "en"):
            sentence = spoken_numbers(sentence)
        body: dict[str, Any] = {"model": node.model, "voice": node.voice, "input": sentence,
                                "response_format": "pcm", "stream": True}
        if language is not None:
            body["language"] = language
        if node.reference_audio_path:
            body["references"] = [{"audio_path": node.reference_audio_path, "text": node.reference_text}]
        return body

    def _speak(self, client: Any, sentence: str, heard: str | None = None) -> np.ndarray:
        import httpx

        from fdb.audio import pcm16_to_float, resample

        url = self.node.url("/audio/speech")
        try:
            with client.stream("POST", url, json=self._body(sentence, heard), headers=self.node.headers()) as reply:
                if reply.status_code != 200:
                    reply.read()
                    raise _failure("tts", self.node,
                                   f"{url} answered {reply.status_code}: {_answer_text(reply, self.node)!r}")
                rate = int(reply.headers.get("x-sample-rate") or self.node.sample_rate)
                pcm = b"".join(reply.iter_bytes())
        except httpx.HTTPError as exc:
            raise _failure("tts", self.node, f"cannot reach {url}: {type(exc).__name__}: {exc}") from exc
        samples = pcm16_to_float(pcm[: len(pcm) // 2 * 2])
        return resample(samples, rate, self.rate)

    def stream(self, text: str, heard_language: str | None = None) -> Iterator[np.ndarray]:
        import httpx

        from serving.realtime.chunker import speakable

        with httpx.Client(timeout=self.node.timeout_s) as client:
            for sentence in sentences(text, self.node.max_sentence_words):
                spoken = _TIGHT.sub(r"\1", speakable(sentence))  # "**there**." -> "there."
                if _WORD.search(spoken):  # a sentence of emoji or punctuation alone is not sent
                    yield self._speak(client, spoken, heard_language)

    def synthesize(self, text: str, heard_language: str | None = None) -> np.ndarray:
        parts = list(self.stream(text, heard_language))
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)


# Whisper's codes of the languages speech services commonly speak (Qwen3-TTS's ten), as names.
_LANGUAGE_NAMES = {"zh": "Chinese", "en": "English", "ja": "Japanese", "ko": "Korean", "de": "German",
                   "fr": "French", "ru": "Russian", "pt": "Portuguese", "es": "Spanish", "it": "Italian"}


def language_name(reported: str) -> str:
    """A recognizer's language as a name: a known code by the table, a name capitalized
    ("english" -> "English"); anything else as reported (the service then says what it speaks)."""
    reported = reported.strip()
    return _LANGUAGE_NAMES.get(reported.lower(), reported[:1].upper() + reported[1:] if reported.isalpha() else reported)


CLIENTS = {OpenAiTranscriptionNode: OpenAiTranscription, OpenAiChatNode: OpenAiChat,
           OpenAiSpeechNode: OpenAiSpeech}


def build(node: _Node) -> Any:
    """The client of ``node``."""
    return CLIENTS[type(node)](node)


# ---------------------------------------------------------------------------------- probes


def probe(role: str, node: _Node, client: Any) -> None:
    """The startup probe: ``{base_url}/models`` answers 200 listing the model; ``openai_chat``
    then streams one token. Raises FdbError naming the role, the kind and the URL."""
    import httpx

    url = node.url("/models")
    try:
        reply = httpx.get(url, headers=node.headers(), timeout=min(node.timeout_s, 30.0))
    except httpx.HTTPError as exc:
        raise _failure(role, node, f"cannot reach {url}: {type(exc).__name__}: {exc}") from exc
    if reply.status_code != 200:
        raise _failure(role, node, f"{url} answered {reply.status_code}")
    try:
        served = [str(item["id"]) for item in reply.json()["data"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise _failure(role, node, f"{url} answered 200 without a model list") from exc
    if node.model not in served:
        raise _failure(role, node, f"{url} does not list model {node.model!r} (it serves {served[:10]})")
    if isinstance(node, OpenAiChatNode):
        tokens = client.stream_reply([{"role": "user", "content": "Hi"}], 1, node.temperature)
        try:
            next(tokens, None)
        except FdbError as exc:
            raise FdbError(f"the first token failed: {exc.message}", exc.hint) from exc
        finally:
            tokens.close()
