"""``POST /v1/audio/speech``: the deployment's TTS voice over HTTP, or a pass-through.

Without a ``speech_service`` the embedded Piper voice (en_US joe medium, 22,050 Hz mono PCM16)
speaks ``input``. Piper synthesizes one sentence at a time; each sentence is sent as soon as it
is ready:

- ``stream_format: "sse"``: ``text/event-stream`` of ``speech.audio.delta`` events (``audio``:
  base64 PCM16) and one final ``speech.audio.done``;
- ``stream: true`` or ``stream_format: "audio"``: the raw bytes of ``response_format`` (``pcm``:
  ``audio/pcm``; ``wav``: ``audio/wav`` with a streaming header whose sizes are 0xFFFFFFFF);
- otherwise the whole body once synthesis finished.

Every answer carries ``X-Sample-Rate``, ``X-Channels: 1`` and ``X-Bit-Depth: 16``. This voice
cannot clone: a request with ``ref_audio`` (or ``references``) is refused with 400
``voice_cloning_unsupported`` unless it sets ``ignore_ref_audio: true``, and then the built-in
voice speaks. A backend that clones (the ``csm_gpu`` node, :mod:`serving.gpu.csm`) takes
``ref_audio`` (``data:audio/wav;base64,…`` or a ``file://`` path on the server, at most
``MAX_REFERENCE_S`` seconds) with ``ref_text`` as the voice to speak in, and streams one 80 ms frame
per chunk; the answer waits for the first frame, so that a refusal before it (a prompt past the
engine's ``max_len``: 400 ``input_too_long``) is an error answer. Other extra fields
(``max_new_tokens``, ``task_type``, ...) are ignored.

With ``speech_service`` set, the request body goes unchanged (``model`` replaced when the service
names one) to ``{base_url}/audio/speech`` and the answer's status, body and audio headers come
back as they arrive; reference audio is the service's business then.

With the system's ``reply_delay_ms`` (a handicap, 0 = off) the first audio of every answer is
held back that long once it is ready (an ``asyncio.sleep``: other requests go on meanwhile).
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import threading
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import Any, Literal

import httpx
import numpy as np
import soundfile as sf
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fdb.audio import float_to_pcm16, pcm16_to_float, resample, wav_bytes
from fdb.errors import FdbError
from fdb.session_settings import MAX_REFERENCE_S
from serving.systems import SpeechService, SystemConfig

router = APIRouter()
VOICE = "en_US-joe-medium"
VOICES = (VOICE, "default")
PIPER_RATE = 22050
MAX_INPUT_CHARS = 4096
RELAYED_HEADERS = ("content-type", "x-sample-rate", "x-channels", "x-bit-depth")


class SpeechRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str | None = None
    input: str = Field(min_length=1, max_length=MAX_INPUT_CHARS)
    voice: str | None = None
    response_format: Literal["pcm", "wav"] = "pcm"
    stream: bool = False
    stream_format: Literal["audio", "sse"] | None = None
    ref_audio: Any = None
    ref_text: str | None = None
    references: Any = None
    ignore_ref_audio: bool = False


def speech_capabilities(system: SystemConfig) -> dict[str, Any]:
    """The speech endpoint's part of the capability grant."""
    service = system.speech_service
    if service is not None:
        return {
            "endpoint": "/v1/audio/speech",
            "backend": "pass-through",
            "voice_cloning": "service-defined",
            "service_model": service.model,
        }
    node = system.backends.tts
    if node == "none":
        return {"endpoint": None, "backend": "none"}
    if getattr(node, "kind", None) == "csm_gpu":  # serving/gpu/csm.py
        return {
            "endpoint": "/v1/audio/speech",
            "backend": node.kind,
            "voices": ["default"],
            "voice_cloning": True,
            "weights": node.source().label(),
            "sample_rate": 24000,
            "channels": 1,
            "bit_depth": 16,
            "response_formats": ["pcm", "wav"],
            "stream_formats": ["audio", "sse"],
            "chunking": "one 80 ms Mimi frame per chunk",
            "frame_rate_hz": 12.5,
        }
    if not isinstance(node, str):  # an openai_speech node speaks (serving/service_nodes.py)
        return {
            "endpoint": "/v1/audio/speech",
            "backend": node.kind,
            "service_model": node.model,
            "voices": [node.voice],
            "sample_rate": node.sample_rate,
            "channels": 1,
            "bit_depth": 16,
            "response_formats": ["pcm", "wav"],
            "stream_formats": ["audio", "sse"],
            "chunking": "one chunk per sentence",
        }
    return {
        "endpoint": "/v1/audio/speech",
        "backend": "piper",
        "voices": [VOICE],
        "voice_cloning": False,
        "ref_audio": "refused (400 voice_cloning_unsupported) unless ignore_ref_audio is true",
        "sample_rate": PIPER_RATE,
        "channels": 1,
        "bit_depth": 16,
        "response_formats": ["pcm", "wav"],
        "stream_formats": ["audio", "sse"],
        "chunking": "one chunk per sentence",
    }


