"""A client that stops reading: the outbox counts the events waiting to be written, and past
``max_pending_output_chunks`` (or ``_bytes``) the session fails naming the limit (close 1008)
while other sessions go on."""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import time

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from benchmarks.support.realtime_client import PACKET_BYTES, Client
from fdb.dialects.events import error_event
from serving.realtime.outbox import Activity, Outbox
from tests.serving.conftest import launched_server


class StuckSocket:
    """A WebSocket whose peer stopped reading: the first write never completes."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.release = asyncio.Event()

    async def send_text(self, data: str) -> None:
        self.sent.append(data)
        await self.release.wait()


def _event(k: int, size: int = 10):
    return error_event("x", "y" * size + str(k), kind="invalid_request_error")


SIZE = len(_event(10, 300).model_dump_json())  # every event of the test has this size
BYTES = 4 * SIZE + SIZE // 2  # four fit, the fifth does not


@pytest.mark.parametrize(
    "limit,phrase",
    [
        ({"max_chunks": 4}, "5 output events wait to be sent (max_pending_output_chunks 4)"),
        ({"max_bytes": BYTES}, f"(max_pending_output_bytes {BYTES})"),
    ],
)
def test_the_outbox_overflows_on_the_limit_and_drops_the_rest(limit, phrase):
    async def scenario():
        ws = StuckSocket()
        outbox = Outbox(ws, Activity(), **limit)
        tasks = [asyncio.create_task(outbox.send(_event(10 + k, 300))) for k in range(12)]
        await asyncio.wait_for(outbox.failed.wait(), 2)
        assert outbox.overflow is not None and phrase in outbox.overflow
        assert outbox.overflow.startswith("the client stopped reading")
        await asyncio.sleep(0)
        assert len(ws.sent) == 1  # only the stuck write reached the socket
        assert await outbox.send(_event(99)) is False  # nothing more is queued
        ws.release.set()
        return await asyncio.gather(*tasks)

    results = asyncio.run(scenario())
    assert results[:4] == [True] * 4 and not any(results[5:])  # the limit is 4 queued events


def test_within_the_limits_every_event_is_sent_in_order():
    async def scenario():
        ws = StuckSocket()
        ws.release.set()
        outbox = Outbox(ws, Activity(), max_chunks=2, max_bytes=10_000)
        for k in range(20):
            assert await outbox.send(_event(k))
            await asyncio.sleep(0)  # a reading client: the writer keeps up
        assert await outbox.flush(1.0)
        await outbox.stop()
        return ws.sent, outbox

    sent, outbox = asyncio.run(scenario())
    assert [json.loads(s)["error"]["message"][-2:].lstrip("y") for s in sent] == [
        str(k) for k in range(20)
    ]
    assert outbox.overflow is None and outbox.pending == 0 and outbox.pending_bytes == 0


BACKPRESSURE_YAML = """\
system: embedded-cascade
max_sessions: 2
max_pending_output_chunks: 8
session_update_timeout_s: 5.0
idle_timeout_s: 30.0
"""


async def _never_reading(url: str, deadline_s: float) -> tuple[int, float | None]:
    """A client with a 4 KiB receive buffer that never reads: it opens a session, then sends
    appends of silence as fast as the server takes them (each answered by a receipt it does
    not read). Returns (appends sent, seconds until the server dropped the connection)."""
    host, port = url.split("//")[1].split("/")[0].split(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    ws = await connect(
        url, sock=sock, max_size=1 << 20, max_queue=1, compression=None, ping_interval=None
    )
    await ws.recv()  # session.created
    await ws.send(
        json.dumps(
            {
                "type": "session.update",
                "session": {"type": "realtime", "audio": {"input": {"turn_detection": None}}},
            }
        )
    )
    await ws.recv()  # session.updated; from here on nothing is read
    packet = base64.b64encode(b"\0" * PACKET_BYTES).decode()
    start, seq = time.monotonic(), 0
    try:
        while time.monotonic() - start < deadline_s:
            await ws.send(
                json.dumps(
                    {"type": "input_audio_buffer.append", "audio": packet, "sglang": {"seq": seq}}
                )
            )
            seq += 1
            if seq % 50 == 0:
                await asyncio.sleep(0.01)
        return seq, None
    except ConnectionClosed:
        return seq, time.monotonic() - start
    finally:
        ws.transport.abort()


def test_a_client_that_stops_reading_fails_its_session_and_others_go_on(tmp_path):
    async def scenario(url: str):
        stuck = asyncio.create_task(_never_reading(url, 60.0))
        await asyncio.sleep(0.5)
        other = await Client.connect(url)  # a second session meanwhile
        try:
            await other.open_session(
                {"type": "realtime", "audio": {"input": {"turn_detection": None}}}
            )
            seq = await other.send_audio(b"\0" * PACKET_BYTES * 5, interval_s=0.0)
            await other.until("sglang.input_audio.accepted", 5)
            assert seq == 5
        finally:
            await other.close()
        return await stuck

    with launched_server(tmp_path, BACKPRESSURE_YAML) as info:
        sent, dropped_after = asyncio.run(scenario(info.ws_url))
        log = info.log()
    assert dropped_after is not None, f"the server kept the session after {sent} unread receipts"
    assert "the client stopped reading" in log and "max_pending_output_chunks 8" in log
    assert "Traceback" not in log
