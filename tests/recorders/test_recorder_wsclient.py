"""The paced session's WebSocket client (recorders/wsclient.py) against real loopback servers
(the websockets package's server): messages whole and fragmented, the closing handshake either
way, the connection failures it must name (a message too big, invalid UTF-8, a bug of ours),
a refused upgrade, a peer that never answers CLOSE, and write backpressure."""

from __future__ import annotations

import asyncio
import base64
import gc
import hashlib
import json
from http import HTTPStatus

import pytest
from websockets.asyncio.server import serve

from recorders.eventloop import CLOCK
from recorders.wsclient import ABNORMAL_CLOSURE, Closed, Refused, open_client


class Peer:
    """A loopback server running ``handler(ws)`` for each connection; ``status`` refuses the
    upgrade with that HTTP status."""

    def __init__(self, handler, status: int | None = None, **options):
        self.handler, self.status, self.options = handler, status, options

    def _process_request(self, connection, request):
        return connection.respond(HTTPStatus(self.status), "no\n") if self.status else None

    async def __aenter__(self):
        self.server = await serve(
            self.handler,
            "127.0.0.1",
            0,
            process_request=self._process_request,
            compression=None,
            ping_interval=None,
            **self.options,
        )
        return f"ws://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/v1/realtime"

    async def __aexit__(self, *exc):
        self.server.close()
        await self.server.wait_closed()


def run(handler, client_steps, *, client_max: int = 1 << 20, status: int | None = None, **options):
    """Serve ``handler``, connect, run ``client_steps(client, got)``; returns (client, got)."""
    got: list[tuple[str | bytes, float]] = []

    async def main():
        async with Peer(handler, status, **options) as url:
            client = await open_client(
                url, lambda m, t: got.append((m, t)), [("X-Test", "1")], client_max, 5.0
            )
            await client_steps(client, got)
            await client.close(2.0)
            return client

    return asyncio.run(main()), got


async def _wait_closed(client, got):
    await asyncio.wait_for(asyncio.shield(client.closed), 5)


def test_messages_whole_and_fragmented_arrive_in_order_with_receipt_times():
    async def handler(ws):
        await ws.send(json.dumps({"type": "a"}))
        await ws.send(["frag", "mented ", "text é"])  # one text message in three frames
        await ws.send(b"\x00\x01")
        await ws.send(["", "tail"])
        await ws.close(1000, "done")

    before = CLOCK()
    client, got = run(handler, _wait_closed)
    assert [m for m, _ in got] == ['{"type": "a"}', "fragmented text é", b"\x00\x01", "tail"]
    times = [t for _, t in got]
    assert before <= times[0] <= times[1] <= times[2] <= times[3] <= CLOCK()
    assert (
        client.close_code == 1000
        and client.close_reason == "done"
        and client.failed_by_client is None
    )


def test_a_peer_close_without_a_reason_is_answered_and_logs_nothing(capsys):
    async def handler(ws):
        await ws.send("x")
        await ws.close(1000)  # a CLOSE frame with a code and no reason

    client, got = run(handler, _wait_closed)
    gc.collect()  # an unretrieved future exception would be reported here
    assert client.close_code == 1000 and client.close_reason == "" and not client.open
    assert capsys.readouterr().err == ""


def test_an_application_close_code_is_kept():
    async def handler(ws):
        await ws.close(4000, "app says bye")

    client, _ = run(handler, _wait_closed)
    assert (client.close_code, client.close_reason) == (4000, "app says bye")


def test_a_dropped_connection_is_an_abnormal_closure():
    async def handler(ws):
        ws.transport.abort()  # no CLOSE frame

    client, _ = run(handler, _wait_closed)
    assert client.close_code == ABNORMAL_CLOSURE and client.failed_by_client is None


@pytest.mark.parametrize("parts", [False, True], ids=["one frame", "fragments"])
def test_a_message_over_max_size_fails_the_connection_with_1009(parts):
    async def handler(ws):
        await ws.send(["a" * 600, "b" * 600] if parts else "a" * 1200)
        await asyncio.sleep(1)

    client, got = run(handler, _wait_closed, client_max=1000)
    assert got == [] and client.failed_by_client is not None and client.failed_by_client[0] == 1009


