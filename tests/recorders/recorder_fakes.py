"""A scripted server of the turn-based session protocol, for protocol-violation tests.

It answers the client step by step (created, updated echoing turn_detection, one accepted
receipt per append, a unit.done per 200 ms, ended/drained at the input end, closed on close)
and can be told to misbehave: deny admission, disconnect, send an error, break seq order,
send invalid JSON, never drain, echo another turn-detection type.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from http import HTTPStatus

import numpy as np
from websockets.asyncio.server import ServerConnection, serve

UNIT_SAMPLES = 3200  # 200 ms at 16 kHz


@dataclass
class Script:
    reply_at_packet: int | None = 3
    reply_ms: int = 300
    delta_ms: int = 100
    cancel_reply: bool = False
    disconnect_at_packet: int | None = None
    error_at_packet: int | None = None
    fatal_error: bool = True
    bad_seq_at_packet: int | None = None
    invalid_json_at_packet: int | None = None
    never_drain: bool = False
    deny_admissions: int = 0
    echo_type: str | None = None
    server_close_at_packet: int | None = None  # session.closed + close code, unasked
    server_close_code: int = 1000
    bad_delta: str | None = None  # the reply's second audio delta carries this text


def tone(ms: int, rate: int = 24000, freq: float = 440.0) -> bytes:
    t = np.arange(int(rate * ms / 1000)) / rate
    return (np.sin(2 * np.pi * freq * t) * 8000).astype("<i2").tobytes()


class LoopbackPeer:
    """A real WebSocket server on a free loopback port; subclasses give ``_handler`` and
    ``_process_request`` (admission)."""

    serve_options: dict = {}
    port = 0
    _server = None

    async def __aenter__(self):
        self._server = await serve(
            self._handler,
            "127.0.0.1",
            0,
            process_request=self._process_request,
            compression=None,
            ping_interval=None,
            **self.serve_options,
        )
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc) -> None:
        self._server.close()
        await self._server.wait_closed()

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/v1/realtime"


class ScriptedServer(LoopbackPeer):
    def __init__(self, script: Script):
        self.script = script
        self.denied = 0

    def _process_request(self, connection, request):
        if self.denied < self.script.deny_admissions:
            self.denied += 1
            return connection.respond(HTTPStatus.SERVICE_UNAVAILABLE, "no free session\n")
        return None

    async def _send(self, ws: ServerConnection, event: dict) -> None:
        await ws.send(json.dumps(event))

    async def _handler(self, ws: ServerConnection) -> None:
        await self._send(
            ws,
            {"type": "session.created", "session": {"id": "sess_1", "sglang": {"granted": None}}},
        )
        update = json.loads(await ws.recv())
        requested = update["session"]["audio"]["input"]["turn_detection"]
        echo = {**requested, "type": self.script.echo_type or requested["type"]}
        await self._send(
            ws,
            {
                "type": "session.updated",
                "client_event_id": update["event_id"],
                "session": {
                    "audio": {
                        "input": {
                            "format": {"type": "audio/pcm", "rate": 16000},
                            "turn_detection": echo,
                        },
                        "output": {"format": {"type": "audio/pcm", "rate": 24000}},
                    },
                    "sglang": {
                        "granted": {
                            "interaction": "turn_based",
                            "native_unit_ms": 200,
                            "tail_policy": "flush",
                        }
                    },
                },
            },
        )
        state = {"samples": 0, "unit": 0}
        async for message in ws:
            event = json.loads(message)
            kind = event["type"]
            if kind == "input_audio_buffer.append":
                if not await self._on_append(ws, event, state):
                    return
            elif kind == "sglang.input_audio.end":
                await self._on_end(ws, event, state)
            elif kind == "session.close":
                await self._send(
                    ws,
                    {
                        "type": "session.closed",
                        "reason": "client_closed",
                        "client_event_id": event["event_id"],
                    },
                )
                await ws.close(1000)
                return

    async def _on_append(self, ws: ServerConnection, event: dict, state: dict) -> bool:
        s = self.script
        seq = event["sglang"]["seq"]
        state["samples"] += len(base64.b64decode(event["audio"])) // 2
        if seq == s.server_close_at_packet:
            await self._send(ws, {"type": "session.closed", "reason": "idle_timeout"})
            await ws.close(s.server_close_code, "idle_timeout")
            return False
        if seq == s.disconnect_at_packet:
            await ws.close(1011, "internal")
            return False
        if seq == s.error_at_packet:
            await self._send(
                ws,
                {
                    "type": "error",
                    "error": {"type": "server_error", "code": "internal", "message": "boom"},
                    "sglang": {"fatal": s.fatal_error},
                },
            )
            if s.fatal_error:
                await ws.close(1011, "internal")
                return False
        if seq == s.invalid_json_at_packet:
            await ws.send("{not json")
        await self._send(
            ws,
            {
                "type": "sglang.input_audio.accepted",
                "seq": seq + 1 if seq == s.bad_seq_at_packet else seq,
                "accepted_end_ms": state["samples"] / 16,
                "client_event_id": event["event_id"],
            },
        )
        while state["samples"] - state["unit"] * UNIT_SAMPLES >= UNIT_SAMPLES:
            await self._unit(ws, state, 200)
        if seq == s.reply_at_packet:
            await self._reply(ws)
        return True

    async def _unit(self, ws: ServerConnection, state: dict, duration_ms: float) -> None:
        k = state["unit"]
        await self._send(
            ws,
            {
                "type": "sglang.unit.done",
                "unit_id": f"unit_{k}",
                "sglang": {"media_time": {"t_start_ms": k * 200, "duration_ms": duration_ms}},
            },
        )
        state["unit"] += 1

    async def _reply(self, ws: ServerConnection) -> None:
        s = self.script
        rid = "resp_1"
        await self._send(
            ws,
            {"type": "input_audio_buffer.speech_started", "audio_start_ms": 0, "item_id": "item_1"},
        )
        await self._send(
            ws,
            {"type": "input_audio_buffer.speech_stopped", "audio_end_ms": 200, "item_id": "item_1"},
        )
        await self._send(
            ws, {"type": "response.created", "response": {"id": rid, "status": "in_progress"}}
        )
        chunks = [tone(s.delta_ms)] * (s.reply_ms // s.delta_ms)
        if s.cancel_reply:
            chunks = chunks[:1]
        for k, chunk in enumerate(chunks):
            delta = (
                s.bad_delta
                if k == 1 and s.bad_delta is not None
                else base64.b64encode(chunk).decode()
            )
            await self._send(
                ws,
                {
                    "type": "response.output_audio.delta",
                    "response_id": rid,
                    "item_id": "item_2",
                    "delta": delta,
                },
            )
        if s.cancel_reply:
            await self._send(
                ws,
                {
                    "type": "input_audio_buffer.speech_started",
                    "audio_start_ms": 300,
                    "item_id": "item_3",
                },
            )
            status, reason = "cancelled", "interrupted"
        else:
            await self._send(
                ws, {"type": "response.output_audio.done", "response_id": rid, "item_id": "item_2"}
            )
            status, reason = "completed", "stop"
        await self._send(
            ws,
            {
                "type": "response.done",
                "response": {
                    "id": rid,
                    "status": status,
                    "status_details": {"type": status, "reason": reason},
                },
            },
        )

    async def _on_end(self, ws: ServerConnection, event: dict, state: dict) -> None:
        ms = state["samples"] / 16
        await self._send(
            ws,
            {
                "type": "sglang.input_audio.ended",
                "accepted_end_ms": ms,
                "tail_policy": "flush",
                "client_event_id": event["event_id"],
            },
        )
        tail = state["samples"] - state["unit"] * UNIT_SAMPLES
        if tail > 0:
            await self._unit(ws, state, tail / 16)
        if self.script.never_drain:
            return
        await self._send(
            ws,
            {
                "type": "sglang.input_audio.drained",
                "accepted_end_ms": ms,
                "consumed_ms": ms,
                "discarded_ms": 0,
                "padding_ms": 0,
                "client_event_id": event["event_id"],
            },
        )


# ---------------------------------------------------------------------------------------------
# Hand-built traces: a session that follows the turn-based profile, for oracle and export tests.


@dataclass
class Reply:
    at: float  # receipt time of response.created (s)
    chunks: int = 3
    chunk_ms: int = 100
    cancel: bool = False
    rid: str = "resp_1"
    spacing_s: float = 0.0  # receipt spacing of the deltas (0: a burst)


def good_trace(
    input_samples: int = 16000,
    replies: tuple[Reply, ...] = (Reply(at=0.3),),
    late_packet: int | None = None,
    late_s: float = 0.0,
    echo_type: str = "server_vad",
):
    """(events, output.pcm bytes) of a clean turn-based session of ``input_samples`` at 16 kHz."""
    from fdb.session_records import TraceEvent

    rows: list[tuple[float, str, str, dict, dict]] = []

    def add(t, direction, kind, event, **extra):
        rows.append((round(t, 6), direction, kind, event, extra))

    td = {"type": "server_vad", "silence_duration_ms": 500}
    add(-0.3, "note", "connect", {"url": "ws://x", "attempt": 1})
    add(-0.2, "recv", "session.created", {"type": "session.created", "session": {"id": "s"}})
    add(
        -0.15,
        "send",
        "session.update",
        {
            "type": "session.update",
            "event_id": "u1",
            "session": {"type": "realtime", "audio": {"input": {"turn_detection": td}}},
        },
    )
    add(
        -0.1,
        "recv",
        "session.updated",
        {
            "type": "session.updated",
            "client_event_id": "u1",
            "session": {
                "audio": {
                    "input": {
                        "format": {"rate": 16000},
                        "turn_detection": {**td, "type": echo_type},
                    },
                    "output": {"format": {"type": "audio/pcm", "rate": 24000}},
                }
            },
        },
    )
    sent, unit, last = 0, 0, -1.0
    for seq, start in enumerate(range(0, input_samples, 1280)):
        n = min(1280, input_samples - start)
        sched = seq * 0.08
        t = last = max(sched + (late_s if seq == late_packet else 0.0), last + 0.0015)  # in order
        add(
            t,
            "send",
            "input_audio_buffer.append",
            {
                "type": "input_audio_buffer.append",
                "event_id": f"a{seq}",
                "sglang": {"seq": seq},
                "audio_bytes": 2 * n,
            },
            scheduled=sched,
            t_end=round(t + 0.001, 6),
        )
        sent += n
        add(
            t + 0.002,
            "recv",
            "sglang.input_audio.accepted",
            {
                "type": "sglang.input_audio.accepted",
                "seq": seq,
                "accepted_end_ms": sent / 16,
                "client_event_id": f"a{seq}",
            },
        )
        while sent - unit * 3200 >= 3200:
            add(t + 0.003, "recv", "sglang.unit.done", _unit(unit, 200))
            unit += 1
    T = input_samples / 16000
    output = bytearray()
    for reply in replies:
        _add_reply(add, reply, output)
    add(T, "send", "sglang.input_audio.end", {"type": "sglang.input_audio.end", "event_id": "e1"})
    add(
        T + 0.01,
        "recv",
        "sglang.input_audio.ended",
        {
            "type": "sglang.input_audio.ended",
            "accepted_end_ms": sent / 16,
            "tail_policy": "flush",
            "client_event_id": "e1",
        },
    )
    if sent - unit * 3200 > 0:
        add(T + 0.011, "recv", "sglang.unit.done", _unit(unit, (sent - unit * 3200) / 16))
    add(
        T + 0.02,
        "recv",
        "sglang.input_audio.drained",
        {
            "type": "sglang.input_audio.drained",
            "accepted_end_ms": sent / 16,
            "consumed_ms": sent / 16,
            "discarded_ms": 0,
            "padding_ms": 0,
            "client_event_id": "e1",
        },
    )
    add(T + 0.03, "send", "session.close", {"type": "session.close", "event_id": "c1"})
    add(T + 0.04, "recv", "session.closed", {"type": "session.closed", "reason": "client_closed"})
    add(T + 0.05, "note", "connection.closed", {"code": 1000, "reason": None})
    rows.sort(key=lambda r: r[0])
    events = [TraceEvent(t=t, dir=d, type=k, event=e, **x) for t, d, k, e, x in rows]
    return events, bytes(output)


def _unit(k: int, duration_ms: float) -> dict:
    return {
        "type": "sglang.unit.done",
        "unit_id": f"unit_{k}",
        "sglang": {"media_time": {"t_start_ms": k * 200, "duration_ms": duration_ms}},
    }


def _add_reply(add, reply: Reply, output: bytearray) -> None:
    t, rid = reply.at, reply.rid
    add(
        t - 0.02,
        "recv",
        "input_audio_buffer.speech_started",
        {"type": "input_audio_buffer.speech_started"},
    )
    add(
        t,
        "recv",
        "response.created",
        {"type": "response.created", "response": {"id": rid, "status": "in_progress"}},
    )
    for i in range(reply.chunks):
        chunk = tone(reply.chunk_ms)
        add(
            t + 0.001 + i * reply.spacing_s,
            "recv",
            "response.output_audio.delta",
            {
                "type": "response.output_audio.delta",
                "response_id": rid,
                "item_id": "i",
                "delta": None,
                "audio_offset": len(output),
                "audio_bytes": len(chunk),
            },
        )
        output.extend(chunk)
    end = t + 0.002 + reply.chunks * reply.spacing_s
    if reply.cancel:
        add(
            end,
            "recv",
            "input_audio_buffer.speech_started",
            {"type": "input_audio_buffer.speech_started"},
        )
        done = {
            "id": rid,
            "status": "cancelled",
            "status_details": {"type": "cancelled", "reason": "interrupted"},
        }
        add(end + 0.05, "recv", "response.done", {"type": "response.done", "response": done})
    else:
        done = {
            "id": rid,
            "status": "completed",
            "status_details": {"type": "completed", "reason": "stop"},
        }
        add(end + 0.001, "recv", "response.done", {"type": "response.done", "response": done})


def write_session(
    out_dir, pcm: bytes, events, output: bytes, status: str = "ok", failure: str | None = None
):
    """A session directory written by the recorder's own writer from a hand-built trace."""
    from pathlib import Path

    from fdb.dialects import TURN_BASED
    from recorders.recording import SessionOutcome, write_input_wav, write_recording

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    sha = write_input_wav(out_dir, pcm, 16000)
    outcome = SessionOutcome(
        trace=list(events),
        output=output,
        status=status,
        failure=failure,
        close_code=1000,
        close_reason=None,
        admission_denials=0,
        granted_session=None,
        t0_wall=None,
        elapsed_s=1.0,
    )
    return write_recording(
        out_dir,
        outcome,
        base={"sample_id": out_dir.name, "variant": "main", "url": "ws://x", "timeout_s": 90.0},
        profile=TURN_BASED,
        pcm=pcm,
        source_rate=16000,
        input_wav_sha256=sha,
        turn_detection={"type": "server_vad", "silence_duration_ms": 500},
    )
