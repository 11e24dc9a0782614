"""generate --url: check the user's server before a repeat is spent on it.

Four steps, each a one-line FdbError naming the URL and the fix: the URL is a WebSocket URL
(ws:// or wss://; an http(s):// one gets its WebSocket spelling as the hint), its host resolves
and accepts a TCP connection, the HTTP upgrade to WebSocket succeeds, and the realtime session
opens (the server's first session event, session.created, arrives). The check opens one session
and closes it at once; nothing is written.
"""

from __future__ import annotations

import asyncio
import socket
from urllib.parse import urlsplit, urlunsplit

import picows

from fdb.dialects import get_dialect
from fdb.errors import FdbError
from fdb.io import one_line, redact_url
from recorders.eventloop import CLOCK
from recorders.eventloop import run as run_loop
from recorders.session import ADMISSION_BACKOFF_S, ADMISSION_RETRIES, MAX_MESSAGE_BYTES
from recorders.wire import CLOSE_CODES, parse_server_message
from recorders.wsclient import Refused, WsClient, open_client

CONNECT_TIMEOUT_S = 5.0
HANDSHAKE_TIMEOUT_S = 5.0
SESSION_CREATED_TIMEOUT_S = 10.0
EXAMPLE = "ws://127.0.0.1:8097/v1/realtime"
PROFILE_HINT = "check that --profile matches the server's dialect, and read the server's log"


def check_url(url: str, profile: str, session_timeout_s: float = SESSION_CREATED_TIMEOUT_S) -> None:
    """Raise FdbError unless ``url`` opens a realtime session of ``profile``."""
    shown = _shown(url)
    host, port = _host_port(url, shown)
    _connect_tcp(host, port, shown)
    run_loop(_open_session(url, profile, shown, session_timeout_s))


def _shown(url: str) -> str:
    """The URL as messages show it: query secrets redacted, never the raw value."""
    try:
        return redact_url(url)
    except ValueError:
        return url


def _host_port(url: str, shown: str) -> tuple[str, int]:
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:  # an unparsable netloc or port
        raise FdbError(
            f"--url {shown!r} is not a valid URL ({exc})",
            f"pass the server's WebSocket endpoint, e.g. {EXAMPLE}",
        ) from exc
    scheme = parts.scheme.lower()
    if scheme in ("http", "https") and parts.netloc:
        ws = "ws" if scheme == "http" else "wss"
        fixed = urlunsplit(parts._replace(scheme=ws))
        example = f": --url {fixed}" if _shown(fixed) == fixed else ""  # never a secret in a hint
        raise FdbError(
            f"--url {shown} is an HTTP URL, but the recorder speaks WebSocket",
            f"use {ws}:// instead of {scheme}://{example}",
        )
    if scheme not in ("ws", "wss") or not parts.netloc:
        what = f"has the scheme {scheme}://" if scheme and "://" in url else "is not a URL"
        bare = "://" not in url and url.strip() and not any(c.isspace() for c in url.strip())
        hint = (
            f"add the scheme: --url ws://{shown}"
            if bare
            else f"pass the server's WebSocket endpoint, e.g. {EXAMPLE}"
        )
        raise FdbError(f"--url {shown!r} {what}, not ws:// or wss://", hint)
    if not parts.hostname:
        raise FdbError(
            f"--url {shown} names no host", f"pass the server's WebSocket endpoint, e.g. {EXAMPLE}"
        )
    return parts.hostname, port or (443 if scheme == "wss" else 80)


def _connect_tcp(host: str, port: int, shown: str) -> None:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise FdbError(
            f"--url {shown}: the host {host} does not resolve "
            f"({getattr(exc, 'strerror', None) or exc})",
            "check the host name in --url",
        ) from exc
    last: OSError | None = None
    for family, kind, proto, _, address in infos:
        try:
            with socket.socket(family, kind, proto) as sock:
                sock.settimeout(CONNECT_TIMEOUT_S)
                sock.connect(address)
                return
        except OSError as exc:
            last = exc
    if isinstance(last, ConnectionRefusedError):
        raise FdbError(
            f"--url {shown}: nothing listens on {host}:{port} (connection refused)",
            "start the server first, or fix the host and port in --url",
        )
    if isinstance(last, TimeoutError):
        raise FdbError(
            f"--url {shown}: {host}:{port} did not accept a connection within "
            f"{CONNECT_TIMEOUT_S:g} s",
            "check the host, the port and any firewall in between",
        )
    raise FdbError(
        f"--url {shown}: cannot connect to {host}:{port} "
        f"({getattr(last, 'strerror', None) or last})",
        "check the host and port in --url",
    )


