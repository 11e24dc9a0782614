"""The TTS streaming client: one Seed-TTS row -> one ``POST /v1/audio/speech`` -> one
``TtsRequestRecord`` plus the PCM it received.

Request body: ``model`` (when given), ``input`` (the target text), ``ref_audio`` (inline
``data:audio/wav;base64,...`` or a ``file://`` URI of the prompt wav, or left out),
``ref_text`` (the prompt text, with ``ref_audio``), ``stream``, ``stream_format``,
``response_format`` (``pcm``), then the extra body merged over them.

The response is read by its Content-Type, never by what was asked for (the reading is
:mod:`fdb.speech_formats`, shared with the cascade's speech node):

- raw PCM16: ``audio/pcm``, ``audio/pcm_s16le`` (``_s16be``), ``audio/s16le``, ``audio/L16``,
  ``audio/x-raw`` (``format=S16LE``/``S16BE``), ``audio/raw``, ``audio/x-pcm``,
  ``application/octet-stream``, chunked or with a length. The rate comes from ``X-Sample-Rate``,
  else a ``rate=`` parameter of the Content-Type, else ``--sample-rate``; with none of them the
  request fails ("refusing to guess"). Channels from ``X-Channels`` (or ``channels=``), else
  ``--channels``, else 1; ``X-Bit-Depth`` (bits) / ``X-Sample-Width`` (bytes), when sent, must
  say 16 bits. Big-endian PCM is swapped to little-endian before it is kept.
- ``audio/wav`` / ``audio/x-wav`` / ``audio/wave``: the RIFF header is parsed as it streams; only
  the ``data`` payload counts as audio; rate and channels come from the ``fmt`` chunk.
- ``text/event-stream``: OpenAI ``speech.audio.delta`` (base64 PCM; ``response.output_audio.delta``
  and ``response.audio.delta`` alike) and ``speech.audio.done``, and the older sglang
  ``audio.speech.chunk`` (base64 WAV chunks, ``sample_rate`` in the event) ending with
  ``finish_reason`` or ``[DONE]``. The end the server declares is ``done_s``; audio that arrives
  after it is counted in ``bytes_after_done``.
- anything else (a JSON error, HTML, MP3): the request fails with the status and the body's
  start as text; a binary body is shown as its length only, so no payload byte reaches
  requests.jsonl or TTS.md.

Every time is ``time.perf_counter()`` minus the instant just before the request is sent. An
arrival is one read from the response stream that carried audio payload bytes (for SSE: the read
that completed an event with audio); empty reads and framing bytes are not arrivals.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import httpx

from fdb.datasets.seedtts import SeedTtsItem
from fdb.speech_formats import (
    FormatError,
    WavStream,
    is_text,
    kind,
    little_endian,
    positive_int,
    raw_format,
    sample_rate,
    server_text,
)
from fdb.tts_records import TtsRequestRecord
from recorders.tts_options import UNDECLARED, SpeechClientOptions
from recorders.tts_realtime import synthesize_realtime

AUDIO_HEADERS = (
    "content-type",
    "x-sample-rate",
    "x-channels",
    "x-bit-depth",
    "x-sample-width",
    "content-length",
    "transfer-encoding",
)
MAX_QUOTED_BODY = 1 << 20


def ref_audio_value(path: Path, mode: str) -> str | None:
    if mode == "none":
        return None
    if mode == "file":
        return path.resolve().as_uri()
    return "data:audio/wav;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def build_body(item: SeedTtsItem, opts: SpeechClientOptions) -> dict[str, object]:
    body: dict[str, object] = {
        "input": item.target_text,
        "stream": opts.stream,
        "stream_format": opts.stream_format,
        "response_format": opts.response_format,
    }
    if opts.model:
        body["model"] = opts.model
    ref = ref_audio_value(item.prompt_wav, opts.ref_audio)
    if ref is not None:
        body["ref_audio"] = ref
        body["ref_text"] = item.prompt_text
    return {**body, **opts.extra_body}


class _Failed(Exception):
    """A request that cannot be read; the message goes into the record (never payload bytes:
    whatever a server sent is quoted through :func:`fdb.speech_formats.server_text`)."""


def _int(value: str | None, what: str) -> int | None:
    try:
        return positive_int(value, what)
    except FormatError as exc:
        raise _Failed(str(exc)) from None


def _rate(value: str | None, what: str) -> int | None:
    """A declared sample rate: a positive integer in the audio range, else the request fails."""
    try:
        return sample_rate(positive_int(value, what), what)
    except FormatError as exc:
        raise _Failed(str(exc)) from None


class _Stream:
    """Collects audio arrivals of one response: times, byte counts, the PCM itself."""

    def __init__(self, t0: float, record: TtsRequestRecord):
        self.t0 = t0
        self.record = record
        self.pcm = bytearray()
        self.big_endian = False  # raw PCM declared big-endian: swapped once the body is read

    def now(self) -> float:
        return round(time.perf_counter() - self.t0, 6)

    def audio(self, data: bytes, at: float) -> None:
        if not data:
            return
        self.pcm += data
        self.record.chunks.append((at, len(data)))
        if self.record.done_s is not None:
            self.record.bytes_after_done += len(data)

    def done(self, at: float) -> None:
        if self.record.done_s is None:
            self.record.done_s = at


def _raw_format(response: httpx.Response, opts: SpeechClientOptions, stream: _Stream) -> None:
    record = stream.record
    try:
        declared = raw_format(response.headers, record.content_type)
    except FormatError as exc:
        raise _Failed(str(exc)) from None
    rate, record.rate_source = declared.rate, declared.rate_source
    if rate is None and opts.sample_rate:
        rate, record.rate_source = opts.sample_rate, "option"
    if rate is None:
        raise _Failed(UNDECLARED)
    record.sample_rate, record.channels, record.bit_depth = (
        rate,
        declared.channels or opts.channels or 1,
        16,
    )
    stream.big_endian = declared.big_endian


class _WavHeader:
    """A streamed WAV body (:class:`fdb.speech_formats.WavStream`); its format goes into the
    record."""

    def __init__(self, record: TtsRequestRecord):
        self.record = record
        self.wav = WavStream()

    @property
    def in_data(self) -> bool:
        return self.wav.started

    def feed(self, data: bytes) -> bytes:
        try:
            payload = self.wav.feed(data)
        except FormatError as exc:
            raise _Failed(str(exc)) from None
        rec = self.record
        if self.wav.rate is not None and rec.rate_source != "wav-header":
            rec.sample_rate, rec.channels, rec.bit_depth = (
                self.wav.rate,
                self.wav.channels,
                self.wav.bits,
            )
            rec.rate_source = "wav-header"
        return payload


async def _read_raw(response: httpx.Response, stream: _Stream, wav: _WavHeader | None) -> None:
    async for data in response.aiter_bytes():
        at = stream.now()
        stream.audio(wav.feed(data) if wav is not None else data, at)
    if wav is not None and not wav.in_data:
        raise _Failed("the audio/wav response ended before its data chunk")


def _b64(value: object, what: str) -> bytes:
    try:
        return base64.b64decode(value or "", validate=False)
    except (ValueError, TypeError):
        raise _Failed(f"{what} is not base64 audio") from None


def _sse_event(payload: str, stream: _Stream, at: float, opts: SpeechClientOptions) -> None:
    """One SSE ``data:`` payload: audio, the declared end, or an error."""
    if payload.strip() == "[DONE]":
        stream.done(at)
        return
    try:
        event = json.loads(payload)
    except json.JSONDecodeError:
        raise _Failed(f"an SSE event is not JSON: {server_text(payload, 120)!r}") from None
    if not isinstance(event, dict):
        raise _Failed(f"an SSE event is not a JSON object: {server_text(payload, 120)!r}")
    rec = stream.record
    kind = event.get("type") or event.get("object")
    if kind == "error" or (kind is None and "error" in event):
        raise _Failed(
            "the server sent an error event: "
            f"{server_text(json.dumps(event.get('error', event)), 300)}"
        )
    if kind in ("speech.audio.delta", "response.output_audio.delta", "response.audio.delta"):
        data = _b64(event.get("audio") or event.get("delta"), f"an SSE {kind} event")
        if data and rec.sample_rate is None:
            _fallback_rate(rec, opts, f"SSE {kind} PCM")
        stream.audio(data, at)
    elif kind in ("speech.audio.done", "response.output_audio.done", "response.audio.done"):
        stream.done(at)
    elif kind == "audio.speech.chunk":
        audio = event.get("audio") or {}
        if audio.get("sample_rate") and rec.sample_rate is None:
            rate = _rate(str(audio["sample_rate"]), "the SSE event's sample_rate")
            rec.sample_rate, rec.channels, rec.bit_depth, rec.rate_source = rate, 1, 16, "sse-event"
        data = _b64(audio.get("data"), "an SSE audio.speech.chunk event")
        if data[:4] == b"RIFF":
            data = _WavHeader(rec).feed(data)
        if data and rec.sample_rate is None:
            _fallback_rate(rec, opts, "SSE audio.speech.chunk audio")
        stream.audio(data, at)
        if event.get("finish_reason"):
            stream.done(at)


def _fallback_rate(rec: TtsRequestRecord, opts: SpeechClientOptions, what: str) -> None:
    """Audio arrived and nothing declared its rate: --sample-rate, else refuse."""
    if not opts.sample_rate:
        raise _Failed(UNDECLARED.replace("raw PCM", what))
    rec.sample_rate, rec.channels, rec.bit_depth, rec.rate_source = (
        opts.sample_rate,
        opts.channels or 1,
        16,
        "option",
    )


async def _read_sse(response: httpx.Response, stream: _Stream, opts: SpeechClientOptions) -> None:
    rec = stream.record
    rate = _rate(response.headers.get("x-sample-rate"), "X-Sample-Rate")
    if rate:
        channels = _int(response.headers.get("x-channels"), "X-Channels") or opts.channels or 1
        rec.sample_rate, rec.channels, rec.bit_depth, rec.rate_source = rate, channels, 16, "header"
    buffer = ""
    async for text in response.aiter_text():
        at = stream.now()
        buffer += text.replace("\r\n", "\n")
        while "\n\n" in buffer:
            block, buffer = buffer.split("\n\n", 1)
            data = "\n".join(
                line[5:].lstrip() for line in block.split("\n") if line.startswith("data:")
            )
            if data:
                _sse_event(data, stream, at, opts)
    data = "\n".join(line[5:].lstrip() for line in buffer.split("\n") if line.startswith("data:"))
    if data.strip():  # a last event without its blank line
        _sse_event(data, stream, stream.now(), opts)


async def _body_text(response: httpx.Response, limit: int) -> str:
    """The start of a body that is not audio, fit for a message (bounded, no payload bytes: a
    binary body is shown as its length, read up to 1 MiB)."""
    body = bytearray()
    async for data in response.aiter_bytes():
        body += data
        if len(body) > MAX_QUOTED_BODY:
            return (
                server_text(bytes(body[:4096]), limit)
                if is_text(bytes(body[:4096]))
                else f"<more than {MAX_QUOTED_BODY} bytes, not text>"
            )
    return server_text(bytes(body), limit)


async def _read(response: httpx.Response, stream: _Stream, opts: SpeechClientOptions) -> None:
    rec = stream.record
    rec.http_status = response.status_code
    ctype = response.headers.get("content-type", "")
    rec.content_type = ctype
    rec.headers = {k: v for k, v in response.headers.items() if k.lower() in AUDIO_HEADERS}
    if response.status_code != 200:
        raise _Failed(f"HTTP {response.status_code}: {await _body_text(response, 300)}")
    found = kind(ctype)
    if found == "sse":
        rec.transport = "sse"
        await _read_sse(response, stream, opts)
    elif found == "wav":
        rec.transport = "wav"
        await _read_raw(response, stream, _WavHeader(rec))
    elif found == "pcm":
        rec.transport = "pcm"
        _raw_format(response, opts, stream)
        await _read_raw(response, stream, None)
    else:
        raise _Failed(
            f"unexpected Content-Type {server_text(ctype, 80) or '(none)'!r} (expected raw PCM "
            "such as audio/pcm, audio/pcm_s16le or audio/L16;rate=N, audio/wav or "
            f"text/event-stream): {await _body_text(response, 200)}"
        )


async def synthesize(
    client: httpx.AsyncClient,
    item: SeedTtsItem,
    opts: SpeechClientOptions,
    *,
    concurrency: int,
    index: int,
    warmup: bool = False,
    level_t0: float | None = None,
) -> tuple[TtsRequestRecord, bytes]:
    """Send one request and read its whole response. Never raises for a server's fault: the
    record's ``status`` is ``failed`` with the reason in ``error``."""
    body = build_body(item, opts)
    record = TtsRequestRecord.begin(item, index, warmup, concurrency, opts.max_audio_s)
    record.started_wall = datetime.now(UTC).isoformat(timespec="milliseconds")
    t0 = time.perf_counter()
    if level_t0 is not None:
        record.start_s = round(t0 - level_t0, 6)
    stream = _Stream(t0, record)
    try:
        async with client.stream(
            "POST", opts.endpoint, json=body, headers=opts.auth_headers(), timeout=opts.timeout_s
        ) as response:
            await _read(response, stream, opts)
    except _Failed as exc:
        record.status, record.error = "failed", str(exc)
    except httpx.HTTPError as exc:
        record.status, record.error = (
            "failed",
            f"{type(exc).__name__}: {server_text(str(exc), 200) or 'no detail'}",
        )
    record.end_s = stream.now()
    record.audio_bytes = len(stream.pcm)
    frame = 2 * (record.channels or 1)
    record.partial_frame_bytes = len(stream.pcm) % frame
    pcm = little_endian(
        bytes(stream.pcm[: len(stream.pcm) - record.partial_frame_bytes]), stream.big_endian
    )
    return record, pcm