def _error(status: int, code: str, message: str, param: str | None = None) -> JSONResponse:
    return JSONResponse(
        {
            "error": {
                "type": "invalid_request_error" if status == 400 else "server_error",
                "code": code,
                "message": message,
                "param": param,
            }
        },
        status_code=status,
    )


def _check(req: SpeechRequest, system: SystemConfig, clones: bool = False) -> JSONResponse | None:
    if req.model not in (None, system.model):
        return _error(
            400,
            "model_not_found",
            f"this server serves {system.model!r}, not {req.model!r}",
            "model",
        )
    tts = system.backends.tts
    voices = VOICES if isinstance(tts, str) else (getattr(tts, "voice", "default"), "default")
    if req.voice not in (None, *voices):
        return _error(
            400, "voice_not_found", f"unknown voice {req.voice!r}; voices: {list(voices)}", "voice"
        )
    if (
        (req.ref_audio is not None or req.references is not None)
        and not req.ignore_ref_audio
        and not clones
    ):
        return _error(
            400,
            "voice_cloning_unsupported",
            f"{system.name} speaks with the built-in Piper voice {VOICE} and cannot clone a voice "
            "from ref_audio; leave ref_audio out, or send ignore_ref_audio: true to accept the "
            "built-in voice",
            "ref_audio",
        )
    return None


def _wav_header(rate: int) -> bytes:
    """A PCM16 mono RIFF header for a stream of unknown length (sizes 0xFFFFFFFF)."""
    unknown = (0xFFFFFFFF).to_bytes(4, "little")
    fmt = (
        (1).to_bytes(2, "little")
        + (1).to_bytes(2, "little")
        + rate.to_bytes(4, "little")
        + (rate * 2).to_bytes(4, "little")
        + (2).to_bytes(2, "little")
        + (16).to_bytes(2, "little")
    )
    return (
        b"RIFF" + unknown + b"WAVE" + b"fmt " + (16).to_bytes(4, "little") + fmt + b"data" + unknown
    )


def reference_audio(value: Any, rate: int) -> np.ndarray:
    """``ref_audio`` (a wav as a ``data:`` URI or a ``file://`` path) as float mono at ``rate``;
    ValueError with the reason when it cannot be read."""

    if not isinstance(value, str):
        raise ValueError("ref_audio must be a data:audio/wav;base64 URI or a file:// path")
    if value.startswith("data:"):
        _, _, payload = value.partition(",")
        try:
            source: Any = io.BytesIO(base64.b64decode(payload, validate=True))
        except ValueError as exc:
            raise ValueError(f"ref_audio is not valid base64 ({exc})") from None
    elif value.startswith("file://"):
        source = value.removeprefix("file://")
    else:
        raise ValueError("ref_audio must be a data:audio/wav;base64 URI or a file:// path")
    try:
        samples, source_rate = sf.read(source, dtype="float32", always_2d=True)
    except (sf.LibsndfileError, OSError) as exc:
        raise ValueError(f"ref_audio cannot be read as audio ({exc})") from None
    if len(samples) > MAX_REFERENCE_S * source_rate:
        raise ValueError(f"ref_audio is longer than {MAX_REFERENCE_S:.0f} s")
    return resample(samples.mean(axis=1), int(source_rate), rate)


