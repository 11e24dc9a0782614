"""Service nodes: a cascade role (ASR, LLM or TTS) served by any OpenAI-compatible endpoint.

A launch file picks a node for a role instead of an embedded backend's registry key (each kind
is an entry of ``serving.graph.registry``, which parses and builds it)::

    backends:
      asr: {kind: openai_transcription, base_url: http://127.0.0.1:8102/v1, model: whisper-1,
            health: request}
      llm: {kind: openai_chat, base_url: http://127.0.0.1:8103/v1, model: smollm2}
      tts: {kind: openai_speech, base_url: http://127.0.0.1:8105/v1, model: fdb/embedded-cascade}

- ``openai_transcription`` sends each finished utterance as a 16 kHz WAV to
  ``{base_url}/audio/transcriptions`` (``response_format`` ``verbose_json``, ``json`` or
  ``text``) and reads the answer by its Content-Type: JSON ``{"text": ...}`` (a ``words`` list
  and a ``language`` when there), a JSON string, or plain text;
- ``openai_chat`` streams one chat completion (SSE) from ``{base_url}/chat/completions`` per
  turn, with the session's ``max_tokens`` and ``temperature`` plus ``extra_body``; an answer
  that is not an event stream (a server that ignores ``stream``) is read as one JSON completion;
- ``openai_speech`` cuts the text into sentences, drops markup, emoji and URLs
  (:func:`serving.conversation.chunker.speakable`), skips a sentence with no word left, writes the
  numbers of an English-tagged sentence as words (:mod:`serving.spoken_numbers`), and sends
  one request per sentence to ``{base_url}/audio/speech`` with ``response_format`` (``pcm``, or
  ``wav``) and ``stream`` (true) as set. The answer is read by its Content-Type, chunked or
  not (:mod:`fdb.speech_formats`): raw PCM16 (``audio/pcm``, ``audio/pcm_s16le``,
  ``audio/L16;rate=N``, ``audio/x-raw``, ``application/octet-stream``, ...) at its
  ``X-Sample-Rate`` header's rate, else the Content-Type's ``rate=``, else ``sample_rate``
  (24 kHz, as OpenAI's pcm); or WAV at its header's rate (mono kept, several channels averaged);
  then resampled to ``sample_rate``. A JSON or text answer is an error quoting its start.

The bearer token is read from the environment variable named by ``api_key_env`` at each
request, and nothing is sent when it is unset; it never appears in an identity, error or log.

Before the server reports ready every node is checked (:func:`probe`) as its ``health`` says:

- ``models`` (the default): ``GET {base_url}/models`` answers 200 and lists the node's model;
  an ``openai_chat`` node then streams one token sampled with its settings;
- ``request``: one real minimal request of the node's role: a 0.5 s transcription, a 1-token
  chat completion, the speech of "Hello." (it must come back as readable audio);
- ``none``: no check (the first session finds out).

A failure is one line naming the node, the check and the URL, with the fix: a server without a
model list (404/405) is told to use ``health: request`` or ``none``, a model the list lacks is
told which ones it has.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from typing import Any, Literal

import httpx
import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from fdb.audio import pcm16_to_float, resample, wav_bytes
from fdb.errors import FdbError
from fdb.io import redact_values
from fdb.models import BackendIdentity
from fdb.models.asr import ASR_RATE, Transcript
from fdb.models.asr_openai import AsrEndpointError, parse_verbose_json
from fdb.speech_formats import (
    FormatError,
    WavStream,
    is_text,
    kind,
    little_endian,
    raw_format,
    server_text,
)
from serving.conversation.chunker import speakable
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
    health: Literal["models", "request", "none"] = (
        "models"  # the start-up check (see the module's text)
    )

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
    response_format: Literal["verbose_json", "json", "text"] = "verbose_json"


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
    response_format: Literal["pcm", "wav"] = "pcm"
    stream: bool = True


RUNTIME_HINT = (
    "check that the service runs and that the node's base_url, model and api_key_env are right"
)


def _failure(role: str, node: _Node, message: str, hint: str = RUNTIME_HINT) -> FdbError:
    return FdbError(f"{role} node ({node.kind}, model {node.model!r}): {message}", hint)


def redact(text: str, node: _Node) -> str:
    """``text`` without the node's key (a service may echo it: "Incorrect API key provided")."""
    key = os.environ.get(node.api_key_env) or ""
    return redact_values(text, [key], keylike=False) if len(key) >= 4 else text


