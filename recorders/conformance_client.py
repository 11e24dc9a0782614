"""The conformance scenarios' client: one fresh /v1/realtime connection in a profile's dialect,
a microphone that streams 80 ms packets on an absolute schedule, and waiting for events.

A :class:`ScenarioClient` connects, runs the handshake (session.created -> session.update ->
session.updated) and logs every server event with its arrival time on the loop's clock. Its
:class:`Mic` sends what it is told to say, in real time, and digital silence between (a client
with server-side turn detection streams its microphone all the time) unless it is told to stay
quiet between utterances (``turn_detection: null``). Nothing here judges: the scenarios of
:mod:`recorders.conformance_scenarios` read the log.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake

from fdb.dialects import Dialect, views

PACKET_MS = 80
CONNECT_TIMEOUT_S = 10.0
REFUSAL_GRACE_S = 1.0  # after an error event, how long session.updated may still come
Match = Callable[[views.Event], bool]


class ScenarioError(Exception):
    """The scenario could not get to what it exercises (connect, handshake, a closed socket)."""


@dataclass
class Utterance:
    """One thing the mic says; ``started``/``ended`` are the loop times of its first packet's
    send and of its last packet's send (None until then)."""

    pcm: bytes
    started: float | None = None
    ended: float | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)


class Mic:
    """Streams the client's input at the profile's rate in 80 ms packets on an absolute schedule."""

    def __init__(self, client: ScenarioClient, silence_between: bool):
        self.client, self.silence_between = client, silence_between
        self.bytes_per_packet = client.profile.formats.input_rate * PACKET_MS // 1000 * 2
        self.queue: list[tuple[Utterance, int]] = []  # (utterance, offset of its next packet)
        self.sent_bytes = 0
        self.seq = 0
        self.failed: str | None = None
        self._task: asyncio.Task | None = None

    @property
    def sent_ms(self) -> float:
        return self.sent_bytes / 2 / (self.client.profile.formats.input_rate / 1000.0)

    def say(self, pcm: bytes) -> Utterance:
        utterance = Utterance(pcm)
        self.queue.append((utterance, 0))
        return utterance

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def _next_packet(self, now: float) -> tuple[bytes | None, Utterance | None]:
        """The next packet, and the utterance it ends (if it does)."""
        if not self.queue:
            return (b"\0" * self.bytes_per_packet if self.silence_between else None), None
        utterance, offset = self.queue[0]
        packet = utterance.pcm[offset : offset + self.bytes_per_packet]
        if offset == 0:
            utterance.started = now
        if offset + self.bytes_per_packet >= len(utterance.pcm):
            self.queue.pop(0)
            return packet, utterance
        self.queue[0] = (utterance, offset + self.bytes_per_packet)
        return packet, None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        due = loop.time()
        ended: Utterance | None = None
        try:
            while True:
                packet, ended = self._next_packet(loop.time())
                if packet:
                    await self.client.append(packet, self.seq, self.sent_ms)
                    self.seq += 1
                    self.sent_bytes += len(packet)
                if ended is not None:  # its last packet is on the wire
                    ended.ended = loop.time()
                    ended.done.set()
                due += PACKET_MS / 1000.0
                await asyncio.sleep(max(0.0, due - loop.time()))
        except ScenarioError as exc:  # the connection is gone: nobody waits for the rest
            self.failed = str(exc)
            for utterance in [u for u, _ in self.queue] + ([ended] if ended is not None else []):
                utterance.done.set()
            self.queue.clear()

    async def said(self, utterance: Utterance) -> float:
        """Wait until ``utterance`` is sent; returns when its first packet went out
        (ScenarioError when the connection closed before it was all sent)."""
        await utterance.done.wait()
        if utterance.started is None or utterance.ended is None or self.failed:
            raise ScenarioError(self.failed or self.client.closed or "the input could not be sent")
        return utterance.started


