"""A scripted /v1/audio/speech server for the TTS client and metric tests: a real uvicorn server
on a free loopback port whose variants (``http://127.0.0.1:PORT/<variant>/v1/audio/speech``)
send known chunks at known times after each request arrives (server clock).

Variants (rate, [(send at s, audio bytes)], extras):

- ``pcm22050``: raw PCM, ``X-Sample-Rate: 22050``; 0.1 s at 0.20, 0.2 s at 0.30, 0.1 s at 0.80;
- ``l16``: ``audio/L16; rate=16000`` without X-Sample-Rate, 0.1 s at 0.05;
- ``undeclared``: raw PCM that never says its rate;
- ``wav``: a streamed WAV (16 kHz), 0.1 s at 0.05 and at 0.15;
- ``sse``: OpenAI ``speech.audio.delta`` at 24 kHz (X-Sample-Rate), 0.1 s at 0.10 and 0.20,
  then done;
- ``sse-late``: 0.1 s at 0.10, ``speech.audio.done`` at 0.15, then 80 ms more at 0.20 (audio
  published after the stream should have ended);
- ``sse-legacy``: sglang's older ``audio.speech.chunk`` events (base64 WAV at 24 kHz), 0.1 s at
  0.05 and 0.10, then ``finish_reason`` and ``[DONE]`` (no X-Sample-Rate header);
- ``stop80``: raw PCM at 24 kHz, 80 ms at 0.05 (a request that should have stopped at once);
- ``error``: HTTP 500 with a JSON error.
"""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import time

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from tests.conftest import free_port

PCM22050 = [(0.20, 4410), (0.30, 8820), (0.80, 4410)]
SCRIPTS = {
    "pcm22050": ("audio/pcm", {"X-Sample-Rate": "22050", "X-Channels": "1"}, PCM22050),
    "l16": ("audio/L16; rate=16000; channels=1", {}, [(0.05, 3200)]),
    "undeclared": ("audio/pcm", {}, [(0.05, 4800)]),
    "wav": ("audio/wav", {}, [(0.05, 3200), (0.15, 3200)]),
    "stop80": ("audio/pcm", {"X-Sample-Rate": "24000"}, [(0.05, 3840)]),
}
SSE = {
    "sse": [(0.10, 4800), (0.20, 4800), (0.21, None)],
    "sse-late": [(0.10, 4800), (0.15, None), (0.20, 3840)],
    "sse-legacy": [(0.05, 4800), (0.10, 4800), (0.11, None)],
}


def _wav_header(rate: int) -> bytes:
    fmt = (
        (1).to_bytes(2, "little")
        + (1).to_bytes(2, "little")
        + rate.to_bytes(4, "little")
        + (2 * rate).to_bytes(4, "little")
        + (2).to_bytes(2, "little")
        + (16).to_bytes(2, "little")
    )
    return (
        b"RIFF\xff\xff\xff\xffWAVEfmt " + (16).to_bytes(4, "little") + fmt + b"data\xff\xff\xff\xff"
    )


async def _at(start: float, t: float) -> None:
    await asyncio.sleep(max(0.0, start + t - time.perf_counter()))


async def _raw(start: float, variant: str):
    if variant == "wav":
        yield _wav_header(16000)
    for t, size in SCRIPTS[variant][2]:
        await _at(start, t)
        yield b"\x10\x00" * (size // 2)


def _legacy(size: int | None) -> bytes:
    """sglang's older SSE: base64 WAV chunks with their rate, a finish_reason chunk, [DONE]."""
    if size is None:
        return (
            b'data: {"object": "audio.speech.chunk", "finish_reason": "stop"}\n\ndata: [DONE]\n\n'
        )
    wav = base64.b64encode(_wav_header(24000) + b"\x10\x00" * (size // 2)).decode()
    event = {
        "object": "audio.speech.chunk",
        "audio": {"data": wav, "format": "wav", "sample_rate": 24000},
    }
    return f"data: {json.dumps(event)}\n\n".encode()


async def _sse(start: float, variant: str):
    for t, size in SSE[variant]:
        await _at(start, t)
        if variant == "sse-legacy":
            yield _legacy(size)
        elif size is None:
            yield b'data: {"type": "speech.audio.done"}\n\n'
        else:
            audio = base64.b64encode(b"\x10\x00" * (size // 2)).decode()
            yield f"data: {json.dumps({'type': 'speech.audio.delta', 'audio': audio})}\n\n".encode()


async def speech(request: Request):
    start = time.perf_counter()
    variant = request.path_params["variant"]
    request.app.state.bodies.append(await request.json())
    request.app.state.auth.append(request.headers.get("authorization"))
    if variant == "error":
        return JSONResponse({"error": {"message": "engine exploded"}}, status_code=500)
    if variant in SSE:
        headers = {} if variant == "sse-legacy" else {"X-Sample-Rate": "24000"}
        return StreamingResponse(
            _sse(start, variant), media_type="text/event-stream", headers=headers
        )
    ctype, headers, _ = SCRIPTS[variant]
    return StreamingResponse(_raw(start, variant), headers={**headers, "Content-Type": ctype})


class ScriptedServer:
    """Run the scripted app with uvicorn in a daemon thread; ``url(variant)`` is a base URL."""

    def __init__(self) -> None:
        self.app = Starlette(routes=[Route("/{variant}/v1/audio/speech", speech, methods=["POST"])])
        self.app.state.bodies = []
        self.app.state.auth = []  # the Authorization header of each request (None when absent)
        self.port = free_port()
        config = uvicorn.Config(
            self.app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="off"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def url(self, variant: str) -> str:
        return f"http://127.0.0.1:{self.port}/{variant}"

    def __enter__(self) -> ScriptedServer:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("scripted server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=5)


def seed_items(folder, count: int = 1) -> list:
    """``count`` Seed-TTS rows whose prompt wav is 0.2 s of a 16 kHz tone under ``folder``."""
    import numpy as np

    from fdb.audio import write_wav
    from fdb.datasets.seedtts import SeedTtsItem

    wav = folder / "prompt.wav"
    write_wav(
        wav, 0.1 * np.sin(np.arange(3200) / 16000 * 2 * np.pi * 220).astype(np.float32), 16000
    )
    return [
        SeedTtsItem(
            list_name="en/meta.lst",
            line=n,
            id=f"utt{n}",
            prompt_text="A prompt.",
            prompt_wav=wav,
            target_text=f"Target number {n}.",
        )
        for n in range(1, count + 1)
    ]


def run(coro):
    return asyncio.run(coro)