def _answer_text(reply: Any, node: _Node, limit: int = 200) -> str:
    """The start of a reply's body for a message: the key out, never payload bytes."""
    try:
        body = reply.content
    except Exception:  # a streamed body that was not read
        return ""
    return redact(server_text(body if not is_text(body[:4096]) else body[:4096], limit), node)


# --------------------------------------------------------------------------------- clients


class OpenAiTranscription:
    """``openai_transcription``: the :class:`fdb.models.asr.AsrBackend` protocol over HTTP; the
    answer is JSON (``text``, and ``words``/``language`` when there) or plain text."""

    remote = True

    def __init__(self, node: OpenAiTranscriptionNode) -> None:
        self.node = node
        self.identity = BackendIdentity(
            kind="asr", name=f"openai_transcription/{node.model}", settings=node.settings()
        )

    def _form(self) -> dict[str, str]:
        form = {
            "model": self.node.model,
            "response_format": self.node.response_format,
            "temperature": "0",
        }
        if self.node.response_format == "verbose_json":
            form["timestamp_granularities[]"] = "word"
        if self.node.language:
            form["language"] = self.node.language
        return form

    def transcribe(self, samples: np.ndarray):
        samples = np.ascontiguousarray(samples, dtype=np.float32)
        if len(samples) == 0:
            return Transcript("", [])
        url = self.node.url("/audio/transcriptions")
        try:
            reply = httpx.post(
                url,
                data=self._form(),
                files={"file": ("audio.wav", wav_bytes(samples, ASR_RATE), "audio/wav")},
                headers=self.node.headers(),
                timeout=self.node.timeout_s,
            )
        except (
            httpx.HTTPError
        ) as exc:  # no chained original: it may quote a reply that echoes the key
            raise _failure(
                "asr",
                self.node,
                f"cannot reach {url}: {type(exc).__name__}: "
                f"{redact(server_text(str(exc)), self.node)}",
            ) from None
        if reply.status_code != 200:
            raise _failure(
                "asr",
                self.node,
                f"{url} answered {reply.status_code}: {_answer_text(reply, self.node)!r}",
            )
        return transcript_of(reply, url, self.node)


def transcript_of(reply: Any, url: str, node: _Node):
    """The transcript of a 200 answer: JSON ``{"text": ...}`` (``words`` and ``language`` when
    there), a JSON string, or plain text; anything else (binary, JSON without ``text``) fails."""

    ctype = reply.headers.get("content-type", "")
    body = reply.content
    try:
        value = json.loads(body) if body.strip()[:1] in (b"{", b"[", b'"') else None
    except ValueError:
        value = None
    if isinstance(value, dict):
        language = value.get("language") if isinstance(value.get("language"), str) else None
        if isinstance(value.get("words"), list) and value["words"]:
            try:
                found = parse_verbose_json(value, url)
            except AsrEndpointError as exc:
                raise _failure("asr", node, exc.message) from None
            return Transcript(found.text, found.words, language or None)
        if isinstance(value.get("text"), str):
            return Transcript(value["text"].strip(), [], language or None)
        raise _failure(
            "asr",
            node,
            f"{url} answered JSON without a text field: {_answer_text(reply, node)!r}",
            "set backends.asr.response_format to what the service supports (json, verbose_json or "
            "text)",
        )
    if isinstance(value, str):
        return Transcript(value.strip(), [])
    if not is_text(body) or kind(ctype) is not None:
        raise _failure(
            "asr",
            node,
            f"{url} answered {server_text(ctype, 80) or 'no Content-Type'} "
            f"({len(body)} bytes) instead of a transcript",
        )
    return Transcript(body.decode("utf-8").strip(), [])


