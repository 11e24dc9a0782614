"""Client → server events of the turn-based session protocol, and how they are parsed.

Every frame is a JSON text object with a ``type``; ``event_id`` is optional but, when sent, is
echoed as ``client_event_id`` in the acknowledgement and in any error about that event.
Fields are strict (unknown fields are refused) so that a misspelt setting is reported instead
of silently ignored. Binary frames, invalid JSON, non-finite numbers and unknown event types
are answered with an ``error`` event and the session continues.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError


class ProtocolError(Exception):
    """A request the server refuses; becomes an ``error`` event (fatal only when marked)."""

    def __init__(self, code: str, message: str, *, param: str | None = None,
                 event_id: str | None = None, kind: str = "invalid_request_error", fatal: bool = False):
        super().__init__(message)
        self.code = code
        self.message = message
        self.param = param
        self.event_id = event_id
        self.kind = kind
        self.fatal = fatal


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AudioFormat(_Strict):
    type: str
    rate: int | None = None


class AudioInputPatch(_Strict):
    format: AudioFormat | None = None
    # Validated by negotiation so that an unknown type gets its own error code.
    turn_detection: dict[str, Any] | None = None
    transcription: dict[str, Any] | None = None  # input transcription is always on here
    noise_reduction: dict[str, Any] | None = None


class AudioOutputPatch(_Strict):
    format: AudioFormat | None = None
    voice: str | None = None
    speed: float | None = None


class AudioPatch(_Strict):
    input: AudioInputPatch | None = None
    output: AudioOutputPatch | None = None


class SglangSessionPatch(_Strict):
    sampling: dict[str, Any] | None = None
    # Native sessions only (serving.duplex); a turn-based session refuses them.
    timebase: dict[str, Any] | None = None  # {"native_unit_ms": 200 | 1000}
    duplex: dict[str, Any] | None = None  # {"backchannel": bool}


class SessionPatch(_Strict):
    """The ``session`` of a session.update; only the fields present change anything."""

    type: str | None = None
    model: str | None = None
    instructions: str | None = None
    output_modalities: list[str] | None = None
    audio: AudioPatch | None = None
    sglang: SglangSessionPatch | None = None


class _Event(_Strict):
    event_id: str | None = Field(None, max_length=512)


class SessionUpdate(_Event):
    type: Literal["session.update"]
    session: SessionPatch


class AppendSglang(_Strict):
    seq: int | None = Field(None, ge=0)
    t_start_ms: float | None = None


class InputAudioBufferAppend(_Event):
    """Base64 PCM16 16 kHz mono. ``sglang.seq`` counts up from 0 for the whole session."""

    type: Literal["input_audio_buffer.append"]
    audio: str
    sglang: AppendSglang | None = None


class InputAudioBufferCommit(_Event):
    type: Literal["input_audio_buffer.commit"]


class InputAudioBufferClear(_Event):
    type: Literal["input_audio_buffer.clear"]


class ResponseCancel(_Event):
    type: Literal["response.cancel"]
    response_id: str | None = None


class ResponseCreate(_Event):
    type: Literal["response.create"]
    response: dict[str, Any] | None = None


class ConversationItemTruncate(_Event):
    type: Literal["conversation.item.truncate"]
    item_id: str | None = None
    content_index: int | None = None
    audio_end_ms: int | None = None


class InputAudioEnd(_Event):
    """The input is over: flush the partial last unit, answer the open utterance, drain."""

    type: Literal["sglang.input_audio.end"]


class SessionClose(_Event):
    type: Literal["session.close"]


ClientEvent = Annotated[
    SessionUpdate | InputAudioBufferAppend | InputAudioBufferCommit | InputAudioBufferClear
    | ResponseCancel | ResponseCreate | ConversationItemTruncate | InputAudioEnd | SessionClose,
    Field(discriminator="type"),
]
CLIENT_EVENT_TYPES = frozenset({
    "session.update", "input_audio_buffer.append", "input_audio_buffer.commit",
    "input_audio_buffer.clear", "response.cancel", "response.create",
    "conversation.item.truncate", "sglang.input_audio.end", "session.close",
})
_ADAPTER: TypeAdapter[Any] = TypeAdapter(ClientEvent)


def _refuse_constant(name: str) -> float:
    raise ValueError(f"non-finite number {name} is not allowed")


def _load_object(text: str) -> dict[str, Any]:
    try:
        raw = json.loads(text, parse_constant=_refuse_constant)
    except ValueError as exc:
        raise ProtocolError("invalid_json", f"frame is not valid JSON: {exc}") from exc
    except RecursionError as exc:  # nesting deeper than the decoder goes: refused like any bad frame
        raise ProtocolError("invalid_json", "frame is nested too deeply to be read") from exc
    if not isinstance(raw, dict):
        raise ProtocolError("invalid_json", "frame must be a JSON object with a 'type'")
    return raw


def describe_validation_error(exc: ValidationError) -> tuple[str, str]:
    """(param, message) for the first problem pydantic found."""
    first = exc.errors()[0]
    loc = [str(part) for part in first["loc"] if not str(part).startswith("function-")]
    if loc and loc[0] in CLIENT_EVENT_TYPES:
        loc = loc[1:]
    param = ".".join(loc)
    return param, f"{param or 'event'}: {first['msg']}"


def parse_client_event(text: str) -> Any:
    """A typed client event, or ProtocolError (``invalid_json``, ``unknown_event``,
    ``invalid_event``) that names the problem and echoes the frame's event_id."""
    raw = _load_object(text)
    event_id = raw.get("event_id") if isinstance(raw.get("event_id"), str) else None
    kind = raw.get("type")
    if not isinstance(kind, str):
        raise ProtocolError("invalid_event", "event has no string 'type'", param="type", event_id=event_id)
    if kind not in CLIENT_EVENT_TYPES:
        raise ProtocolError("unknown_event", f"unknown event type {kind!r}", param="type", event_id=event_id)
    try:
        return _ADAPTER.validate_python(raw)
    except ValidationError as exc:
        param, message = describe_validation_error(exc)
        code = "invalid_session" if kind == "session.update" else "invalid_event"
        raise ProtocolError(code, f"{kind}: {message}", param=param, event_id=event_id) from exc
