"""A real HTTP server on a free loopback port that answers as third-party speech, transcription
and chat servers really do: each route is a canned answer (status, headers, body) sent either
with a Content-Length or chunked (HTTP/1.1 ``Transfer-Encoding: chunked``, one chunk per piece),
or a function of the request. Stdlib only (``http.server``), so nothing of fdb's own serving
stack stands in for the "server outside the machine".

Used by tests/recorders/test_tts_client_formats.py and tests/serving/test_service_nodes_*.py.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np

from tests.conftest import free_port


@dataclass
class Answer:
    status: int = 200
    content_type: str | None = "application/json"
    body: bytes | list[bytes] = b"{}"  # a list: sent chunked, one piece per chunk
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def json(cls, value: object, status: int = 200) -> Answer:
        return cls(status, "application/json", json.dumps(value).encode())


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


Route = Answer | Callable[[Seen], Answer]


def tone(rate: int, seconds: float, hz: float = 440.0) -> np.ndarray:
    """A PCM16 tone (int16 samples), so a byte-order or framing mistake shows in the values."""
    t = np.arange(int(rate * seconds)) / rate
    return (0.4 * 32767 * np.sin(2 * np.pi * hz * t)).astype("<i2")


def wav(
    samples: np.ndarray, rate: int, channels: int = 1, size: int | None = None, trailer: bytes = b""
) -> bytes:
    """A PCM16 RIFF/WAVE file; ``size`` overrides the data size field (0xFFFFFFFF: streamed)."""
    data = samples.astype("<i2").tobytes()
    fmt = (
        (1).to_bytes(2, "little")
        + channels.to_bytes(2, "little")
        + rate.to_bytes(4, "little")
        + (2 * channels * rate).to_bytes(4, "little")
        + (2 * channels).to_bytes(2, "little")
        + (16).to_bytes(2, "little")
    )
    declared = len(data) if size is None else size
    riff = (4 + 8 + len(fmt) + 8 + len(data) + len(trailer)) if size is None else 0xFFFFFFFF
    return (
        b"RIFF"
        + riff.to_bytes(4, "little")
        + b"WAVE"
        + b"fmt "
        + len(fmt).to_bytes(4, "little")
        + fmt
        + b"data"
        + declared.to_bytes(4, "little")
        + data
        + trailer
    )


def pieces(data: bytes, n: int) -> list[bytes]:
    """``data`` in ``n`` uneven pieces (odd sizes, so a reader must carry half samples over)."""
    cuts = sorted({max(1, len(data) * k // n + (k % 2)) for k in range(1, n)} - {len(data)})
    bounds = [0, *cuts, len(data)]
    return [data[a:b] for a, b in zip(bounds, bounds[1:], strict=False) if b > a]


class VariantServer:
    """``routes[(METHOD, path)]`` answered on ``http://127.0.0.1:<port>``;
    every request in ``seen``."""

    def __init__(self, routes: dict[tuple[str, str], Route] | None = None) -> None:
        self.routes: dict[tuple[str, str], Route] = dict(routes or {})
        self.seen: list[Seen] = []
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                seen = Seen(
                    self.command,
                    self.path,
                    {k.lower(): v for k, v in self.headers.items()},
                    self.rfile.read(length) if length else b"",
                )
                server.seen.append(seen)
                route = server.routes.get((self.command, self.path.split("?")[0]))
                answer = (
                    Answer(404, "application/json", b'{"detail": "Not Found"}')
                    if route is None
                    else (route(seen) if callable(route) else route)
                )
                self.send_response(answer.status)
                if answer.content_type is not None:
                    self.send_header("Content-Type", answer.content_type)
                for key, value in answer.headers.items():
                    self.send_header(key, value)
                if isinstance(answer.body, list):
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    for piece in answer.body:
                        self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                else:
                    self.send_header("Content-Length", str(len(answer.body)))
                    self.end_headers()
                    self.wfile.write(answer.body)

            do_GET = do_POST = _handle

        self._httpd = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def paths(self) -> list[str]:
        return [seen.path for seen in self.seen]

    def __enter__(self) -> VariantServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
