"""The paced session's WebSocket client: picows's Cython framing under the few calls a session
needs.

Why not the ``websockets`` package here: at 512 paced sessions its pure-Python frame parser and
writer, and the task wake-up per received message, cost the recorder more user CPU, and the
loop fell behind the packet schedule (measured: docs/benchmarks.md#recorder-websocket).
picows parses frames and masks
payloads in C and calls ``WsClient.on_ws_frame`` from the loop's read callback, so a received
message is timed and dispatched in the same callback, with no queue and no task switch. The
other WebSocket clients of the recorders (conformance, the TTS realtime client) are not paced
at scale and keep ``websockets``.

What the session sees (``recorders.session``):

- ``await open_client(url, on_message, headers, max_size, handshake_timeout)``: the connection,
  or ``Refused`` (an HTTP status other than 101 at the upgrade), ``ConnectionError`` (closed
  during the upgrade), another ``OSError`` or a ``picows.WSError``.
- ``on_message(message, t)``: every complete text (``str``) or binary (``bytes``) message, with
  ``CLOCK()`` taken as its last frame was parsed. Fragmented messages are joined; a message over
  ``max_size`` fails the connection with 1009, a text message that is not UTF-8 with 1007.
- ``send(text)``: writes one text frame now; ``Closed`` once the connection is closing or gone.
  ``await drained()`` waits while the socket's write buffer is over its high-water mark.
- ``closed``: a future done when the connection is gone; then ``close_code`` (the peer's close
  code: 1005 for a CLOSE without one, 1006 when the peer sent no CLOSE) and ``close_reason``;
  ``failed_by_client`` is the (code, reason) this client closed with when it failed the
  connection itself (a message too big, invalid UTF-8, a frame that breaks the protocol).
- ``await close(timeout)``: the closing handshake (1000), bounded; then the socket is closed.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable

import picows
from picows import WSCloseCode, WSListener, WSMsgType, WSTransport

from recorders.eventloop import CLOCK

# picows reports a peer's protocol errors at ERROR level; the session records them (the close
# code it sent, in ``failed_by_client``) and a batch of faulty servers must not flood stderr.
logging.getLogger("picows").addHandler(logging.NullHandler())
logging.getLogger("picows").propagate = False

ABNORMAL_CLOSURE = 1006
NO_STATUS_RECEIVED = 1005
# After the closing handshake the server closes TCP first (RFC 6455 §7.1.1); a server that does
# not is disconnected this long after the handshake.
SERVER_CLOSE_WAIT_S = 1.0
_NOT_ECHOED = (0, NO_STATUS_RECEIVED, ABNORMAL_CLOSURE, 1015)  # codes never sent in a CLOSE frame


class Closed(Exception):
    """A send on a connection that is closing or closed."""


class Refused(Exception):
    """The server answered the WebSocket upgrade with HTTP ``status``."""

    def __init__(self, status: int, detail: str):
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status


OnMessage = Callable[[str | bytes, float], None]


class WsClient(WSListener):
    """One client connection (see the module docstring)."""

    def __init__(self, on_message: OnMessage, max_size: int):
        super().__init__()
        self.on_message, self.max_size = on_message, max_size
        self.transport: WSTransport | None = None
        self._server_close_timer: asyncio.TimerHandle | None = None
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.close_code: int | None = None
        self.close_reason = ""
        self.failed_by_client: tuple[int, str] | None = None
        self._parts: list[bytes] = []
        self._parts_type = WSMsgType.TEXT
        self._parts_size = 0
        self._writable: asyncio.Future[None] | None = None

    # ------------------------------------------------------------------ picows callbacks
    def on_ws_connected(self, transport: WSTransport) -> None:
        self.transport = transport

    def on_ws_frame(self, transport: WSTransport, frame: picows.WSFrame) -> None:
        try:
            self._on_frame(transport, frame)
        except Exception as exc:  # a bug of ours: name it and close, never leave it to picows's log
            self._fail(WSCloseCode.INTERNAL_ERROR, f"client error on a received frame: {exc!r}")

    def _on_frame(self, transport: WSTransport, frame: picows.WSFrame) -> None:
        if self._failing(transport):  # picows may still parse what was in flight: not delivered
            return
        kind = frame.msg_type
        if kind is WSMsgType.TEXT or kind is WSMsgType.BINARY:
            if self._parts:
                return self._fail(
                    WSCloseCode.PROTOCOL_ERROR, "a new message began inside a fragmented one"
                )
            if not frame.fin:
                self._parts_type = kind
                return self._add_part(frame)
            t = CLOCK()
            if kind is WSMsgType.TEXT:
                try:
                    message: str | bytes = frame.get_payload_as_utf8_text()
                except UnicodeDecodeError:
                    return self._fail(WSCloseCode.INVALID_TEXT, "invalid UTF-8 in a text message")
            else:
                message = frame.get_payload_as_bytes()
            self.on_message(message, t)
        elif kind is WSMsgType.CONTINUATION:
            if not self._parts:
                return self._fail(
                    WSCloseCode.PROTOCOL_ERROR, "a continuation frame with no message to continue"
                )
            self._add_part(frame)
            if frame.fin:
                self._deliver_parts()
        elif kind is WSMsgType.CLOSE:
            self._on_close_frame(transport)
        # PING is answered by picows (enable_auto_pong); PONG needs nothing.

    def on_ws_disconnected(self, transport: WSTransport) -> None:
        try:
            handshake = transport.close_handshake
            received = handshake.recv if handshake is not None else None
            if received is None:
                self.close_code = ABNORMAL_CLOSURE
            else:  # a CLOSE without a status code reads as 1005, as RFC 6455 §7.1.5 names it
                self.close_code = _code(received.code) or NO_STATUS_RECEIVED
                self.close_reason = received.reason or ""
            sent = handshake.sent if handshake is not None else None
            if (
                sent is not None
                and self.failed_by_client is None
                and not handshake.recv_then_sent
                and _code(sent.code) != 1000
            ):
                self.failed_by_client = (
                    _code(sent.code),
                    sent.reason or "",
                )  # picows failed it (a frame too big)
        finally:  # whatever happened above, no one waits on a connection that is gone
            if self._server_close_timer is not None:
                self._server_close_timer.cancel()
            if self._writable is not None and not self._writable.done():
                self._writable.set_result(None)
            if not self.closed.done():
                self.closed.set_result(None)

    def pause_writing(self) -> None:
        if self._writable is None or self._writable.done():
            self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)

    # ------------------------------------------------------------------ receiving helpers
    def _failing(self, transport: WSTransport) -> bool:
        """This side failed the connection (a CLOSE other than 1000 sent first)."""
        if self.failed_by_client is not None:
            return True
        handshake = transport.close_handshake
        return (
            handshake is not None
            and handshake.sent is not None
            and not handshake.recv_then_sent
            and _code(handshake.sent.code) != 1000
        )

    def _add_part(self, frame: picows.WSFrame) -> None:
        self._parts_size += frame.payload_size
        if self._parts_size > self.max_size:
            self._parts.clear()
            return self._fail(
                WSCloseCode.MESSAGE_TOO_BIG, f"a fragmented message over {self.max_size} bytes"
            )
        self._parts.append(frame.get_payload_as_bytes())

    def _deliver_parts(self) -> None:
        t = CLOCK()
        data, kind = b"".join(self._parts), self._parts_type
        self._parts.clear()
        self._parts_size = 0
        if kind is WSMsgType.TEXT:
            try:
                message: str | bytes = data.decode("utf-8")
            except UnicodeDecodeError:
                return self._fail(WSCloseCode.INVALID_TEXT, "invalid UTF-8 in a text message")
        else:
            message = data
        self.on_message(message, t)

    def _on_close_frame(self, transport: WSTransport) -> None:
        """The peer's CLOSE: answer it with its code (1000 for a CLOSE without one) unless ours
        went first, then wait for the server to close the socket, at most SERVER_CLOSE_WAIT_S.
        The code and reason are read when the socket is gone."""
        if not transport.is_close_frame_sent:
            received = transport.close_handshake.recv
            code = _code(received.code)
            transport.send_close(
                WSCloseCode.OK if code in _NOT_ECHOED else received.code,
                _close_reason(received.reason or ""),
            )
        if self._server_close_timer is None:
            self._server_close_timer = asyncio.get_running_loop().call_later(
                SERVER_CLOSE_WAIT_S, transport.disconnect
            )

    def _fail(self, code: WSCloseCode, reason: str) -> None:
        """Fail the connection (RFC 6455 §7.1.7): send CLOSE with ``code`` and close the socket."""
        if self.failed_by_client is None:
            self.failed_by_client = (code.value, reason)
        if self.transport is not None:
            self.transport.send_close(code, _close_reason(reason))
            self.transport.disconnect()

    # ------------------------------------------------------------------ the session's calls
    @property
    def open(self) -> bool:
        t = self.transport
        return t is not None and not t.is_disconnected and not t.is_close_frame_sent

    def send(self, text: str | bytes) -> None:
        """One text message (``bytes`` are taken as its UTF-8 encoding, not checked)."""
        if not self.open:
            raise Closed("the connection is closing or closed")
        self.transport.send(WSMsgType.TEXT, text.encode() if isinstance(text, str) else text)

    async def drained(self) -> None:
        """Return once the socket's write buffer is under its high-water mark (a cancelled
        waiter leaves the shared wait alone)."""
        if self._writable is not None and not self._writable.done():
            await asyncio.shield(self._writable)
        if self.closed.done():
            raise Closed("the connection closed while writing")

    async def close(self, timeout: float) -> None:
        """Send CLOSE 1000 (unless a CLOSE went already), wait up to ``timeout`` for the peer's
        answer and its closing of the socket, then close the socket."""
        t = self.transport
        if t is None or self.closed.done():
            return
        if not t.is_close_frame_sent:
            t.send_close(WSCloseCode.OK)
        try:
            await asyncio.wait_for(asyncio.shield(self.closed), timeout)
        except TimeoutError:
            t.disconnect(graceful=False)
            await asyncio.shield(self.closed)


def _code(code: object) -> int:
    return int(code.value) if isinstance(code, WSCloseCode) else int(code)  # type: ignore[arg-type]


def _close_reason(reason: str) -> bytes:
    """``reason`` as UTF-8 cut to the 123 bytes a CLOSE frame's reason may have (RFC 6455 §5.5)."""
    return reason.encode()[:123].decode("utf-8", "ignore").encode()


