"""Faults a client can cause (#25, defects 6, 8 and 9), against a real server with one slot:
an immediate reconnect after a close finds the slot free, a client that really stops reading
(a 4 KiB receive buffer it never drains) is closed with 1008 ``max_pending_output`` and frees
its slot, and malformed frames of every shape get an error event (or the WebSocket close code
for a frame the WebSocket layer refuses) while the session goes on.

The client here is a raw socket that speaks RFC 6455 itself, so nothing reads behind the
test's back and any frame can be sent (invalid UTF-8 in a text frame, a frame over the limit).
"""

from __future__ import annotations

import base64
import json
import os
import socket
import struct
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.serving.conftest import ServerInfo, launched_server

FAULTS_YAML = """\
system: embedded-cascade
max_sessions: 1
warmup: false
llm_contexts: 1
max_pending_output_bytes: 262144
session_update_timeout_s: 10.0
idle_timeout_s: 30.0
"""
# "sglang": {} asks for the session protocol: fatal flags, client_event_id echoes, receipts
OPEN = {"type": "realtime", "audio": {"input": {"turn_detection": None}}, "sglang": {}}
TEXT, BINARY, CLOSE, PING, PONG = 0x1, 0x2, 0x8, 0x9, 0xA


class Closed(Exception):  # noqa: N818 - the peer's close frame, not a failure of the client
    def __init__(self, code: int | None, reason: str) -> None:
        super().__init__(f"closed {code} {reason!r}")
        self.code, self.reason = code, reason


class Refused(Exception):  # noqa: N818
    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body}")
        self.status, self.body = status, body


