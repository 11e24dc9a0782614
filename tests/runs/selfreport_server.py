"""A stand-in server on a loopback port for the provenance tests (tests/runs/test_provenance_*.py).

``python -m tests.runs.selfreport_server PORT MODE [TOKEN]`` serves, with starlette under uvicorn:

- ``full``: GET /v1/realtime/capabilities (system, model, service_nodes with secrets in them,
  max_sessions), GET /v1/models, GET /health;
- ``bare``: none of them (404), as many third-party servers;
- ``broken``: capabilities answers HTTP 500 in plain text, /v1/models HTML with status 200,
  /health 404.

In every mode /v1/realtime opens the session (session.created) and then closes it with 1011, so
a generate or sweep against it gets a recorded, failed session; POST /v1/audio/speech answers
0.25 s of PCM16 at 16 kHz (audio/pcm, X-Sample-Rate) for tts-bench.
"""

from __future__ import annotations

import math
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

from tests.conftest import REPO, free_port

SECRET = "sk-standin-SECRET-0123456789"  # must never reach a file
URL_SECRET = "urltoken-SECRET-42"
CAPABILITIES = {
    "system": "standin-cascade",
    "model": "standin-omni-1",
    "interaction": "turn_based",
    "max_sessions": 4,
    "service_nodes": {
        "asr": {
            "kind": "openai-transcription",
            "model": "whisper-tiny.en",
            "base_url": f"http://127.0.0.1:9/v1?api_key={URL_SECRET}",
        },
        "llm": {
            "kind": "openai-chat",
            "model": "SmolLM2-135M",
            "api_key": SECRET,
            "api_key_env": "LLM_KEY",
            "max_tokens": 64,
        },
    },
}
MODELS = {
    "object": "list",
    "data": [
        {
            "id": "standin-omni-1",
            "object": "model",
            "created": int(time.time()),
            "owned_by": "standin",
        }
    ],
}


def _pcm(seconds: float = 0.25, rate: int = 16000) -> bytes:
    count = int(seconds * rate)
    return b"".join(
        struct.pack("<h", int(8000 * math.sin(2 * math.pi * 220 * k / rate))) for k in range(count)
    )


def app(mode: str, token: str | None = None) -> Starlette:
    def refused(request: Request) -> bool:
        return token is not None and request.headers.get("authorization") != f"Bearer {token}"

    async def capabilities(request: Request) -> Response:
        if refused(request):
            return JSONResponse({"error": {"message": "missing bearer token"}}, status_code=401)
        if mode == "full":
            return JSONResponse(CAPABILITIES)
        if mode == "broken":
            return PlainTextResponse("boom\x00\x01 internal", status_code=500)
        return PlainTextResponse("Not Found", status_code=404)

    async def models(request: Request) -> Response:
        if refused(request):
            return JSONResponse({"error": {"message": "missing bearer token"}}, status_code=401)
        if mode == "full":
            return JSONResponse(MODELS)
        if mode == "broken":
            return Response("<html>models</html>", media_type="text/html")
        return PlainTextResponse("Not Found", status_code=404)

    async def health(_request: Request) -> Response:
        if mode == "full":
            return JSONResponse({"status": "ok", "system": "standin-cascade", "sessions": 0})
        return PlainTextResponse("Not Found", status_code=404)

    async def speech(_request: Request) -> Response:
        return Response(_pcm(), media_type="audio/pcm", headers={"X-Sample-Rate": "16000"})

    async def realtime(socket: WebSocket) -> None:
        await socket.accept()
        await socket.send_json(
            {
                "type": "session.created",
                "event_id": "e1",
                "session": {"id": "s1", "object": "realtime.session"},
            }
        )
        await socket.close(code=1011, reason="standin closes")

    return Starlette(
        routes=[
            Route("/v1/realtime/capabilities", capabilities),
            Route("/v1/models", models),
            Route("/health", health),
            Route("/v1/audio/speech", speech, methods=["POST"]),
            WebSocketRoute("/v1/realtime", realtime),
        ]
    )


def wait_port(port: int, proc: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the server exited while starting"
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"nothing listened on {port} within {timeout_s} s")


@contextmanager
def standin(mode: str, token: str | None = None) -> Iterator[int]:
    """The stand-in server in ``mode`` on a free loopback port; yields the port. With ``token``,
    capabilities and /v1/models answer 401 unless the request has
    ``Authorization: Bearer token``."""
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.runs.selfreport_server",
            str(port),
            mode,
            *([token] if token else []),
        ],
        cwd=REPO,
    )
    try:
        wait_port(port, proc, 20)
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


if __name__ == "__main__":
    import uvicorn

    uvicorn.run(
        app(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None),
        host="127.0.0.1",
        port=int(sys.argv[1]),
        log_level="warning",
        ws="websockets-sansio",
    )