Result = tuple[TtsRequestRecord, bytes]


def _sender(client: httpx.AsyncClient, opts: SpeechClientOptions):
    """The request function of ``opts.transport``: HTTP here, a realtime session per request
    there."""
    if opts.transport == "realtime":
        return lambda item, **kw: synthesize_realtime(item, opts, **kw)
    return lambda item, **kw: synthesize(client, item, opts, **kw)


async def replay(
    items: list[SeedTtsItem],
    opts: SpeechClientOptions,
    concurrency: int,
    warmups: int = 0,
    progress: Callable[[TtsRequestRecord], None] | None = None,
) -> list[Result]:
    """Closed loop: ``warmups`` requests one after another (the first rows again, marked
    ``warmup``), then every item with ``concurrency`` requests in flight, each worker sending its
    next request as soon as its last one ended. Results in index order."""
    results: list[Result] = []
    limits = httpx.Limits(
        max_connections=concurrency + 1, max_keepalive_connections=concurrency + 1
    )
    async with httpx.AsyncClient(limits=limits, timeout=opts.timeout_s) as client:
        send = _sender(client, opts)
        for number in range(warmups):
            results.append(
                await send(
                    items[number % len(items)], concurrency=concurrency, index=number, warmup=True
                )
            )
        pending = list(enumerate(items, start=warmups))
        level_t0 = time.perf_counter()

        async def worker() -> None:
            while pending:
                index, item = pending.pop(0)
                result = await send(item, concurrency=concurrency, index=index, level_t0=level_t0)
                results.append(result)
                if progress is not None:
                    progress(result[0])

        await asyncio.gather(*(worker() for _ in range(min(concurrency, len(items)))))
    return sorted(results, key=lambda pair: pair[0].index)
