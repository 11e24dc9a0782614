"""Scripted peers of the other dialects (native session protocol, legacy half-duplex, OpenAI GA
and beta), real WebSocket servers on loopback, with the faults of issue 5's "Bad input and
faults": disconnect, error event, malformed JSON, stall, out-of-order and duplicated events, 503
at connect, an oversized message, a wrong output sample rate and a slow drain.
"""

from __future__ import annotations

import asyncio
import base64
import json
from dataclasses import dataclass
from http import HTTPStatus

from websockets.asyncio.server import ServerConnection

from fdb.dialects import Dialect, get_dialect
from tests.recorders.recorder_fakes import LoopbackPeer, tone


@dataclass
class Faults:
    reply_at_packet: int | None = 2
    barge_in: bool = False  # a speech_started during the reply, which is then cancelled
    send_cleared: bool = False  # output_audio_buffer.cleared at the barge-in
    disconnect_at_packet: int | None = None
    error_at_packet: int | None = None
    error_body: object = None  # the error event's ``error`` (None: an internal server error)
    invalid_json_at_packet: int | None = None
    stall_at_packet: int | None = None  # from here on the peer reads but never answers
    out_of_order: bool = False  # the reply's audio before its response.created
    duplicate_updated: bool = False  # session.updated sent twice
    oversized_at_packet: int | None = None  # one 17 MiB text frame
    output_rate: int | None = None  # the output rate declared in session.updated
    delta_rate: int | None = None  # sample_rate_hz on each audio delta
    drain_delay_s: float = 0.0
    deny_admissions: int = 0