class ScenarioClient:
    """One connection; use as ``async with ScenarioClient(url, profile) as client``."""

    def __init__(self, url: str, profile: Dialect):
        self.url, self.profile = url, profile
        # (loop time, server event): each read through its view once, as it arrives
        self.events: list[tuple[float, views.Event]] = []
        self.sent: list[tuple[float, dict[str, Any]]] = []  # (loop time, client event, no audio)
        self.closed: str | None = None  # why the connection ended, once it has
        self._ws: ClientConnection | None = None
        self._reader: asyncio.Task | None = None
        self._new = asyncio.Event()
        self._ids = itertools.count(1)
        self.mic: Mic | None = None

    async def __aenter__(self) -> ScenarioClient:
        headers = list(self.profile.client.headers) or None
        try:
            self._ws = await asyncio.wait_for(
                connect(
                    self.url,
                    compression=None,
                    ping_interval=None,
                    proxy=None,
                    additional_headers=headers,
                    max_size=16 * 1024 * 1024,
                    open_timeout=CONNECT_TIMEOUT_S,
                ),
                CONNECT_TIMEOUT_S + 1,
            )
        except (OSError, InvalidHandshake, TimeoutError) as exc:
            raise ScenarioError(f"cannot connect: {exc or type(exc).__name__}") from exc
        self._reader = asyncio.create_task(self._read())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.mic is not None:
            await self.mic.stop()
        if self._ws is not None:
            await self._ws.close()
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)

    @staticmethod
    def now() -> float:
        return asyncio.get_running_loop().time()

    async def _read(self) -> None:
        assert self._ws is not None
        try:
            async for message in self._ws:
                try:
                    event = json.loads(message)
                except (TypeError, ValueError):
                    event = {"type": "<not json>", "text": str(message)[:200]}
                if not isinstance(event, dict):
                    event = {"type": "<not an object>"}
                self.events.append(
                    (self.now(), views.read_event(event, self.profile.events.audio_delta))
                )
                self._wake()
            self.closed = f"the server closed the connection (code {self._ws.close_code})"
        except ConnectionClosed as exc:
            self.closed = f"the connection closed (code {exc.rcvd.code if exc.rcvd else None})"
        self._wake()

    def _wake(self) -> None:
        self._new.set()
        self._new = asyncio.Event()

    # --- sending ---------------------------------------------------------------------------------

    async def send(self, event: dict[str, Any]) -> dict[str, Any]:
        """Send ``event`` with a fresh event_id; returns it as sent."""
        event = {"event_id": f"evt_conf_{next(self._ids)}", **event}
        await self._send_text(json.dumps(event), event)
        return event

    async def _send_text(self, text: str, logged: dict[str, Any]) -> None:
        if self._ws is None or self.closed:
            raise ScenarioError(self.closed or "not connected")
        self.sent.append((self.now(), logged))
        try:
            await self._ws.send(text)
        except ConnectionClosed as exc:
            raise ScenarioError(
                f"the connection closed while sending {logged.get('type')}"
            ) from exc

    async def append(self, pcm: bytes, seq: int, sent_ms: float) -> None:
        event: dict[str, Any] = {
            "type": "input_audio_buffer.append",
            "audio": base64.b64encode(pcm).decode(),
        }
        if self.profile.client.sends_seq:
            event["sglang"] = {"seq": seq}
            if self.profile.client.sends_t_start:
                event["sglang"]["t_start_ms"] = round(sent_ms)
        event = {"event_id": f"evt_conf_{next(self._ids)}", **event}
        await self._send_text(json.dumps(event), {**event, "audio": len(pcm)})

    # --- waiting ---------------------------------------------------------------------------------

    async def wait_for(
        self, match: Match, timeout_s: float, start: int = 0
    ) -> tuple[int, views.Event] | None:
        """The first logged event from index ``start`` that ``match``es, waiting up to
        ``timeout_s``; None at the timeout or when the connection has closed."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        cursor = start
        while True:
            for index in range(cursor, len(self.events)):
                if match(self.events[index][1]):
                    return index, self.events[index][1]
            cursor = len(self.events)
            remaining = deadline - loop.time()
            if remaining <= 0 or self.closed:
                return None
            new = self._new
            try:
                await asyncio.wait_for(new.wait(), remaining)
            except TimeoutError:
                pass

    def errors(self, start: int = 0) -> list[str]:
        """'code: message' of each error event from index ``start``."""
        out = []
        for _, event in self.events[start:]:
            if isinstance(event, views.Error):
                err = event.body
                out.append(f"{err.shown('code')}: {str(err.shown('message'))[:120]}")
        return out

    async def handshake(self, session: dict[str, Any], silence_between: bool) -> dict[str, Any]:
        """session.created, then ``session``'s update answered by session.updated; starts the
        mic. Returns the granted session; ScenarioError naming what went wrong."""
        if (
            await self.wait_for(lambda e: e.type == views.SESSION_CREATED, CONNECT_TIMEOUT_S)
            is None
        ):
            raise ScenarioError(self.closed or f"no session.created within {CONNECT_TIMEOUT_S:g} s")
        start = len(self.events)
        await self.send({"type": "session.update", "session": session})
        found = await self.wait_for(
            lambda e: e.type in (views.SESSION_UPDATED, views.ERROR), CONNECT_TIMEOUT_S, start
        )
        if found is not None and found[1].type == views.ERROR:  # a warning may come first
            found = await self.wait_for(
                lambda e: e.type == views.SESSION_UPDATED, REFUSAL_GRACE_S, start
            )
            if found is None:
                raise ScenarioError(f"session.update was refused ({self.errors(start)[0]})")
        if found is None:
            raise ScenarioError(
                self.closed or f"session.update was not answered within {CONNECT_TIMEOUT_S:g} s"
            )
        self.mic = Mic(self, silence_between)
        self.mic.start()
        granted = found[1].session if isinstance(found[1], views.SessionEvent) else None
        return granted if granted is not None else {}
