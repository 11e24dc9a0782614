"""What one connection's events look like on the wire: the OpenAI Realtime GA or beta dialect,
with or without fdb's session-protocol extensions.

- The dialect is negotiated at the upgrade: a client that sends ``OpenAI-Beta: realtime=v1``
  speaks beta (the flat session shape, ``response.audio.*`` / ``response.text.*`` names,
  ``conversation.item.created`` where GA has ``conversation.item.added`` and no
  ``conversation.item.done``); every other client speaks GA.
- The extensions (the ``sglang.*`` receipts and events, ``session.closed``, the ``sglang`` and
  ``client_event_id`` fields of standard events, and the Guide's response reasons ``stop``,
  ``empty_turn`` and ``interrupted``) are on only for a session that asks for them with a
  ``session.sglang`` object in a session.update (fdb's turn-based recorder profile does), and
  always for a native session. Without them a client sees a clean GA (or beta) stream that the
  ``openai`` SDK's server-event union validates.

The server builds every event once, in the GA shape with its extensions (``serving.realtime.
events``); :meth:`Wire.render` turns it into this connection's frame.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from fdb.dialects.events import BETA_ABSENT, BETA_NAMES, ServerEvent

Dialect = Literal["ga", "beta"]
BETA_HEADER = ("openai-beta", "realtime=v1")

_BETA_CONTENT = {"output_audio": "audio", "output_text": "text"}

# The server's own reasons of a response.done -> the Guide's (extensions) and GA's
EXTENSION_REASONS = {"turn_detected": "interrupted", "client_cancelled": "interrupted"}
GA_REASONS: dict[str, str | None] = {"stop": None, "empty_turn": None}


def dialect_of(headers: Any) -> Dialect:
    """``beta`` when the upgrade carries ``OpenAI-Beta: realtime=v1``, else ``ga``."""
    value = headers.get(BETA_HEADER[0]) if headers is not None else None
    return "beta" if value and BETA_HEADER[1] in value.replace(" ", "").lower().split(",") else "ga"


def _extension_event(kind: str) -> bool:
    return kind.startswith("sglang.") or kind == "session.closed"


def _beta_item(item: Any) -> Any:
    if isinstance(item, dict):
        for part in item.get("content") or []:
            if isinstance(part, dict) and part.get("type") in _BETA_CONTENT:
                part["type"] = _BETA_CONTENT[part["type"]]
    return item


@dataclass
class Wire:
    """One connection's dialect and whether it takes the extensions."""

    dialect: Dialect = "ga"
    extensions: bool = False

    def render(self, event: ServerEvent) -> str | None:
        """The frame of ``event`` for this connection; None when it is not sent at all."""
        if self.extensions and self.dialect == "ga":
            if event.type not in ("response.done", "response.created"):
                return event.model_dump_json()  # the hot path (audio deltas): as built
            body = event.model_dump(mode="json")
            _reason(body, EXTENSION_REASONS)
            return json.dumps(body, separators=(",", ":"), ensure_ascii=False)
        kind = event.type
        if _extension_event(kind) and not self.extensions:
            return None
        if self.dialect == "beta" and kind in BETA_ABSENT:
            return None
        body = event.model_dump(mode="json")
        if self.extensions:
            _reason(body, EXTENSION_REASONS)
        else:
            body.pop("sglang", None)
            body.pop("client_event_id", None)
            _reason(body, GA_REASONS)
        if self.dialect == "beta":
            body["type"] = BETA_NAMES.get(kind, kind)
            _beta_item(body.get("item"))  # a part is "audio" / "text" in both dialects
            for item in (body.get("response") or {}).get("output") or []:
                _beta_item(item)
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False)


def _reason(body: dict[str, Any], names: dict[str, Any]) -> None:
    """Rename ``response.status_details.reason`` of a response event in place."""
    details = (
        (body.get("response") or {}).get("status_details")
        if body.get("type") in ("response.done", "response.created")
        else None
    )
    if isinstance(details, dict) and details.get("reason") in names:
        details["reason"] = names[details["reason"]]


# --- beta session.update -> the GA shape the server validates -----------------------------

_BETA_FORMATS = {
    "pcm16": {"type": "audio/pcm", "rate": 24000},
    "g711_ulaw": {"type": "audio/pcmu"},
    "g711_alaw": {"type": "audio/pcma"},
}


def _beta_format(value: Any) -> Any:
    return (
        dict(_BETA_FORMATS[value])
        if isinstance(value, str) and value in _BETA_FORMATS
        else {"type": value}
    )


def beta_session_to_ga(session: Any) -> Any:
    """A beta (flat) session.update ``session`` in the GA shape; keys beta does not define pass
    through unchanged, so the GA validation still refuses a misspelt one by name."""
    if not isinstance(session, dict):
        return session
    flat = dict(session)
    out: dict[str, Any] = {"type": "realtime"}
    audio_in: dict[str, Any] = {}
    audio_out: dict[str, Any] = {}
    moves = {
        "modalities": (out, "output_modalities"),
        "max_response_output_tokens": (out, "max_output_tokens"),
        "input_audio_transcription": (audio_in, "transcription"),
        "input_audio_noise_reduction": (audio_in, "noise_reduction"),
        "turn_detection": (audio_in, "turn_detection"),
        "voice": (audio_out, "voice"),
        "speed": (audio_out, "speed"),
    }
    for key, value in flat.items():
        if key in moves:
            target, name = moves[key]
            target[name] = value
        elif key == "input_audio_format":
            audio_in["format"] = _beta_format(value)
        elif key == "output_audio_format":
            audio_out["format"] = _beta_format(value)
        else:
            out[key] = value
    if audio_in or audio_out:
        out["audio"] = {
            **({"input": audio_in} if audio_in else {}),
            **({"output": audio_out} if audio_out else {}),
        }
    return out


def beta_session_object(ga: dict[str, Any], temperature: float | None) -> dict[str, Any]:
    """A GA session object (session.created / session.updated) in beta's flat shape."""
    audio = ga.get("audio") or {}
    audio_in, audio_out = audio.get("input") or {}, audio.get("output") or {}

    def fmt(part: dict[str, Any]) -> str:
        f = part.get("format") or {}
        return (
            "pcm16"
            if f.get("type") == "audio/pcm"
            else {"audio/pcmu": "g711_ulaw"}.get(f.get("type"), "g711_alaw")
        )

    body: dict[str, Any] = {
        "id": ga.get("id"),
        "object": "realtime.session",
        "model": ga.get("model"),
        "modalities": ga.get("output_modalities"),
        "instructions": ga.get("instructions"),
        "voice": audio_out.get("voice"),
        "input_audio_format": fmt(audio_in),
        "output_audio_format": fmt(audio_out),
        "input_audio_transcription": audio_in.get("transcription"),
        "input_audio_noise_reduction": audio_in.get("noise_reduction"),
        "turn_detection": audio_in.get("turn_detection"),
        "speed": audio_out.get("speed"),
        "tools": ga.get("tools"),
        "tool_choice": ga.get("tool_choice"),
        "temperature": temperature,
        "max_response_output_tokens": ga.get("max_output_tokens"),
        "tracing": ga.get("tracing"),
    }
    if "sglang" in ga:
        body["sglang"] = ga["sglang"]
    return body