def test_invalid_utf8_in_a_text_message_fails_the_connection_with_1007():
    async def handler(ws):
        await ws.send(b"\xff\xfe", text=True)
        await asyncio.sleep(1)

    client, got = run(handler, _wait_closed)
    assert got == [] and client.failed_by_client == (1007, "invalid UTF-8 in a text message")


def test_an_exception_in_the_message_callback_closes_with_1011_and_is_named():
    got: list = []

    async def handler(ws):
        await ws.send("boom")
        await asyncio.sleep(1)

    def on_message(message, t):
        raise RuntimeError("bug")

    async def main():
        async with Peer(handler) as url:
            client = await open_client(url, on_message, None, 1 << 20, 5.0)
            await _wait_closed(client, got)
            return client

    client = asyncio.run(main())
    code, reason = client.failed_by_client
    assert code == 1011 and "RuntimeError('bug')" in reason


def test_a_ping_is_answered_and_sends_go_through():
    received: list = []

    async def handler(ws):
        await asyncio.wait_for(await ws.ping(b"hi"), 2)  # resolves on the client's pong
        received.append(await ws.recv())
        received.append(await ws.recv())
        await ws.send("pong seen")
        await ws.wait_closed()

    async def steps(client, got):
        client.send("one")
        client.send(b'{"two": 2}')
        await client.drained()
        while not got:
            await asyncio.sleep(0.01)

    client, got = run(handler, steps)
    assert received == ["one", '{"two": 2}'] and got[0][0] == "pong seen"
    assert client.close_code == 1000 and client.failed_by_client is None  # our CLOSE 1000, answered


def test_sending_after_the_close_raises_closed():
    async def handler(ws):
        await ws.close(1001, "going")

    async def steps(client, got):
        await _wait_closed(client, got)
        with pytest.raises(Closed):
            client.send("late")
        with pytest.raises(Closed):
            await client.drained()

    client, _ = run(handler, steps)
    assert client.close_code == 1001


@pytest.mark.parametrize("status", [503, 404])
def test_a_refused_upgrade_carries_its_status(status):
    async def main():
        async with Peer(lambda ws: None, status=status) as url:
            await open_client(url, lambda m, t: None, None, 1 << 20, 5.0)

    with pytest.raises(Refused) as info:
        asyncio.run(main())
    assert info.value.status == status