async def sentences(hub, text: str, **voice: Any) -> AsyncIterator[bytes]:
    """PCM16 of each chunk as the TTS finishes it (synthesis runs in the model pool); ``voice``:
    ``ref_audio``/``ref_text`` for a backend that clones."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()
    stop = threading.Event()
    if getattr(hub.tts, "clones", False):
        voice["cancelled"] = stop

    def work() -> None:
        try:
            for chunk in hub.tts.stream(text, **voice):
                if stop.is_set():
                    break
                loop.call_soon_threadsafe(queue.put_nowait, float_to_pcm16(chunk))
        except BaseException as exc:  # handed to the response, which ends the stream
            loop.call_soon_threadsafe(queue.put_nowait, exc)
        finally:
            loop.call_soon_threadsafe(queue.put_nowait, None)

    hub.executor.submit(work)
    try:
        while (item := await queue.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            if item:
                yield item
    finally:
        stop.set()


async def delayed(chunks: AsyncGenerator[bytes, None], delay_ms: int) -> AsyncIterator[bytes]:
    """``chunks`` with the first non-empty one held back ``delay_ms`` once it is ready (closed with
    this generator, so a client that goes away stops the synthesis as before)."""
    waited = delay_ms <= 0
    async with aclosing(chunks):
        async for chunk in chunks:
            if chunk and not waited:
                waited = True
                await asyncio.sleep(delay_ms / 1000.0)
            yield chunk


async def _sse(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    total = 0
    async for pcm in chunks:
        total += len(pcm)
        event = {"type": "speech.audio.delta", "audio": base64.b64encode(pcm).decode("ascii")}
        yield f"data: {json.dumps(event)}\n\n".encode()
    done = {"type": "speech.audio.done", "usage": {"audio_bytes": total}}
    yield f"data: {json.dumps(done)}\n\n".encode()


async def _after(first: bytes, rest: AsyncGenerator[bytes, None]) -> AsyncGenerator[bytes, None]:
    """``first`` (when not empty), then ``rest`` (closed with this generator)."""
    async with aclosing(rest):
        if first:
            yield first
        async for chunk in rest:
            yield chunk


async def _prefixed(prefix: bytes, chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    yield prefix
    async for pcm in chunks:
        yield pcm


async def _piper(req: SpeechRequest, hub, delay_ms: int = 0) -> Response:
    rate = int(hub.tts.rate)
    headers = {
        "X-Sample-Rate": str(rate),
        "X-Channels": "1",
        "X-Bit-Depth": "16",
        "Cache-Control": "no-store",
    }
    voice: dict[str, Any] = {}
    if getattr(hub.tts, "clones", False) and req.ref_audio is not None and not req.ignore_ref_audio:
        try:
            voice = {
                "ref_audio": reference_audio(req.ref_audio, rate),
                "ref_text": req.ref_text or "",
            }
        except ValueError as exc:
            return _error(400, "invalid_ref_audio", str(exc), "ref_audio")
    spoken: AsyncGenerator[bytes, None] = sentences(hub, req.input, **voice)
    if getattr(hub.tts, "clones", False):
        # a GPU engine refuses a request in its own thread: wait for the first audio, so that a
        # refusal is an error answer, not an empty 200 or a bare 500
        try:
            first = await anext(spoken, b"")
        except FdbError as exc:
            status = getattr(exc, "status", 500)
            return _error(
                status,
                getattr(exc, "code", "speech_failed"),
                exc.one_line(),
                "input" if status == 400 else None,
            )
        spoken = _after(first, spoken)
    chunks = delayed(spoken, delay_ms)
    if req.stream_format == "sse":
        return StreamingResponse(_sse(chunks), media_type="text/event-stream", headers=headers)
    wav = req.response_format == "wav"
    media = "audio/wav" if wav else "audio/pcm"
    if req.stream or req.stream_format == "audio":
        body = _prefixed(_wav_header(rate), chunks) if wav else chunks
        return StreamingResponse(body, media_type=media, headers=headers)
    pcm = b"".join([chunk async for chunk in chunks])
    if wav:
        return Response(wav_bytes(pcm16_to_float(pcm), rate), media_type=media, headers=headers)
    return Response(pcm, media_type=media, headers=headers)


async def _pass_through(
    service: SpeechService, body: dict[str, Any], delay_ms: int = 0
) -> Response:
    if service.model:
        body = {**body, "model": service.model}
    headers = {}
    if service.api_key_env:
        key = os.environ.get(service.api_key_env)
        if not key:
            return _error(
                503,
                "service_key_missing",
                f"the speech service key variable {service.api_key_env} is not set on the server",
            )
        headers["Authorization"] = f"Bearer {key}"
    client = httpx.AsyncClient(timeout=service.timeout_s)
    try:
        upstream = await client.send(
            client.build_request(
                "POST", service.base_url.rstrip("/") + "/audio/speech", json=body, headers=headers
            ),
            stream=True,
        )
    except httpx.HTTPError as exc:
        await client.aclose()
        return _error(
            502, "service_unreachable", f"the speech service failed: {type(exc).__name__}"
        )
    relayed = {k: v for k, v in upstream.headers.items() if k.lower() in RELAYED_HEADERS}

    async def relay() -> AsyncIterator[bytes]:
        try:
            async for data in delayed(upstream.aiter_raw(), delay_ms):
                yield data
        finally:
            await upstream.aclose()
            await client.aclose()

    return StreamingResponse(
        relay(),
        status_code=upstream.status_code,
        headers=relayed,
        media_type=relayed.get("content-type"),
    )


@router.post("/v1/audio/speech")
async def speech(request: Request) -> Response:
    runtime = request.app.state.runtime
    system: SystemConfig = runtime.system
    try:
        raw = await request.json()
    except ValueError:
        return _error(400, "invalid_json", "the request body is not JSON")
    if not isinstance(raw, dict):
        return _error(400, "invalid_json", "the request body must be a JSON object")
    if system.speech_service is not None:
        return await _pass_through(system.speech_service, raw, system.reply_delay_ms)
    try:
        req = SpeechRequest.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        return _error(400, "invalid_request", f"{where}: {first['msg']}", where)
    if not runtime.ready:
        return _error(503, "not_ready", "instance is not ready")
    if runtime.hub.tts is None:
        return _error(
            404, "speech_unavailable", f"system {system.name} has no TTS (backends.tts: none)"
        )
    refused = _check(req, system, getattr(runtime.hub.tts, "clones", False))
    if refused is not None:
        return refused
    return await _piper(req, runtime.hub, system.reply_delay_ms)