class DialectServer(LoopbackPeer):
    """Speaks ``profile`` (not turn-based: see recorder_fakes.ScriptedServer) with ``faults``."""

    def __init__(self, profile: str | Dialect, faults: Faults | None = None):
        self.profile = get_dialect(profile)
        self.f = faults or Faults()
        self.denied = 0
        self.headers: list[dict[str, str]] = []
        self.received: list[dict] = []

    serve_options = {"max_size": None}

    def _process_request(self, connection, request):
        self.headers.append(dict(request.headers))
        if self.denied < self.f.deny_admissions:
            self.denied += 1
            return connection.respond(HTTPStatus.SERVICE_UNAVAILABLE, "busy\n")
        return None

    async def _send(self, ws: ServerConnection, event: dict) -> None:
        await ws.send(json.dumps(event))

    def _session(self, update: dict) -> dict:
        p, requested = self.profile, update.get("session") or {}
        rate = self.f.output_rate or p.formats.output_rate
        if p.shape == "beta":
            session = {
                "modalities": ["text", "audio"],
                "turn_detection": requested.get("turn_detection"),
            }
            if p.formats.declared or self.f.output_rate:
                session["output_audio_format"] = "pcm16" if rate == 24000 else f"pcm16_{rate}"
            return session
        audio_in = {"format": {"type": "audio/pcm", "rate": p.formats.input_rate}}
        if p.turn_detection.required:
            audio_in["turn_detection"] = ((requested.get("audio") or {}).get("input") or {}).get(
                "turn_detection"
            )
        session = {
            "type": "realtime",
            "audio": {"input": audio_in, "output": {"format": {"type": "audio/pcm", "rate": rate}}},
        }
        if p.oracle.required_grant:
            session["sglang"] = {
                "granted": {**dict(p.oracle.required_grant), "native_full_duplex": True}
            }
        return session

    async def _handler(self, ws: ServerConnection) -> None:
        await self._send(ws, {"type": "session.created", "session": {"id": "sess_1"}})
        update = json.loads(await ws.recv())
        self.received.append(update)
        answer = {
            "type": "session.updated",
            "client_event_id": update.get("event_id"),
            "session": self._session(update),
        }
        await self._send(ws, answer)
        if self.f.duplicate_updated:
            await self._send(ws, answer)
        state = {"samples": 0, "unit": 0, "seq": 0, "stalled": False, "rid": None}
        async for message in ws:
            event = json.loads(message)
            self.received.append({k: v for k, v in event.items() if k != "audio"})
            if state["stalled"]:
                continue
            kind = event["type"]
            if kind == "input_audio_buffer.append":
                if not await self._on_append(ws, event, state):
                    return
            elif kind == "session.update":
                await self._send(
                    ws,
                    {
                        "type": "session.updated",
                        "client_event_id": event.get("event_id"),
                        "session": self._session(update),
                    },
                )
            elif kind == "sglang.input_audio.end":
                await self._on_end(ws, event, state)
            elif kind == "session.close":
                await self._send(
                    ws,
                    {
                        "type": "session.closed",
                        "reason": "client_closed",
                        "client_event_id": event.get("event_id"),
                    },
                )
                await ws.close(1000)
                return

    async def _on_append(self, ws: ServerConnection, event: dict, state: dict) -> bool:
        f, seq = self.f, state["seq"]
        state["seq"] += 1
        state["samples"] += len(base64.b64decode(event["audio"])) // 2
        if seq == f.stall_at_packet:
            state["stalled"] = True
            return True
        if seq == f.disconnect_at_packet:
            await ws.close(1011, "internal")
            return False
        if seq == f.error_at_packet:
            await self._send(
                ws,
                {
                    "type": "error",
                    "error": {"type": "server_error", "code": "internal", "message": "boom"}
                    if f.error_body is None
                    else f.error_body,
                },
            )
        if seq == f.invalid_json_at_packet:
            await ws.send("{not json")
        if seq == f.oversized_at_packet:
            await ws.send(
                json.dumps({"type": "response.text.delta", "delta": "x" * (17 * 1024 * 1024)})
            )
        if self.profile.events.receipts:
            await self._native_receipts(ws, event, state)
        if seq == f.reply_at_packet:
            await self._reply(ws, state)
        return True

    async def _native_receipts(self, ws: ServerConnection, event: dict, state: dict) -> None:
        per_ms = self.profile.formats.input_rate // 1000
        unit = self.profile.units.unit_ms * per_ms
        await self._send(
            ws,
            {
                "type": "sglang.input_audio.accepted",
                "seq": event["sglang"]["seq"],
                "accepted_end_ms": state["samples"] / per_ms,
                "client_event_id": event["event_id"],
            },
        )
        while state["samples"] - state["unit"] * unit >= unit:
            await self._unit(ws, state, self.profile.units.unit_ms)

    async def _unit(self, ws: ServerConnection, state: dict, duration_ms: float) -> None:
        k = state["unit"]
        await self._send(
            ws,
            {
                "type": "sglang.unit.done",
                "unit_id": f"unit_{k}",
                "sglang": {
                    "media_time": {
                        "t_start_ms": k * self.profile.units.unit_ms,
                        "duration_ms": duration_ms,
                    }
                },
            },
        )
        state["unit"] += 1

    def _delta(self, rid: str) -> dict:
        event = {
            "type": self.profile.events.audio_delta[0],
            "response_id": rid,
            "item_id": "item_2",
            "delta": base64.b64encode(tone(100)).decode(),
        }
        if self.f.delta_rate:
            event["sample_rate_hz"] = self.f.delta_rate
        return event

    async def _reply(self, ws: ServerConnection, state: dict) -> None:
        rid = state["rid"] = "resp_1"
        native = self.profile.end.mode == "drain"
        if not native:
            await self._send(ws, {"type": "input_audio_buffer.speech_started", "audio_start_ms": 0})
            await self._send(ws, {"type": "input_audio_buffer.speech_stopped", "audio_end_ms": 100})
        created = {"type": "response.created", "response": {"id": rid, "status": "in_progress"}}
        if self.f.out_of_order:
            await self._send(ws, self._delta(rid))
        await self._send(ws, created)
        for _ in range(3):
            await self._send(ws, self._delta(rid))
        if native:
            return  # the native session is one response, done after the input end
        if self.f.barge_in:
            await self._send(
                ws, {"type": "input_audio_buffer.speech_started", "audio_start_ms": 200}
            )
            if self.f.send_cleared:
                await self._send(ws, {"type": "output_audio_buffer.cleared", "response_id": rid})
            await self._done(ws, rid, "cancelled", "turn_detected")
        else:
            await self._done(ws, rid, "completed", None)

    async def _done(self, ws: ServerConnection, rid: str, status: str, reason: str | None) -> None:
        details = {"type": status, "reason": reason} if reason else None
        await self._send(
            ws,
            {
                "type": "response.done",
                "response": {"id": rid, "status": status, "status_details": details},
            },
        )

    async def _on_end(self, ws: ServerConnection, event: dict, state: dict) -> None:
        ms, unit_ms = (
            state["samples"] / (self.profile.formats.input_rate // 1000),
            self.profile.units.unit_ms,
        )
        await self._send(
            ws,
            {
                "type": "sglang.input_audio.ended",
                "accepted_end_ms": ms,
                "tail_policy": "pad",
                "client_event_id": event["event_id"],
            },
        )
        tail = ms - state["unit"] * unit_ms
        if tail > 0:
            await self._unit(ws, state, tail)
        if state["rid"]:
            reason = "input_audio_ended" if self.profile.responses.single else "stop"
            await self._done(ws, state["rid"], "completed", reason)
        await asyncio.sleep(self.f.drain_delay_s)
        await self._send(
            ws,
            {
                "type": "sglang.input_audio.drained",
                "accepted_end_ms": ms,
                "consumed_ms": ms,
                "discarded_ms": 0,
                "padding_ms": self.profile.units.padding_ms(ms),
                "client_event_id": event["event_id"],
            },
        )