class OpenAiChat:
    """``openai_chat``: the same interface as :class:`fdb.models.llm.SmolLm2`."""

    remote = True

    def __init__(self, node: OpenAiChatNode) -> None:
        self.node = node
        self.identity = BackendIdentity(
            kind="llm", name=f"openai_chat/{node.model}", settings=node.settings()
        )

    def _body(
        self, messages: list[dict[str, str]], max_tokens: int, temperature: float | None
    ) -> dict:
        body = {
            **self.node.extra_body,
            "model": self.node.model,
            "messages": messages,
            "stream": True,
            "max_tokens": max_tokens,
        }
        if temperature is not None:
            body["temperature"] = temperature
        return body

    def stream_reply(
        self, messages: list[dict[str, str]], max_tokens: int = 48, temperature: float | None = 0.0
    ) -> Iterator[str]:
        """The reply's text pieces as the service streams them; ``close()`` ends the request."""

        url = self.node.url("/chat/completions")
        with httpx.Client(timeout=self.node.timeout_s) as client:
            try:
                with client.stream(
                    "POST",
                    url,
                    json=self._body(messages, max_tokens, temperature),
                    headers=self.node.headers(),
                ) as reply:
                    if reply.status_code != 200:
                        reply.read()
                        raise _failure(
                            "llm",
                            self.node,
                            f"{url} answered {reply.status_code}: "
                            f"{_answer_text(reply, self.node)!r}",
                        )
                    if (
                        "json" in reply.headers.get("content-type", "").lower()
                    ):  # it ignored stream: true
                        reply.read()
                        yield from _completion_text(reply, url, self.node)
                        return
                    yield from _sse_pieces(reply.iter_lines(), url, self.node)
            except httpx.HTTPError as exc:
                raise _failure(
                    "llm",
                    self.node,
                    f"cannot reach {url}: {type(exc).__name__}: "
                    f"{redact(server_text(str(exc)), self.node)}",
                ) from None

    def reply(
        self, messages: list[dict[str, str]], max_tokens: int = 48, temperature: float | None = 0.0
    ) -> str:
        return "".join(self.stream_reply(messages, max_tokens, temperature)).strip()


