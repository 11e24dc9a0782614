"""A stand-in for the SGLang environment's python in the launch-profile tests (stdlib only, so it
is up in a fraction of a second): ``python sglang_stand_in.py -m sglang.launch_server
--model-path M --port P ...`` (or ``-m sglang_omni.cli serve ...``) serves on 127.0.0.1:P

- ``GET /v1/models``: ``{"data": [{"id": M}]}``;
- ``POST /v1/chat/completions``: one SSE piece, "Hello.";
- ``POST /v1/audio/transcriptions``: ``{"text": "hello"}``;
- ``POST /v1/audio/speech``: 0.2 s of 24 kHz PCM16 silence;
- ``GET /test/launch``: its argv, pid and CUDA_VISIBLE_DEVICES, for the test to check.

A profile's ``--vars.sglang_python`` points at a script that runs this file.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def handler(model: str) -> type[BaseHTTPRequestHandler]:
    launch = {
        "argv": sys.argv[1:],
        "pid": os.getpid(),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def _send(self, body: bytes, ctype: str) -> None:
            self.send_response(200)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            answer = {
                "/v1/models": {"object": "list", "data": [{"id": model, "object": "model"}]},
                "/test/launch": launch,
            }.get(self.path)
            if answer is None:
                self.send_error(404)
                return
            self._send(json.dumps(answer).encode(), "application/json")

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path == "/v1/chat/completions":
                piece = {"choices": [{"index": 0, "delta": {"content": "Hello."}}]}
                self._send(
                    f"data: {json.dumps(piece)}\n\ndata: [DONE]\n\n".encode(), "text/event-stream"
                )
            elif self.path == "/v1/audio/transcriptions":
                self._send(b'{"text": "hello"}', "application/json")
            elif self.path == "/v1/audio/speech":
                self._send(bytes(9600), "audio/pcm")
            else:
                self.send_error(404)

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-m", dest="module", required=True)
    parser.add_argument("--model-path", required=True)
    parser.add_argument("--port", type=int, required=True)
    args, _ = parser.parse_known_args()
    ThreadingHTTPServer(("127.0.0.1", args.port), handler(args.model_path)).serve_forever()


if __name__ == "__main__":
    main()