def _refused_hint(status: int) -> str:
    if status == 401:
        return "the server wants credentials: check the token or key it expects"
    if status == 403:
        return (
            "check the path in --url (the realtime WebSocket endpoint, "
            f"e.g. {EXAMPLE}) and any token the server expects"
        )
    if status == 503:
        return (
            "the server has no free session (another client may hold them): stop it or wait, "
            "then retry"
        )
    return (
        "check the path in --url: it must be the server's realtime WebSocket endpoint, "
        f"e.g. {EXAMPLE}"
    )


async def _upgrade(url: str, profile: str, shown: str, on_message) -> WsClient:
    headers = list(get_dialect(profile).client.headers)
    for attempt in range(ADMISSION_RETRIES + 1):
        try:
            return await open_client(
                url, on_message, headers, MAX_MESSAGE_BYTES, handshake_timeout=HANDSHAKE_TIMEOUT_S
            )
        except Refused as exc:
            if (
                exc.status == 503 and attempt < ADMISSION_RETRIES
            ):  # as the recorder retries admission
                await asyncio.sleep(ADMISSION_BACKOFF_S)
                continue
            raise FdbError(
                f"--url {shown}: the server answered the WebSocket upgrade with HTTP {exc.status}",
                _refused_hint(exc.status),
            ) from exc
        except ConnectionError as exc:
            raise FdbError(
                f"--url {shown}: the server closed the connection during the WebSocket upgrade",
                "check that --url names a realtime WebSocket endpoint, not another service",
            ) from exc
        except TimeoutError as exc:
            raise FdbError(
                f"--url {shown}: no answer to the WebSocket upgrade within "
                f"{HANDSHAKE_TIMEOUT_S:g} s",
                "check that --url names a realtime WebSocket endpoint, not another service",
            ) from exc
        except (OSError, picows.WSError, ValueError) as exc:
            raise FdbError(
                f"--url {shown}: the WebSocket upgrade failed "
                f"({one_line(str(exc) or repr(exc), 200)})",
                "check that --url names a realtime WebSocket endpoint (and wss:// only for TLS)",
            ) from exc
    raise AssertionError("unreachable")


async def _open_session(url: str, profile: str, shown: str, timeout_s: float) -> None:
    received: list[str | bytes] = []
    arrived = asyncio.Event()

    def on_message(message: str | bytes, _t: float) -> None:
        received.append(message)
        arrived.set()

    client = await _upgrade(url, profile, shown, on_message)
    try:
        await _session_created(client, received, arrived, shown, timeout_s)
    finally:
        await client.close(timeout=2.0)


async def _session_created(
    client: WsClient, received: list, arrived: asyncio.Event, shown: str, timeout_s: float
) -> None:
    """Wait for session.created; other events before it are skipped, as the recorder skips them."""
    deadline = CLOCK() + timeout_s
    while True:
        while received:
            event, problem, _ = parse_server_message(received.pop(0))
            if event is None:
                raise FdbError(
                    f"--url {shown}: the server sent {one_line(problem, 200)} instead of "
                    "session.created",
                    PROFILE_HINT,
                )
            if event["type"] == "session.created":
                return
            if event["type"] == "error":
                error = event.get("error") if isinstance(event.get("error"), dict) else {}
                raise FdbError(
                    f"--url {shown}: the server answered the new session with error "
                    f"{error.get('code')}: {one_line(str(error.get('message')), 200)}",
                    "fix what the server names (often --model), then generate again",
                )
        if client.closed.done():
            code = client.close_code
            reason = client.close_reason or CLOSE_CODES.get(code or 0, "")
            raise FdbError(
                f"--url {shown}: the server closed the WebSocket (code {code}"
                f"{', ' + one_line(reason, 200) if reason else ''}) before session.created",
                PROFILE_HINT,
            )
        left = deadline - CLOCK()
        if left <= 0:
            raise FdbError(
                f"--url {shown}: the WebSocket opened but no session.created came within "
                f"{timeout_s:g} s",
                PROFILE_HINT,
            )
        arrived.clear()
        waiter = asyncio.ensure_future(arrived.wait())
        await asyncio.wait(
            {waiter, client.closed}, timeout=left, return_when=asyncio.FIRST_COMPLETED
        )
        waiter.cancel()
