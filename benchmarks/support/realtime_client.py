"""A small realtime WebSocket client for the serving tests (real sockets, real JSON)."""

from __future__ import annotations

import asyncio
import base64
import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

import websockets

PACKET_BYTES = 2560  # 80 ms of 16 kHz PCM16


@dataclass
class Received:
    t: float  # seconds since the client connected
    event: dict[str, Any]

    @property
    def type(self) -> str:
        return self.event["type"]


class Client:
    """Reads in the background and stamps every received event with its arrival time, so
    pacing can be checked while the test is still sending."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.t0 = time.monotonic()
        self.received: list[Received] = []
        self.closed = False
        self._cursor = 0
        self._new = asyncio.Event()
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def connect(cls, url: str) -> Client:
        ws = await websockets.connect(url, max_size=8 << 20, compression=None, ping_interval=None)
        return cls(ws)

    def now(self) -> float:
        return time.monotonic() - self.t0

    async def _read(self) -> None:
        try:
            async for raw in self.ws:
                self.received.append(Received(self.now(), json.loads(raw)))
                self._new.set()
        except websockets.ConnectionClosed:
            pass
        finally:
            self.closed = True
            self._new.set()

    async def send(self, type_: str, **fields: Any) -> str:
        event_id = fields.pop("event_id", None) or f"evt_{uuid.uuid4().hex[:12]}"
        await self.ws.send(json.dumps({"type": type_, "event_id": event_id, **fields}))
        return event_id

    async def send_raw(self, data: str | bytes) -> None:
        await self.ws.send(data)

    async def until(self, type_: str, timeout: float = 20.0) -> Received:
        """The first not yet consumed ``type_`` event (events are consumed in order)."""
        deadline = time.monotonic() + timeout
        while True:
            for index in range(self._cursor, len(self.received)):
                if self.received[index].type == type_:
                    self._cursor = index + 1
                    return self.received[index]
            self._cursor = len(self.received)
            if self.closed:
                raise AssertionError(
                    f"connection closed before {type_} ({self.ws.close_code} "
                    f"{self.ws.close_reason}); got {[r.type for r in self.received]}"
                )
            self._new.clear()
            await asyncio.wait_for(self._new.wait(), max(0.01, deadline - time.monotonic()))

    async def wait_closed(self, timeout: float = 10.0) -> tuple[int | None, str | None]:
        await asyncio.wait_for(asyncio.shield(self._reader), timeout)
        return self.ws.close_code, self.ws.close_reason

    async def open_session(
        self, session: dict[str, Any] | None = None, extensions: bool = True
    ) -> dict[str, Any]:
        """session.created, then a session.update (``session``; with ``extensions`` it carries
        ``"sglang": {}``, asking for fdb's session protocol: receipts, units, 16 kHz input)."""
        await self.until("session.created", 5)
        body = dict(
            session
            or {"type": "realtime", "audio": {"input": {"turn_detection": {"type": "server_vad"}}}}
        )
        if extensions:
            body.setdefault("sglang", {})
        await self.send("session.update", session=body)
        return (await self.until("session.updated", 5)).event

    async def send_audio(self, pcm: bytes, first_seq: int = 0, interval_s: float = 0.08) -> int:
        """Send ``pcm`` in 80 ms packets, one every ``interval_s`` (0.08 is real time) on an
        absolute schedule; returns the next seq."""
        start = time.monotonic()
        seq = first_seq
        for k, offset in enumerate(range(0, len(pcm), PACKET_BYTES)):
            delay = start + k * interval_s - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            chunk = base64.b64encode(pcm[offset : offset + PACKET_BYTES]).decode("ascii")
            await self.send("input_audio_buffer.append", audio=chunk, sglang={"seq": seq})
            seq += 1
        return seq

    async def silence_until(self, type_: str, seq: int, limit_s: float = 30.0) -> int:
        """Keep the input live with 80 ms packets of silence, in real time, until the server
        has sent a ``type_`` event; returns the next seq. Fails after ``limit_s``."""
        packet = b"\0" * PACKET_BYTES
        deadline = time.monotonic() + limit_s
        while not self.of_type(type_):
            assert time.monotonic() < deadline, f"no {type_} within {limit_s:g} s"
            seq = await self.send_audio(packet, first_seq=seq)
            await asyncio.sleep(0.08)
        return seq

    def of_type(self, type_: str) -> list[dict[str, Any]]:
        return [item.event for item in self.received if item.type == type_]

    def types(self) -> list[str]:
        return [item.type for item in self.received]

    async def close(self) -> None:
        await self.ws.close()
        await asyncio.gather(self._reader, return_exceptions=True)