def _completion_text(reply: Any, url: str, node: _Node) -> Iterator[str]:
    """The ``choices[0].message.content`` of a whole (non-streamed) chat completion."""
    try:
        event = reply.json()
        content = (event.get("choices") or [{}])[0].get("message", {}).get("content")
    except (ValueError, AttributeError, IndexError, TypeError):
        raise FdbError(
            f"{url} answered JSON that is not a chat completion: {_answer_text(reply, node)!r}"
        ) from None
    if isinstance(event, dict) and "error" in event:
        raise FdbError(f"{url} answered an error: {redact(server_text(str(event['error'])), node)}")
    if not isinstance(event.get("choices"), list):
        raise FdbError(
            f"{url} answered JSON that is not a chat completion: {_answer_text(reply, node)!r}"
        )
    if content:
        yield str(content)


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
            raise FdbError(
                f"{url} streamed a line that is not JSON: {redact(server_text(data, 120), node)!r}"
            ) from exc
        if not isinstance(event, dict):
            continue
        if "error" in event:
            raise FdbError(
                f"{url} streamed an error: {redact(server_text(str(event['error'])), node)}"
            )
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
        self.identity = BackendIdentity(
            kind="tts", name=f"openai_speech/{node.model}", settings=node.settings()
        )

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
        body: dict[str, Any] = {
            "model": node.model,
            "voice": node.voice,
            "input": sentence,
            "response_format": node.response_format,
            "stream": node.stream,
        }
        if language is not None:
            body["language"] = language
        if node.reference_audio_path:
            body["references"] = [
                {"audio_path": node.reference_audio_path, "text": node.reference_text}
            ]
        return body

    def _speak(self, client: Any, sentence: str, heard: str | None = None) -> np.ndarray:
        url = self.node.url("/audio/speech")
        try:
            with client.stream(
                "POST", url, json=self._body(sentence, heard), headers=self.node.headers()
            ) as reply:
                if reply.status_code != 200:
                    reply.read()
                    raise _failure(
                        "tts",
                        self.node,
                        f"{url} answered {reply.status_code}: {_answer_text(reply, self.node)!r}",
                    )
                return self._audio(reply, url)
        except httpx.HTTPError as exc:
            raise _failure(
                "tts",
                self.node,
                f"cannot reach {url}: {type(exc).__name__}: "
                f"{redact(server_text(str(exc)), self.node)}",
            ) from None

    def _audio(self, reply: Any, url: str) -> np.ndarray:
        """The float32 samples at ``self.rate`` of a 200 answer, read by its Content-Type."""

        ctype = reply.headers.get("content-type", "")
        found = kind(ctype)
        try:
            if found == "wav":
                wav = WavStream()
                pcm = b"".join(wav.feed(data) for data in reply.iter_bytes())
                if not wav.started:
                    raise FormatError("the WAV answer ended before its data chunk")
                rate, channels = wav.rate, wav.channels
            elif found == "pcm":
                declared = raw_format(reply.headers, ctype)
                rate, channels = declared.rate or self.node.sample_rate, declared.channels or 1
                pcm = little_endian(b"".join(reply.iter_bytes()), declared.big_endian)
            else:
                reply.read()
                raise FormatError(
                    f"answered {server_text(ctype, 80) or 'no Content-Type'} instead of audio "
                    f"(raw PCM16 or WAV): {_answer_text(reply, self.node)!r}"
                )
        except FormatError as exc:
            raise _failure(
                "tts",
                self.node,
                f"{url}: {exc}",
                "point the node at a server that answers raw PCM16 or WAV (response_format pcm or "
                "wav)",
            ) from None
        frame = 2 * channels
        samples = pcm16_to_float(pcm[: len(pcm) // frame * frame])
        if channels > 1:
            samples = samples.reshape(-1, channels).mean(axis=1).astype(np.float32)
        return resample(samples, rate, self.rate)

    def stream(self, text: str, heard_language: str | None = None) -> Iterator[np.ndarray]:
        with httpx.Client(timeout=self.node.timeout_s) as client:
            for sentence in sentences(text, self.node.max_sentence_words):
                spoken = _TIGHT.sub(r"\1", speakable(sentence))  # "**there**." -> "there."
                if _WORD.search(spoken):  # a sentence of emoji or punctuation alone is not sent
                    yield self._speak(client, spoken, heard_language)

    def synthesize(self, text: str, heard_language: str | None = None) -> np.ndarray:
        parts = list(self.stream(text, heard_language))
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)


# Whisper's codes of the languages speech services commonly speak (Qwen3-TTS's ten), as names.
_LANGUAGE_NAMES = {
    "zh": "Chinese",
    "en": "English",
    "ja": "Japanese",
    "ko": "Korean",
    "de": "German",
    "fr": "French",
    "ru": "Russian",
    "pt": "Portuguese",
    "es": "Spanish",
    "it": "Italian",
}


def language_name(reported: str) -> str:
    """A recognizer's language as a name: a known code by the table, a name capitalized
    ("english" -> "English"); anything else as reported (the service then says what it speaks)."""
    reported = reported.strip()
    return _LANGUAGE_NAMES.get(
        reported.lower(), reported[:1].upper() + reported[1:] if reported.isalpha() else reported
    )


# ---------------------------------------------------------------------------------- probes


def _check_hint(role: str, node: _Node, instead: str) -> str:
    """How to change the start-up check of ``role``'s node."""
    return f"{instead}; backends.{role}.health picks the start-up check: models, request or none"


def probe(role: str, node: _Node, client: Any) -> None:
    """The start-up check ``node.health`` names (see the module's text). Raises one FdbError
    naming the role, the kind, the check and the URL, with how to fix it or change the check."""
    if node.health == "none":
        return
    if node.health == "models":
        _probe_models(role, node)
    if isinstance(node, OpenAiChatNode) or node.health == "request":
        _probe_request(role, node, client)


def _probe_models(role: str, node: _Node) -> None:
    url = node.url("/models")

    def failed(message: str, hint: str) -> FdbError:
        return _failure(role, node, f"health check 'models' failed: {message}", hint)

    try:
        reply = httpx.get(url, headers=node.headers(), timeout=min(node.timeout_s, 30.0))
    except httpx.HTTPError as exc:
        raise failed(
            f"cannot reach {url}: {type(exc).__name__}: {redact(server_text(str(exc)), node)}",
            f"start the service, or fix backends.{role}.base_url (fdb appends /models)",
        ) from None
    if reply.status_code in (404, 405):
        raise failed(
            f"GET {url} answered {reply.status_code}: the server has no model list",
            _check_hint(
                role,
                node,
                f"set backends.{role}.health: request (one real {_ROLE_REQUEST[role]} "
                "at start-up) or none",
            ),
        )
    if reply.status_code in (401, 403):
        raise failed(
            f"GET {url} answered {reply.status_code}: {_answer_text(reply, node)!r}",
            _check_hint(
                role,
                node,
                f"export the service's key in {node.api_key_env} (backends.{role}."
                "api_key_env names the variable)",
            ),
        )
    if reply.status_code != 200:
        raise failed(
            f"GET {url} answered {reply.status_code}: {_answer_text(reply, node)!r}",
            _check_hint(role, node, "see the service's log"),
        )
    try:
        served = [str(item["id"]) for item in reply.json()["data"]]
    except (ValueError, KeyError, TypeError):
        raise failed(
            f'GET {url} answered 200 without an OpenAI model list ({{"data": [{{"id": ...}}]}}): '
            f"{_answer_text(reply, node, 120)!r}",
            _check_hint(role, node, f"set backends.{role}.health: request or none"),
        ) from None
    if node.model not in served:
        raise failed(
            f"GET {url} does not list model {node.model!r} (it serves {served[:10]})",
            _check_hint(
                role,
                node,
                f"set backends.{role}.model to one it serves, or health: request if "
                "it answers models it does not list",
            ),
        )


_ROLE_REQUEST = {
    "asr": "0.5 s transcription",
    "llm": "1-token chat completion",
    "tts": "speech of 'Hello.'",
}


def _probe_request(role: str, node: _Node, client: Any) -> None:
    """One real minimal request of the node's role; for a chat node also the token after the model
    list."""
    what = (
        "the first token"
        if node.health == "models"
        else f"health check 'request' ({_ROLE_REQUEST[role]})"
    )
    try:
        if isinstance(node, OpenAiChatNode):
            tokens = client.stream_reply([{"role": "user", "content": "Hi"}], 1, node.temperature)
            try:
                next(tokens, None)
            finally:
                tokens.close()
        elif isinstance(node, OpenAiTranscriptionNode):
            client.transcribe(np.zeros(8000, dtype=np.float32))
        else:
            with httpx.Client(timeout=node.timeout_s) as http:
                samples = client._speak(http, "Hello.")
            if len(samples) == 0:
                raise _failure(
                    role, node, f"{node.url('/audio/speech')} answered 200 without audio"
                )
    except FdbError as exc:
        if node.health == "models":  # the chat token after the model list
            raise FdbError(f"{what} failed: {exc.message}", exc.hint) from None
        fix = (
            exc.hint
            if exc.hint and exc.hint != RUNTIME_HINT
            else "check the service's log and the node's base_url, model and api_key_env"
        )
        raise FdbError(f"{what} failed: {exc.message}", _check_hint(role, node, fix)) from None
