"""Small OpenAI-compatible services standing in for a user's own ASR, LLM and TTS (FastAPI).

- ``GET /v1/models`` lists ``models`` (``models_status`` other than 200 answers that status);
- ``POST /v1/audio/transcriptions``: the real faster-whisper tiny.en (loaded on first use);
- ``POST /v1/chat/completions``: a scripted SSE stream, word by word: "The capital of France is
  Paris. 😀" when the last user message names France, else "Sorry, I did not catch that."
  (``chat_status`` other than 200 answers that status);
- ``POST /v1/audio/speech``: raw PCM16 with ``X-Sample-Rate``: the real Piper voice (loaded on
  first use), or with ``tone`` a 0.3 s 440 Hz tone per request (no model);
- ``GET /test/requests``: every request's path, Authorization header and body, and the pid.

In the tests it runs in a thread (:func:`start_in_thread`); as a ``services`` entry it runs as
``python -m tests.serving.openai_services --port N`` (``--exit-after S --exit-code N`` exits by
itself; ``--ignore-sigterm`` makes the stop escalate to SIGKILL).
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from tests.conftest import free_port

PIPER_RATE = 22050


@dataclass
class Behaviour:
    models: list[str] = field(
        default_factory=lambda: ["whisper-tiny", "scripted-chat", "piper-joe"]
    )
    models_status: int = 200
    chat_status: int = 200
    tone: bool = False
    requests: list[dict[str, Any]] = field(default_factory=list)
    _asr: Any = None
    _tts: Any = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def asr(self):
        with self._lock:
            if self._asr is None:
                from fdb.models.asr import FasterWhisperAsr

                self._asr = FasterWhisperAsr(cpu_threads=1)
            return self._asr

    def tts(self):
        with self._lock:
            if self._tts is None:
                from fdb.models.tts import PiperTts

                self._tts = PiperTts(deterministic=True)
            return self._tts


def _reply_text(messages: list[dict[str, str]]) -> str:
    last = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
    return (
        "The capital of France is Paris. 😀"
        if "france" in last.lower()
        else "Sorry, I did not catch that."
    )


def _sse(text: str, model: str) -> Any:
    async def events():
        for k, word in enumerate(text.split(" ")):
            piece = word if k == 0 else " " + word
            chunk = {
                "object": "chat.completion.chunk",
                "model": model,
                "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}],
            }
            yield f"data: {json.dumps(chunk)}\n\n".encode()
            await asyncio.sleep(0.005)
        yield b"data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream")


def _multipart(content_type: str, body: bytes) -> dict[str, bytes]:
    """The fields of a multipart/form-data body (stdlib; python-multipart is not installed)."""
    from email.parser import BytesParser
    from email.policy import default

    message = BytesParser(policy=default).parsebytes(
        f"Content-Type: {content_type}\r\n\r\n".encode() + body
    )
    return {
        part.get_param("name", header="content-disposition"): part.get_payload(decode=True)
        for part in message.iter_parts()
    }


def build_app(state: Behaviour) -> FastAPI:
    app = FastAPI()

    def record(request: Request, body: Any) -> None:
        state.requests.append(
            {"path": request.url.path, "auth": request.headers.get("authorization"), "body": body}
        )

    @app.get("/v1/models")
    async def models(request: Request) -> JSONResponse:
        record(request, None)
        if state.models_status != 200:
            return JSONResponse({"error": {"message": "models failed"}}, state.models_status)
        return JSONResponse(
            {"object": "list", "data": [{"id": m, "object": "model"} for m in state.models]}
        )

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        body = await request.json()
        record(request, body)
        if state.chat_status != 200:  # echoes the key, as OpenAI's 401 does
            auth = request.headers.get("authorization", "")
            return JSONResponse(
                {"error": {"message": f"failed; key provided: {auth[7:]}"}}, state.chat_status
            )
        text = _reply_text(body["messages"])
        words = text.split(" ")[: max(1, int(body.get("max_tokens", 512)))]
        return _sse(" ".join(words), body["model"])

    @app.post("/v1/audio/transcriptions")
    async def transcriptions(request: Request) -> JSONResponse:
        import soundfile as sf

        fields = _multipart(request.headers["content-type"], await request.body())
        record(request, {k: v.decode() for k, v in fields.items() if k != "file"})
        samples, rate = sf.read(io.BytesIO(fields["file"]), dtype="float32")
        assert rate == 16000
        transcript = await asyncio.to_thread(state.asr().transcribe, samples)
        return JSONResponse({"text": transcript.text})

    @app.post("/v1/audio/speech")
    async def speech(request: Request) -> Response:
        from fdb.audio import float_to_pcm16

        body = await request.json()
        record(request, body)
        if state.tone:
            samples = 0.3 * np.sin(2 * np.pi * 440 * np.arange(int(0.3 * PIPER_RATE)) / PIPER_RATE)
        else:
            samples = await asyncio.to_thread(state.tts().synthesize, body["input"])
        pcm = float_to_pcm16(samples.astype(np.float32))
        return Response(pcm, media_type="audio/pcm", headers={"X-Sample-Rate": str(PIPER_RATE)})

    @app.get("/test/requests")
    async def requests() -> dict:
        return {"pid": os.getpid(), "requests": state.requests}

    return app


class ThreadServer:
    """The services app on a free loopback port, in a daemon thread of the test process."""

    def __init__(self, state: Behaviour) -> None:
        self.state = state
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        config = uvicorn.Config(
            build_app(state), host="127.0.0.1", port=self.port, log_level="warning"
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    def start(self) -> ThreadServer:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the services app did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(5)


def start_in_thread(**behaviour: Any) -> ThreadServer:
    return ThreadServer(Behaviour(**behaviour)).start()


def _stubborn(port: int) -> None:
    """A stdlib /v1/models that ignores SIGTERM (uvicorn would handle it)."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            data = json.dumps(
                {"object": "list", "data": [{"id": "stubborn", "object": "model"}]}
            ).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--exit-after", type=float, default=None)
    parser.add_argument("--exit-code", type=int, default=0)
    parser.add_argument("--ignore-sigterm", action="store_true")
    args = parser.parse_args()
    if args.exit_after is not None:
        threading.Timer(args.exit_after, os._exit, (args.exit_code,)).start()
    if args.ignore_sigterm:
        _stubborn(args.port)
        return
    uvicorn.run(build_app(Behaviour()), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
