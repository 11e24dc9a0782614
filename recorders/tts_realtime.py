"""A Seed-TTS row spoken through a ``/v1/realtime`` session (OpenAI GA events), one session per
request: the same ``TtsRequestRecord`` as the HTTP client, transport ``realtime``.

The exchange:

1. connect to ``ws://HOST:PORT/v1/realtime``, wait for ``session.created``;
2. ``session.update`` with ``type: realtime``, ``output_modalities: ["audio"]``, output format
   ``audio/pcm`` at 24 kHz, ``turn_detection: null``, ``model`` (when given) and instructions to
   read the user's text aloud; wait for ``session.updated``, whose
   ``session.audio.output.format.rate`` is the declared rate (none declared: ``--sample-rate``,
   else the request fails, as over HTTP);
3. ``conversation.item.create``: a user message with the target text (``input_text``) and, unless
   ``--ref-audio none``, the prompt wav as an ``input_audio`` part (PCM16 at the session's input
   rate, 24 kHz when it declares none) with ``ref_text`` as a second ``input_text``;
4. ``response.create``; the clock starts just before it is sent (t = 0);
5. ``response.output_audio.delta`` (and the beta ``response.audio.delta``) are audio arrivals;
   ``response.done`` is the declared end (``done_s``), after which the client listens
   ``drain_s`` more: audio arriving then is counted in ``bytes_after_done`` (the stop check).
   An ``error`` event or a ``response.done`` whose status is not ``completed`` fails the request.
   ``end_s`` (E2E) is the arrival of ``response.done``; ``start_s`` is the send of response.create.

The extra body is merged into the ``session`` of the session.update.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from datetime import UTC, datetime

from websockets.asyncio.client import connect

from fdb.audio import float_to_pcm16, read_wav, resample
from fdb.datasets.seedtts import SeedTtsItem
from fdb.dialects import views
from fdb.dialects.shapes import SHAPES
from fdb.tts_records import TtsRequestRecord
from recorders.tts_options import UNDECLARED, SpeechClientOptions

AUDIO_DELTAS = views.AUDIO_DELTAS  # GA, beta
INSTRUCTIONS = (
    "Read the user's text aloud, exactly as written, in the voice of the reference audio if one "
    "is given."
)
MAX_MESSAGE_BYTES = 16 * 1024 * 1024


class _Failed(Exception):
    pass


async def _until(ws, kind: str) -> dict:
    while True:
        event = json.loads(await ws.recv())
        if event.get("type") == "error":
            raise _Failed(f"the server sent an error event: {json.dumps(event)[:300]}")
        if event.get("type") == kind:
            return event


def _session_body(opts: SpeechClientOptions) -> dict:
    session = {
        "type": "realtime",
        "instructions": INSTRUCTIONS,
        "output_modalities": ["audio"],
        "audio": {
            "input": {"turn_detection": None},
            "output": {"format": {"type": "audio/pcm", "rate": 24000}},
        },
    }
    if opts.model:
        session["model"] = opts.model
    return {**session, **opts.extra_body}


def _rates(updated: dict, opts: SpeechClientOptions) -> tuple[int, str, int]:
    """(output rate, its source, input rate) from session.updated."""
    session = updated.get("session")
    out_rate = SHAPES["ga"].declared_output_rate(session)
    in_rate = views.at(session, "audio", "input", "format", "rate") or 24000
    if out_rate:
        return int(out_rate), "session", int(in_rate)
    if opts.sample_rate:
        return opts.sample_rate, "option", int(in_rate)
    raise _Failed(
        UNDECLARED.replace("raw PCM", "realtime audio").replace(
            "no X-Sample-Rate header, no rate= in the Content-Type",
            "no audio.output.format.rate in session.updated",
        )
    )


def _item(item: SeedTtsItem, opts: SpeechClientOptions, input_rate: int) -> dict:
    content: list[dict] = [{"type": "input_text", "text": item.target_text}]
    if opts.ref_audio != "none":
        prompt = read_wav(item.prompt_wav, item.id)
        pcm = resample(prompt.samples, prompt.rate, input_rate)
        content += [
            {"type": "input_audio", "audio": base64.b64encode(float_to_pcm16(pcm)).decode("ascii")},
            {"type": "input_text", "text": f"Reference transcript: {item.prompt_text}"},
        ]
    return {
        "type": "conversation.item.create",
        "item": {"type": "message", "role": "user", "content": content},
    }


async def _collect(ws, record: TtsRequestRecord, t0: float, pcm: bytearray, drain_s: float) -> None:
    deadline = None
    while True:
        timeout = None if deadline is None else max(0.0, deadline - time.perf_counter())
        try:
            raw = (
                await asyncio.wait_for(ws.recv(), timeout)
                if timeout is not None
                else await ws.recv()
            )
        except TimeoutError:
            return
        at = round(time.perf_counter() - t0, 6)
        received = json.loads(raw)
        event = views.read_event(received)
        if isinstance(event, views.AudioDelta):
            data = base64.b64decode(event.shown("delta") or "")
            if data:
                pcm += data
                record.chunks.append((at, len(data)))
                if record.done_s is not None:
                    record.bytes_after_done += len(data)
        elif isinstance(event, views.Error):
            raise _Failed(f"the server sent an error event: {json.dumps(received)[:300]}")
        elif event.type == views.RESPONSE_DONE and record.done_s is None:
            assert isinstance(event, views.ResponseEvent)
            record.done_s = at
            status = event.body.shown("status")
            if status not in (None, "completed"):
                raise _Failed(f"response.done with status {status!r}")
            deadline = time.perf_counter() + drain_s


async def _session(
    item: SeedTtsItem,
    opts: SpeechClientOptions,
    record: TtsRequestRecord,
    pcm: bytearray,
    level_t0: float | None,
) -> float:
    async with connect(
        opts.endpoint,
        max_size=MAX_MESSAGE_BYTES,
        compression=None,
        ping_interval=None,
        proxy=None,
        additional_headers=opts.auth_headers(),
    ) as ws:
        await _until(ws, "session.created")
        await ws.send(json.dumps({"type": "session.update", "session": _session_body(opts)}))
        rate, source, input_rate = _rates(await _until(ws, "session.updated"), opts)
        record.sample_rate, record.rate_source, record.channels, record.bit_depth = (
            rate,
            source,
            1,
            16,
        )
        await ws.send(json.dumps(_item(item, opts, input_rate)))
        t0 = time.perf_counter()
        if level_t0 is not None:
            record.start_s = round(t0 - level_t0, 6)
        await ws.send(
            json.dumps({"type": "response.create", "response": {"output_modalities": ["audio"]}})
        )
        await _collect(ws, record, t0, pcm, opts.drain_s)
        return t0


async def synthesize_realtime(
    item: SeedTtsItem,
    opts: SpeechClientOptions,
    *,
    concurrency: int,
    index: int,
    warmup: bool = False,
    level_t0: float | None = None,
) -> tuple[TtsRequestRecord, bytes]:
    """One request over its own realtime session; never raises for the server's fault."""
    record = TtsRequestRecord.begin(
        item, index, warmup, concurrency, opts.max_audio_s, transport="realtime"
    )
    record.started_wall = datetime.now(UTC).isoformat(timespec="milliseconds")
    pcm = bytearray()
    t0 = None
    try:
        async with asyncio.timeout(opts.timeout_s):
            t0 = await _session(item, opts, record, pcm, level_t0)
    except _Failed as exc:
        record.status, record.error = "failed", str(exc)
    except (OSError, TimeoutError) as exc:
        record.status, record.error = "failed", f"{type(exc).__name__}: {exc or 'timed out'}"
    except Exception as exc:  # websockets' handshake and close errors
        record.status, record.error = "failed", f"{type(exc).__name__}: {exc}"
    if t0 is not None:  # E2E ends at response.done, not after the drain
        record.end_s = (
            record.done_s if record.done_s is not None else round(time.perf_counter() - t0, 6)
        )
    record.audio_bytes = len(pcm)
    record.partial_frame_bytes = len(pcm) % 2
    return record, bytes(pcm[: len(pcm) - record.partial_frame_bytes])