_STATUS_LINE = re.compile(rb"^HTTP/\d(?:\.\d)? (\d{3})")


def _refused_status(exc: picows.WSHandshakeError) -> int | None:
    """The HTTP status of a refused upgrade: from the parsed response, else from the raw status
    line (picows parses only the statuses ``http.HTTPStatus`` knows, so not 499 or 520)."""
    if exc.response is not None:
        return int(exc.response.status)
    match = _STATUS_LINE.match(exc.raw_header or b"")
    return int(match.group(1)) if match else None


def _ignore(message: str | bytes, t: float) -> None:
    """The message callback of a connection whose opener gave up waiting."""


async def open_client(
    url: str,
    on_message: OnMessage,
    headers: list[tuple[str, str]] | None,
    max_size: int,
    handshake_timeout: float,
) -> WsClient:
    """Connect and upgrade (redirects followed, up to 5). ``Refused`` carries the HTTP status of
    a refused upgrade; a connection closed before the upgrade's answer is a ``ConnectionError``.

    If the caller is cancelled (its deadline) while the upgrade is pending, the connection is
    not left behind: the pending upgrade ends within ``handshake_timeout`` at the latest, and a
    connection it still makes is closed at once, its messages unread."""
    abandoned = False

    def listener() -> WsClient:
        return WsClient(_ignore if abandoned else on_message, max_size)

    connecting = asyncio.ensure_future(
        picows.ws_connect(
            listener,
            url,
            websocket_handshake_timeout=handshake_timeout,
            enable_auto_pong=True,
            max_frame_size=max_size,
            extra_headers=headers or None,
        )
    )
    try:
        _, client = await asyncio.shield(connecting)
    except asyncio.CancelledError:
        abandoned = True
        connecting.add_done_callback(_close_abandoned)
        raise
    except picows.WSHandshakeError as exc:
        status = _refused_status(exc)
        if status is not None and status != 101:
            raise Refused(status, str(exc)) from exc
        raise
    if client is None:  # picows returns no listener when the socket closed during the upgrade
        raise ConnectionError("the server closed the connection during the WebSocket upgrade")
    return client


def _close_abandoned(connecting: asyncio.Future) -> None:
    if connecting.cancelled() or connecting.exception() is not None:
        return
    transport, client = connecting.result()
    if client is not None:
        client.on_message = _ignore
    transport.disconnect(graceful=False)