async def _upgrade(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float = 0.0
) -> None:
    """Accept the client's upgrade by hand (RFC 6455 §4.2.2),
    ``delay`` seconds after its request."""
    request = await reader.readuntil(b"\r\n\r\n")
    key = next(
        line.split(b":", 1)[1].strip()
        for line in request.split(b"\r\n")
        if line.lower().startswith(b"sec-websocket-key:")
    )
    accept = base64.b64encode(hashlib.sha1(key + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest())
    await asyncio.sleep(delay)
    writer.write(
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n"
    )


async def _mute_peer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Accepts the upgrade and then never reads nor writes again."""
    await _upgrade(reader, writer)
    await asyncio.sleep(10)
    writer.close()


async def _raw_server(handler):
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    return server, f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}/"


def _open_with(peer):
    """Serve the raw handler ``peer`` and open a client to it (what ``open_client`` raises,
    raises)."""

    async def main():
        server, url = await _raw_server(peer)
        try:
            return await open_client(url, lambda m, t: None, None, 1 << 20, 5.0)
        finally:
            server.close()

    return asyncio.run(main())


def test_close_is_bounded_when_the_peer_never_answers():
    async def main():
        server, url = await _raw_server(_mute_peer)
        try:
            client = await open_client(url, lambda m, t: None, None, 1 << 20, 5.0)
            start = CLOCK()
            await client.close(0.3)
            return client, CLOCK() - start
        finally:
            server.close()

    client, took = asyncio.run(main())
    assert 0.25 <= took < 2.0 and client.closed.done() and client.close_code == ABNORMAL_CLOSURE


def test_drained_waits_while_the_peer_does_not_read():
    release = asyncio.Event()

    async def handler(ws):
        await release.wait()
        async for _ in ws:
            pass

    async def steps(client, got):
        chunk = "x" * (1 << 20)
        for _ in range(64):  # far more than the socket buffers hold
            client.send(chunk)
        with pytest.raises(TimeoutError):  # a waiter given up on leaves the shared wait alone
            await asyncio.wait_for(client.drained(), 0.3)
        waiter = asyncio.ensure_future(client.drained())
        await asyncio.sleep(0.3)
        assert not waiter.done()  # still paused: the peer has read nothing
        release.set()
        await asyncio.wait_for(waiter, 10)

    client, _ = run(handler, steps, max_size=None)
    assert client.failed_by_client is None


def test_a_close_frame_without_a_code_reads_1005_and_is_answered_with_1000():
    replies: list[bytes] = []

    async def peer(reader, writer):
        await _upgrade(reader, writer)
        writer.write(b"\x88\x00")  # FIN + CLOSE, no payload
        replies.append(await reader.readexactly(8))  # the client's masked CLOSE with a 2-byte code
        writer.close()

    async def main():
        server, url = await _raw_server(peer)
        try:
            client = await open_client(url, lambda m, t: None, None, 1 << 20, 5.0)
            await asyncio.wait_for(asyncio.shield(client.closed), 5)
            return client
        finally:
            server.close()

    client = asyncio.run(main())
    assert client.close_code == 1005 and client.close_reason == ""
    frame = replies[0]
    code = bytes(b ^ frame[2 + (k % 4)] for k, b in enumerate(frame[6:8]))  # unmask
    assert frame[0] == 0x88 and frame[1] == 0x82 and int.from_bytes(code, "big") == 1000


def test_after_the_closing_handshake_a_server_that_keeps_the_socket_is_disconnected(monkeypatch):
    import recorders.wsclient as wsclient

    monkeypatch.setattr(wsclient, "SERVER_CLOSE_WAIT_S", 0.2)

    async def peer(reader, writer):
        await _upgrade(reader, writer)
        writer.write(b"\x88\x02\x03\xe8")  # CLOSE 1000
        await reader.read()  # until the client closes the socket
        writer.close()

    async def main():
        server, url = await _raw_server(peer)
        try:
            client = await open_client(url, lambda m, t: None, None, 1 << 20, 5.0)
            start = CLOCK()
            await asyncio.wait_for(asyncio.shield(client.closed), 5)
            return client, CLOCK() - start
        finally:
            server.close()

    client, took = asyncio.run(main())
    assert client.close_code == 1000 and 0.15 <= took < 2.0


def test_a_connection_closed_during_the_upgrade_is_a_connection_error():
    async def peer(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.close()

    with pytest.raises(ConnectionError, match="during the WebSocket upgrade"):
        _open_with(peer)


def test_a_refusal_with_a_status_http_does_not_name_still_carries_it():
    async def peer(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 520 Unknown Error\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    with pytest.raises(Refused) as info:
        _open_with(peer)
    assert info.value.status == 520


def test_an_upgrade_given_up_on_leaves_no_connection_behind():
    """The opener is cancelled (its deadline) while the server delays its 101; when the 101
    comes, the connection is closed at once and its first message is never delivered."""
    got: list = []

    async def main():
        closed_by_client = asyncio.Event()

        async def peer(reader, writer):
            await _upgrade(reader, writer, delay=0.3)
            writer.write(b"\x81\x02hi")  # a text message right behind the 101
            await reader.read()  # EOF once the client closes the socket
            closed_by_client.set()
            writer.close()

        server, url = await _raw_server(peer)
        try:
            opening = asyncio.ensure_future(
                open_client(url, lambda m, t: got.append(m), None, 1 << 20, 5.0)
            )
            await asyncio.sleep(0.1)
            opening.cancel()
            with pytest.raises(asyncio.CancelledError):
                await opening
            await asyncio.wait_for(closed_by_client.wait(), 3)
        finally:
            server.close()

    asyncio.run(main())
    assert got == []


def test_a_close_reason_is_cut_to_what_a_close_frame_may_carry():
    from recorders.wsclient import _close_reason

    assert _close_reason("short") == b"short"
    cut = _close_reason("é" * 100)  # 200 bytes of UTF-8
    assert len(cut) <= 123 and cut.decode("utf-8") == "é" * 61