class RawWs:
    """A blocking RFC 6455 client on a plain socket: it reads only when told to."""

    def __init__(self, port: int, rcvbuf: int | None = None, timeout: float = 10.0) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf is not None:  # before connect, so the window it advertises stays small
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(timeout)
        self.sock.connect(("127.0.0.1", port))
        self._buf = b""
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(
            (
                f"GET /v1/realtime HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                "Sec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        while b"\r\n\r\n" not in self._buf:
            self._fill()
        head, self._buf = self._buf.split(b"\r\n\r\n", 1)
        status = int(head.split(b" ", 2)[1])
        if status != 101:
            self.sock.close()
            raise Refused(status, self._buf.decode(errors="replace"))

    def _fill(self) -> None:
        data = self.sock.recv(65536)
        if not data:
            raise Closed(None, "eof")
        self._buf += data

    def _take(self, n: int) -> bytes:
        while len(self._buf) < n:
            self._fill()
        out, self._buf = self._buf[:n], self._buf[n:]
        return out

    def send_frame(self, opcode: int, payload: bytes) -> None:
        mask = os.urandom(4)
        n = len(payload)
        if n < 126:
            head = struct.pack("!BB", 0x80 | opcode, 0x80 | n)
        elif n < 1 << 16:
            head = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, n)
        else:
            head = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, n)
        body = (
            int.from_bytes(payload, "big") ^ int.from_bytes((mask * (n // 4 + 1))[:n], "big")
        ).to_bytes(n, "big")
        self.sock.sendall(head + mask + body)

    def send(self, type_: str, **fields: object) -> None:
        self.send_frame(TEXT, json.dumps({"type": type_, **fields}).encode())

    def recv_frame(self) -> tuple[int, bytes]:
        b0, b1 = self._take(2)
        n = b1 & 0x7F
        if n == 126:
            n = struct.unpack("!H", self._take(2))[0]
        elif n == 127:
            n = struct.unpack("!Q", self._take(8))[0]
        return b0 & 0x0F, self._take(n)

    def recv(self) -> dict:
        """The next server event; Closed at the server's close frame (answered)."""
        while True:
            opcode, payload = self.recv_frame()
            if opcode == TEXT:
                return json.loads(payload)
            if opcode == CLOSE:
                code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else None
                try:
                    self.send_frame(CLOSE, payload[:2])
                except OSError:
                    pass
                raise Closed(code, payload[2:].decode(errors="replace"))
            if opcode == PING:
                self.send_frame(PONG, payload)

    def until(self, type_: str) -> dict:
        while (event := self.recv())["type"] != type_:
            pass
        return event

    def open_session(self) -> None:
        assert self.recv()["type"] == "session.created"
        self.send("session.update", session=OPEN)
        assert self.until("session.updated")["type"] == "session.updated"

    def close(self, code: int = 1000) -> None:
        """The closing handshake as a client does it: our close, then wait for the echo."""
        self.send_frame(CLOSE, struct.pack("!H", code))
        try:
            while True:
                self.recv()
        except Closed:
            pass
        self.sock.close()

    def abort(self) -> None:
        """Drop the connection with a TCP reset, no close frame."""
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.sock.close()


@pytest.fixture(scope="module")
def one_slot(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerInfo]:
    with launched_server(tmp_path_factory.mktemp("faults"), FAULTS_YAML) as info:
        yield info


@pytest.fixture
def connect(one_slot: ServerInfo) -> Iterator:
    """``connect(**kw)``: a RawWs to the one-slot server, dropped when the test ends (so that
    a failed test leaves no session holding the slot for the next one)."""
    opened: list[RawWs] = []

    def open_one(**kwargs: object) -> RawWs:
        opened.append(RawWs(one_slot.port, **kwargs))
        return opened[-1]

    yield open_one
    for ws in opened:
        try:
            ws.abort()
        except OSError:
            pass


def _health(server: ServerInfo) -> dict:
    reply = httpx.get(f"{server.base_url}/health", timeout=5.0)
    assert reply.status_code == 200, reply.text
    return reply.json()


def _until_free(server: ServerInfo, timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while _health(server)["sessions"]:
        assert time.monotonic() < deadline, f"a session still holds the slot after {timeout_s} s"
        time.sleep(0.02)


# --- the slot is free once the connection is closed (#25, defect 8) ------------------------


def _close_by_session_close(ws: RawWs) -> None:
    ws.send("session.close")
    try:
        while True:
            ws.recv()
    except Closed as closed:
        assert (closed.code, closed.reason) == (1000, "client_closed")
    ws.sock.close()


@pytest.mark.slow
@pytest.mark.parametrize("how", ["session.close", "close frame", "tcp reset"])
def test_an_immediate_reconnect_finds_the_slot_free(one_slot, connect, how):
    """max_sessions 1: open a session, close it, reconnect at once; no try gets the 503."""
    _until_free(one_slot)
    close = {
        "session.close": _close_by_session_close,
        "close frame": RawWs.close,
        "tcp reset": RawWs.abort,
    }[how]
    refused, tries, start = [], 0, time.monotonic()
    while tries < 200 and time.monotonic() - start < 4.0:
        tries += 1
        try:
            ws = connect()
        except Refused as exc:
            refused.append(exc)
            _until_free(one_slot)  # so that each refusal is one try's
            continue
        ws.open_session()
        close(ws)
    assert not refused, f"{len(refused)} of {tries} reconnects refused: {refused[0]}"
    assert tries >= 30


# --- a client that really stops reading (#25, defect 9) ------------------------------------


def _stop_reading_while_sending(server: ServerInfo, stuck: RawWs, limit_s: float = 20.0) -> int:
    """Send session.updates with 60 kB of instructions, which session.updated echoes, and read
    nothing, until the server gives the session up (its slot is free again). The kernel
    buffers take a few MB first; past them the outbox's max_pending_output_bytes (256 KiB)
    overflows. Returns the updates sent."""
    stuck.sock.settimeout(0.5)
    start, sent, sending = time.monotonic(), 0, True
    while True:
        if (sent % 5 == 0 or not sending) and not _health(server)["sessions"]:
            return sent
        assert time.monotonic() - start < limit_s, (
            f"the session still held its slot after {sent} updates"
        )
        if not sending:
            time.sleep(0.02)
            continue
        try:
            stuck.send("session.update", session={"instructions": f"{sent} " + "x" * 60_000})
            sent += 1
        except TimeoutError:  # the server no longer reads what we send: it gave the session up
            sending = False


@pytest.mark.slow
def test_a_client_that_stops_reading_is_closed_with_1008_and_its_slot_is_freed(one_slot, connect):
    _until_free(one_slot)
    log_from = len(one_slot.log())
    stuck = connect(rcvbuf=4096)
    stuck.open_session()
    start = time.monotonic()
    sent = _stop_reading_while_sending(one_slot, stuck)
    freed_after = time.monotonic() - start
    other = connect()  # max_sessions 1: the slot is free while the stuck client waits
    other.open_session()

    stuck.sock.settimeout(10.0)  # reading again: what was written, the fatal error, the close
    events = []
    with pytest.raises(Closed) as closed:
        while True:
            try:
                events.append(stuck.recv())
            except OSError as exc:  # the server gave up on it before it read again
                pytest.fail(
                    f"{len(events)} events after {sent} updates, then {exc!r} without a close frame"
                )
    assert (closed.value.code, closed.value.reason) == (1008, "max_pending_output"), (
        f"{len(events)} events after {sent} updates, then {closed.value}"
    )
    assert time.monotonic() - start < freed_after + 5.0
    error = events[-1]
    assert error["type"] == "error" and error["sglang"]["fatal"] is True
    assert error["error"]["code"] == "max_pending_output"
    assert "max_pending_output_bytes 262144" in error["error"]["message"]
    assert [e["type"] for e in events[:-1]] == ["session.updated"] * (len(events) - 1)

    other.send("session.update", session={"instructions": "still here"})
    assert other.until("session.updated")["session"]["instructions"] == "still here"
    other.close()
    assert _health(one_slot)["status"] == "healthy"
    log = one_slot.log()[log_from:]
    assert "the client stopped reading" in log and "Traceback" not in log


@pytest.mark.slow
def test_a_client_that_never_reads_again_is_let_go(one_slot, connect):
    """The server gives such a client up within a bounded time (the last event and the close
    frame get 2 s each) and ends its session: the slot at once, the session soon after."""
    _until_free(one_slot)
    log_from = len(one_slot.log())
    stuck = connect(rcvbuf=4096)
    session_id = stuck.recv()["session"]["id"]
    stuck.send("session.update", session=OPEN)
    stuck.until("session.updated")
    start = time.monotonic()
    _stop_reading_while_sending(one_slot, stuck)
    assert time.monotonic() - start < 10.0
    while f"session {session_id} closed" not in one_slot.log():
        assert time.monotonic() - start < 15.0, (
            "the server still serves the session of a client that never reads"
        )
        time.sleep(0.1)
    other = connect()
    other.open_session()
    other.close()
    assert "Traceback" not in one_slot.log()[log_from:]


# --- malformed frames of every shape (#25, defect 6 and beyond) ----------------------------

MB10 = "x" * (10 << 20)
BIG_INT = "1" + "0" * 5000
MALFORMED = [  # (what the client sends, the frame, the error code the server answers with)
    ("a top-level array", b"[1, 2]", "invalid_json"),
    ("a top-level number", b"42", "invalid_json"),
    ("a top-level string", b'"session.close"', "invalid_json"),
    ("a top-level null", b"null", "invalid_json"),
    ("a top-level true", b"true", "invalid_json"),
    ("an empty text frame", b"", "invalid_json"),
    ("whitespace only", b"  \n ", "invalid_json"),
    ("broken JSON", b'{"type": "session.close"', "invalid_json"),
    (
        "two objects in one frame",
        b'{"type": "session.close"} {"type": "session.close"}',
        "invalid_json",
    ),
    (
        "a byte order mark before the object",
        '\ufeff{"type": "session.close"}'.encode(),
        "invalid_json",
    ),
    ("a raw control character in a string", b'{"type": "session\x01close"}', "invalid_json"),
    ("nesting 100,000 deep", b"[" * 100_000 + b"]" * 100_000, "invalid_json"),
    ("a duplicated key", b'{"type": "session.update", "type": "session.close"}', "invalid_json"),
    (
        "a duplicated key in a nested object",
        b'{"type": "session.update", "session": {"instructions": "a", "instructions": "b"}}',
        "invalid_json",
    ),
    (
        "NaN",
        b'{"type": "session.update", "session": {"sglang": {"sampling": {"temperature": NaN}}}}',
        "invalid_json",
    ),
    (
        "1e999 (a float that overflows)",
        b'{"type": "input_audio_buffer.append", "audio": "", '
        b'"sglang": {"seq": 0, "t_start_ms": 1e999}}',
        "invalid_json",
    ),
    (
        "an integer beyond 2**53",
        b'{"type": "conversation.item.truncate", "item_id": "item_1", '
        b'"audio_end_ms": 100000000000000000000}',
        "invalid_json",
    ),
    (
        "an integer of 5,001 digits",
        b'{"type": "input_audio_buffer.append", "audio": "", "sglang": {"seq": '
        + BIG_INT.encode()
        + b"}}",
        "invalid_json",
    ),
    (
        "a lone surrogate escape in event_id",
        b'{"type": "conversation.dance", "event_id": "\\ud800"}',
        "invalid_json",
    ),
    (
        "a lone surrogate escape in instructions",
        b'{"type": "session.update", "session": {"instructions": "hi \\udfff"}}',
        "invalid_json",
    ),
    ("an object without type", b'{"event_id": "evt_1"}', "invalid_event"),
    ("an empty object", b"{}", "invalid_event"),
    ("type a number", b'{"type": 5}', "invalid_event"),
    ("type null", b'{"type": null}', "invalid_event"),
    ("type a list", b'{"type": ["session.close"]}', "invalid_event"),
    ("type an object", b'{"type": {"name": "session.close"}}', "invalid_event"),
    ("an unknown type", b'{"type": "conversation.dance"}', "unknown_event"),
    (
        "event_id a number",
        b'{"type": "session.update", "event_id": 5, "session": {}}',
        "invalid_session",
    ),
    ("session a list", b'{"type": "session.update", "session": []}', "invalid_session"),
    (
        "turn_detection.type a list",
        b'{"type": "session.update", "session": {"audio": {"input": '
        b'{"turn_detection": {"type": ["server_vad"]}}}}}',
        "unsupported_turn_detection",
    ),
    (
        "sampling a list",
        b'{"type": "session.update", "session": {"sglang": {"sampling": [1]}}}',
        "invalid_session",
    ),
    ("audio a number", b'{"type": "input_audio_buffer.append", "audio": 5}', "invalid_event"),
    (
        "sglang.seq true",
        b'{"type": "input_audio_buffer.append", "audio": "", "sglang": {"seq": true}}',
        "invalid_event",
    ),
    (
        "sglang.seq a string",
        b'{"type": "input_audio_buffer.append", "audio": "", "sglang": {"seq": "0"}}',
        "invalid_event",
    ),
    ("an unknown field", b'{"type": "input_audio_buffer.commit", "force": true}', "invalid_event"),
    ("a 10 MB top-level string", json.dumps(MB10).encode(), "invalid_json"),
    ("a 10 MB type", json.dumps({"type": MB10}).encode(), "unknown_event"),
    (
        "a 10 MB event_id",
        json.dumps({"type": "conversation.dance", "event_id": MB10}).encode(),
        "unknown_event",
    ),
    (
        "a 10 MB key",
        json.dumps({"type": "input_audio_buffer.commit", MB10: 1}).encode(),
        "invalid_event",
    ),
    (
        "10 MB instructions",
        json.dumps({"type": "session.update", "session": {"instructions": MB10}}).encode(),
        "instructions_too_long",
    ),
    (
        "10 MB of audio in one append",
        json.dumps({"type": "input_audio_buffer.append", "audio": MB10}).encode(),
        "input_too_large",
    ),
    (
        "a 10 MB turn_detection type",
        json.dumps(
            {
                "type": "session.update",
                "session": {"audio": {"input": {"turn_detection": {"type": MB10}}}},
            }
        ).encode(),
        "unsupported_turn_detection",
    ),
]


def _answer_then_probe(ws: RawWs, frame: bytes, opcode: int, k: int) -> list[dict]:
    """Send ``frame``, then a session.update that must still be granted; the events between."""
    ws.send_frame(opcode, frame)
    ws.send("session.update", event_id=f"probe_{k}", session={"instructions": f"probe {k}"})
    events = []
    while (event := ws.recv()).get("client_event_id") != f"probe_{k}":
        events.append(event)
    assert event["type"] == "session.updated"
    return events


@pytest.mark.slow
def test_malformed_frames_get_an_error_and_the_session_goes_on(one_slot, connect):
    _until_free(one_slot)
    log_from = len(one_slot.log())
    ws = connect(timeout=30.0)
    ws.open_session()
    wrong = []
    for k, (what, frame, code) in enumerate(
        [*MALFORMED, ("a binary frame", b"\x00\x01", "binary_frame")]
    ):
        try:
            events = _answer_then_probe(ws, frame, BINARY if code == "binary_frame" else TEXT, k)
        except Closed as closed:
            wrong.append(f"{what}: the session closed with {closed.code} {closed.reason!r}")
            _until_free(one_slot)
            ws = connect(timeout=30.0)
            ws.open_session()
            continue
        got = [(e["type"], e.get("error", {}).get("code")) for e in events]
        if got != [("error", code)]:
            wrong.append(f"{what}: {got}")
            continue
        error = events[0]
        assert error["sglang"]["fatal"] is False, what
        assert len(json.dumps(error)) < 2000, f"{what}: the error echoes the frame back"
        assert error["error"]["event_id"] in (None, "evt_1"), what
    assert not wrong, f"{len(wrong)} of {len(MALFORMED) + 1} frames:\n" + "\n".join(wrong)
    ws.close()
    log = one_slot.log()[log_from:]
    assert "Traceback" not in log and "internal_error" not in log


@pytest.mark.slow
@pytest.mark.parametrize(
    "what,opcode,frame,close",
    [
        ("a text frame that is not UTF-8", TEXT, b'{"type": "\xff\xfe"}', (1007, "")),
        (
            "a message over the 16 MiB limit",
            TEXT,
            b'{"type": "' + b"x" * (16 << 20) + b'"}',
            (1009, "frame with 16777228 bytes exceeds limit of 16777216 bytes"),
        ),
    ],
)
def test_frames_the_websocket_layer_refuses_close_with_their_code(
    one_slot, connect, what, opcode, frame, close
):
    """RFC 6455 fails the connection for these (the session never sees them): the close code
    names the fault, the slot is free at once and the log has one line, no traceback."""
    _until_free(one_slot)
    log_from = len(one_slot.log())
    ws = connect()
    ws.open_session()
    try:
        ws.send_frame(opcode, frame)
    except OSError:  # the server closed while the 16 MiB were still on their way
        pass
    with pytest.raises(Closed) as closed:
        while True:
            ws.recv()
    assert (closed.value.code, closed.value.reason) == close
    ws.sock.close()
    _until_free(one_slot, 2.0)
    ws = connect()
    ws.open_session()
    ws.close()
    assert "Traceback" not in one_slot.log()[log_from:]
