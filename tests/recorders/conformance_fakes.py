"""A small OpenAI Realtime server (GA, or beta on ``OpenAI-Beta: realtime=v1``) for the
conformance battery's tests: a real WebSocket server on a free loopback port with an energy VAD
(80 ms packets above -40 dBFS are speech), replies of ``reply_ms`` of tone paced in real time,
``response.cancel``, ``conversation.item.truncate``, ``input_audio_buffer.commit`` and
``response.create`` as GA documents them, and switches that break one behaviour each:

- ``ignore_barge_in``: speech during a reply is reported (speech_started) but never cancels it;
- ``cancel_regardless``: speech during a reply cancels it even when interrupt_response is false;
- ``ignore_cancel``: response.cancel is read and dropped;
- ``ignore_truncate``: conversation.item.truncate is read and dropped;
- ``hang_up_at_barge_in``: speech during a reply closes the connection (1011);
- ``refuse_update``: every session.update is refused with an error event.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from websockets.asyncio.server import ServerConnection

from tests.recorders.recorder_fakes import LoopbackPeer, tone

MODEL = "fake-realtime"
INPUT_RATE = OUTPUT_RATE = 24000
DELTA_MS = 80
SPEECH_RMS = 10 ** (-40 / 20)


@dataclass
class Broken:
    ignore_barge_in: bool = False
    cancel_regardless: bool = False
    ignore_cancel: bool = False
    ignore_truncate: bool = False
    hang_up_at_barge_in: bool = False
    refuse_update: bool = False  # every session.update is answered with an error


@dataclass
class _Conn:
    ws: ServerConnection
    beta: bool
    input_rate: int  # the rate the fake reads the input at (24 kHz unless told otherwise)
    turn_detection: dict | None = field(default_factory=lambda: {"type": "server_vad"})
    samples: int = 0  # input received, at input_rate
    committed_to: int = 0  # manual turns: input up to here is committed
    speaking: bool = False
    quiet_ms: float = 0.0
    speech_item: str | None = None
    last_item: str | None = None
    response: dict | None = None  # {"id", "item", "task", "sent_ms"}
    items_ms: dict[str, float] = field(default_factory=dict)  # assistant item -> audio sent (ms)

    @property
    def ms(self) -> float:
        return self.samples * 1000 / self.input_rate


class ConformanceFake(LoopbackPeer):
    def __init__(
        self, broken: Broken | None = None, reply_ms: int = 3000, input_rate: int = INPUT_RATE
    ):
        self.broken = broken or Broken()
        self.reply_ms = reply_ms
        self.input_rate = input_rate  # 16000: a server that reads 24 kHz input as 16 kHz
        self.ids = itertools.count(1)
        self.received: list[dict] = []

    def _process_request(self, connection, request):
        return None

    def _id(self, prefix: str) -> str:
        return f"{prefix}_{next(self.ids)}"

    async def _send(self, c: _Conn, event: dict) -> None:
        name = event["type"]
        if c.beta:
            name = name.replace("response.output_audio", "response.audio")
        await c.ws.send(json.dumps({"event_id": self._id("event"), **event, "type": name}))

    async def _error(self, c: _Conn, code: str, message: str, event: dict | None = None) -> None:
        await self._send(
            c,
            {
                "type": "error",
                "error": {
                    "type": "invalid_request_error",
                    "code": code,
                    "message": message,
                    "event_id": (event or {}).get("event_id"),
                },
            },
        )

    def _session(self, c: _Conn) -> dict:
        if c.beta:
            return {
                "object": "realtime.session",
                "model": MODEL,
                "modalities": ["text", "audio"],
                "input_audio_format": "pcm16",
                "output_audio_format": "pcm16",
                "turn_detection": c.turn_detection,
            }
        return {
            "type": "realtime",
            "object": "realtime.session",
            "model": MODEL,
            "output_modalities": ["audio"],
            "audio": {
                "input": {
                    "format": {"type": "audio/pcm", "rate": c.input_rate},
                    "turn_detection": c.turn_detection,
                },
                "output": {"format": {"type": "audio/pcm", "rate": OUTPUT_RATE}, "voice": "alloy"},
            },
        }

    async def _handler(self, ws: ServerConnection) -> None:
        beta = "realtime=v1" in (ws.request.headers.get("OpenAI-Beta") or "")
        c = _Conn(ws, beta, self.input_rate)
        await self._send(c, {"type": "session.created", "session": self._session(c)})
        try:
            async for message in ws:
                try:
                    event = json.loads(message)
                except ValueError:
                    await self._error(c, "invalid_json", "the frame is not JSON")
                    continue
                self.received.append({k: v for k, v in event.items() if k != "audio"})
                await self._dispatch(c, event)
        finally:
            if c.response:
                c.response["task"].cancel()

    async def _dispatch(self, c: _Conn, event: dict) -> None:
        handlers = {
            "session.update": self._on_update,
            "input_audio_buffer.append": self._on_append,
            "input_audio_buffer.commit": self._on_commit,
            "response.create": self._on_create,
            "response.cancel": self._on_cancel,
            "conversation.item.truncate": self._on_truncate,
        }
        handler = handlers.get(event.get("type"))
        if handler is None:
            await self._error(c, "unknown_event", f"unknown event {event.get('type')!r}", event)
        else:
            await handler(c, event)

    # --- session and input ------------------------------------------------------------------------

    async def _on_update(self, c: _Conn, event: dict) -> None:
        session = event.get("session") or {}
        if self.broken.refuse_update:
            await self._error(c, "invalid_session", "this server takes no session.update", event)
            return
        if session.get("model") not in (None, MODEL):
            await self._error(c, "model_mismatch", f"this server serves {MODEL}", event)
            return
        holder = session if c.beta else (session.get("audio") or {}).get("input") or {}
        if "turn_detection" in holder:
            td = holder["turn_detection"]
            c.turn_detection = (
                None
                if td is None
                else {
                    "type": "server_vad",
                    "silence_duration_ms": 500,
                    "interrupt_response": True,
                    "create_response": True,
                    **td,
                }
            )
        await self._send(c, {"type": "session.updated", "session": self._session(c)})

    async def _on_append(self, c: _Conn, event: dict) -> None:
        pcm = (
            np.frombuffer(base64.b64decode(event.get("audio") or ""), dtype="<i2").astype(
                np.float32
            )
            / 32767
        )
        c.samples += len(pcm)
        if c.turn_detection is None or not len(pcm):
            return
        loud = float(np.sqrt(np.mean(pcm**2))) > SPEECH_RMS
        packet_ms = len(pcm) * 1000 / c.input_rate
        if loud and not c.speaking:
            c.speaking, c.quiet_ms, c.speech_item = True, 0.0, self._id("item")
            await self._send(
                c,
                {
                    "type": "input_audio_buffer.speech_started",
                    "item_id": c.speech_item,
                    "audio_start_ms": int(max(0.0, c.ms - packet_ms)),
                },
            )
            await self._barge_in(c)
        elif c.speaking:
            c.quiet_ms = 0.0 if loud else c.quiet_ms + packet_ms
            if c.quiet_ms >= c.turn_detection["silence_duration_ms"]:
                c.speaking = False
                await self._send(
                    c,
                    {
                        "type": "input_audio_buffer.speech_stopped",
                        "item_id": c.speech_item,
                        "audio_end_ms": int(c.ms),
                    },
                )
                await self._committed(c, c.speech_item)
                if c.turn_detection.get("create_response", True) and c.response is None:
                    self._respond(c)

    async def _barge_in(self, c: _Conn) -> None:
        if c.response is not None and self.broken.hang_up_at_barge_in:
            await c.ws.close(1011, "hung up")
            return
        if c.response is None or self.broken.ignore_barge_in:
            return
        if c.turn_detection.get("interrupt_response", True) or self.broken.cancel_regardless:
            await self._end_response(c, "cancelled", "turn_detected")

    async def _committed(self, c: _Conn, item: str) -> None:
        previous, c.last_item, c.committed_to = c.last_item, item, c.samples
        await self._send(
            c,
            {"type": "input_audio_buffer.committed", "item_id": item, "previous_item_id": previous},
        )

    async def _on_commit(self, c: _Conn, event: dict) -> None:
        if c.samples <= c.committed_to:
            await self._error(c, "input_audio_buffer_commit_empty", "nothing to commit", event)
            return
        await self._committed(c, self._id("item"))

    # --- responses --------------------------------------------------------------------------------

    async def _on_create(self, c: _Conn, event: dict) -> None:
        if c.response is not None:
            await self._error(
                c, "conversation_already_has_active_response", "a response is in progress", event
            )
            return
        self._respond(c)

    def _respond(self, c: _Conn) -> None:
        rid, item = self._id("resp"), self._id("item")
        c.response = {"id": rid, "item": item}
        c.response["task"] = asyncio.ensure_future(self._reply(c, rid, item))

    async def _reply(self, c: _Conn, rid: str, item: str) -> None:
        await self._send(
            c, {"type": "response.created", "response": {"id": rid, "status": "in_progress"}}
        )
        message = {"id": item, "type": "message", "role": "assistant", "content": []}
        await self._send(
            c,
            {
                "type": "response.output_item.added",
                "response_id": rid,
                "output_index": 0,
                "item": message,
            },
        )
        chunk = base64.b64encode(tone(DELTA_MS, OUTPUT_RATE)).decode()
        c.items_ms[item] = 0.0
        loop = asyncio.get_running_loop()
        due = loop.time()
        for _ in range(self.reply_ms // DELTA_MS):
            await self._send(
                c,
                {
                    "type": "response.output_audio.delta",
                    "response_id": rid,
                    "item_id": item,
                    "output_index": 0,
                    "content_index": 0,
                    "delta": chunk,
                },
            )
            c.items_ms[item] += DELTA_MS
            due += DELTA_MS / 1000
            await asyncio.sleep(max(0.0, due - loop.time()))
        await self._end_response(c, "completed", None, from_task=True)

    async def _end_response(
        self, c: _Conn, status: str, reason: str | None, from_task: bool = False
    ) -> None:
        response, c.response = c.response, None
        if response is None:
            return
        if not from_task:
            response["task"].cancel()
        details = {"type": status, "reason": reason} if reason else None
        await self._send(
            c,
            {
                "type": "response.done",
                "response": {"id": response["id"], "status": status, "status_details": details},
            },
        )

    async def _on_cancel(self, c: _Conn, event: dict) -> None:
        if self.broken.ignore_cancel:
            return
        if c.response is None or event.get("response_id") not in (None, c.response["id"]):
            await self._error(c, "response_cancel_not_active", "no response in progress", event)
            return
        await self._end_response(c, "cancelled", "client_cancelled")

    async def _on_truncate(self, c: _Conn, event: dict) -> None:
        if self.broken.ignore_truncate:
            return
        item, end = event.get("item_id"), event.get("audio_end_ms")
        if item not in c.items_ms or not isinstance(end, int) or not 0 <= end <= c.items_ms[item]:
            await self._error(c, "invalid_value", f"cannot truncate {item!r} at {end!r}", event)
            return
        await self._send(
            c,
            {
                "type": "conversation.item.truncated",
                "item_id": item,
                "content_index": event.get("content_index", 0),
                "audio_end_ms": end,
            },
        )


def speech_burst(seconds: float = 0.6, rate: int = 16000) -> Any:
    """A loud 220 Hz burst the fake's energy VAD takes for speech (an ``fdb.audio.Audio``)."""
    from fdb.audio import Audio

    t = np.arange(int(seconds * rate)) / rate
    return Audio((0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), rate)


@contextmanager
def in_thread(fake: LoopbackPeer) -> Iterator[str]:
    """Serve ``fake`` from an event loop of its own thread (for a caller that runs its own loop,
    such as the CLI); yields its URL."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(fake.__aenter__(), loop).result(10)
    try:
        yield fake.url
    finally:
        asyncio.run_coroutine_threadsafe(fake.__aexit__(None, None, None), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
