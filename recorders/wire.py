"""Wire-level helpers of the session client: event ids, close-code names, parsing server frames."""

from __future__ import annotations

import itertools
import json
import secrets
from typing import Any

CLOSE_CODES = {
    1002: "protocol error",
    1005: "no status code",
    1006: "abnormal closure",
    1007: "invalid data",
    1008: "policy violation",
    1009: "message too big",
    1011: "server error",
}


# Event ids: a random 48-bit prefix per process and a counter (unique, and much cheaper than a
# uuid4 per packet at hundreds of paced sessions; docs/benchmarks.md#recorder-websocket).
_ID_PREFIX = secrets.token_hex(6)
_ID_COUNTER = itertools.count()


def event_id() -> str:
    return f"evt_{_ID_PREFIX}{next(_ID_COUNTER):012x}"


def _reject_constant(name: str) -> float:
    raise ValueError(f"non-finite number {name}")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)  # one decoder, not one per message


def parse_server_message(message: str | bytes) -> tuple[dict[str, Any] | None, str | None, str]:
    """(event, None, text) for a JSON object with a string ``type``; else (None, problem, text):
    a binary frame, invalid JSON (non-finite numbers included) or a non-event JSON value."""
    if isinstance(message, bytes):
        return None, "a binary frame", f"<{len(message)} bytes>"
    try:
        event = _DECODER.decode(message)
    except ValueError as exc:
        return None, f"invalid JSON ({exc})", message
    if isinstance(event, dict) and isinstance(event.get("type"), str):
        return event, None, message
    return None, "a JSON message that is not an event object with a type", message
