"""Client → server events of the turn-based session protocol, and how they are parsed.

Every frame is a JSON text object with a ``type``; ``event_id`` is optional but, when sent, is
echoed as ``client_event_id`` in the acknowledgement and in any error about that event.
Fields are strict (unknown fields are refused) so that a misspelt setting is reported instead
of silently ignored. Binary frames, invalid JSON, non-finite numbers and unknown event types
are answered with an ``error`` event and the session continues.

``invalid_json`` covers every frame that is not one JSON object: bad syntax, a top-level
array, string, number or null, nesting deeper than the decoder goes, a key repeated in one
object (which of the values counts would be a guess), a number that is not finite
(``NaN``, ``Infinity``, ``1e999``) or an integer beyond ±2**53 - 1, and a string holding a
lone UTF-16 surrogate escape (``"\\ud800"``, which no UTF-8 reply could echo). A frame without
a string ``type`` is ``invalid_event``. An ``event_id`` longer than 512 characters is not
echoed. Two frames never reach the session: a text frame that is not UTF-8 fails the
connection with close 1007 and a message over the server's WebSocket limit (16 MiB) with close
1009, as RFC 6455 has it.
"""

from __future__ import annotations

import json
import math
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from serving.realtime.wire import beta_session_to_ga

MAX_EVENT_ID_CHARS = 512  # a longer event_id is refused and never echoed


class ProtocolError(Exception):
    """A request the server refuses; becomes an ``error`` event (fatal only when marked)."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        param: str | None = None,
        event_id: str | None = None,
        kind: str = "invalid_request_error",
        fatal: bool = False,
    ):
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
    """``session.sglang``: its presence asks for fdb's session protocol (the ``sglang.*``
    receipts and extension events, 16 kHz input unless a format is named)."""

    events: bool | None = None  # false: the extension events stay off although sglang is sent
    sampling: dict[str, Any] | None = None
    # Native sessions only (serving.duplex); a turn-based session refuses them.
    timebase: dict[str, Any] | None = None  # {"native_unit_ms": 80 | 200 | 1000}
    duplex: dict[str, Any] | None = None  # {"backchannel": bool}
    voice: str | None = None  # one of the capabilities' voices
    reference_audio: dict[str, Any] | None = (
        None  # {"media_type": "audio/wav", "data": base64 PCM16 WAV}
    )


# OpenAI Realtime GA session fields this server takes but does not apply (no tool calling,
# tracing, prompt templates or reasoning): accepted, and reported in a warning, never refused.
GA_NOT_APPLIED = (
    "tools",
    "tool_choice",
    "tracing",
    "include",
    "truncation",
    "prompt",
    "reasoning",
    "parallel_tool_calls",
)


class SessionPatch(_Strict):
    """The ``session`` of a session.update; only the fields present change anything.

    Every field of the GA ``RealtimeSessionCreateRequest`` is known; a field outside it (a typo)
    is refused, so a misspelt setting is never silently ignored."""

    type: str | None = None
    model: str | None = None
    instructions: str | None = None
    output_modalities: list[str] | None = None
    audio: AudioPatch | None = None
    max_output_tokens: int | Literal["inf"] | None = None
    tools: list[Any] | None = None
    tool_choice: Any = None
    tracing: Any = None
    include: list[Any] | None = None
    truncation: Any = None
    prompt: Any = None
    reasoning: Any = None
    parallel_tool_calls: Any = None
    temperature: float | None = None  # beta's flat session (GA has none); 0 to 2
    sglang: SglangSessionPatch | None = None


class _Event(_Strict):
    event_id: str | None = Field(None, max_length=MAX_EVENT_ID_CHARS)


class SessionUpdate(_Event):
    type: Literal["session.update"]
    session: SessionPatch


class AppendSglang(_Strict):
    seq: int | None = Field(None, ge=0, strict=True)  # true or "3" is not a seq
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


class ConversationItemCreate(_Event):
    """A text or audio item added to the conversation (``item`` is checked by the session)."""

    type: Literal["conversation.item.create"]
    item: dict[str, Any]
    previous_item_id: str | None = None


class ConversationItemOther(_Event):
    """Item retrieval and deletion: answered ``not_supported``."""

    type: Literal["conversation.item.retrieve", "conversation.item.delete"]
    item_id: str | None = None


class OutputAudioBufferClear(_Event):
    """Stop the reply's audio (WebRTC/SIP in OpenAI's service; over WebSocket here it cancels
    the reply in progress and answers ``output_audio_buffer.cleared``)."""

    type: Literal["output_audio_buffer.clear"]
    response_id: str | None = None


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
    SessionUpdate
    | InputAudioBufferAppend
    | InputAudioBufferCommit
    | InputAudioBufferClear
    | ResponseCancel
    | ResponseCreate
    | ConversationItemTruncate
    | ConversationItemCreate
    | ConversationItemOther
    | OutputAudioBufferClear
    | InputAudioEnd
    | SessionClose,
    Field(discriminator="type"),
]
CLIENT_EVENT_TYPES = frozenset(
    {
        "session.update",
        "input_audio_buffer.append",
        "input_audio_buffer.commit",
        "input_audio_buffer.clear",
        "response.cancel",
        "response.create",
        "conversation.item.truncate",
        "conversation.item.create",
        "conversation.item.retrieve",
        "conversation.item.delete",
        "output_audio_buffer.clear",
        "sglang.input_audio.end",
        "session.close",
    }
)
_ADAPTER: TypeAdapter[Any] = TypeAdapter(ClientEvent)


MAX_SAFE_INTEGER = 2**53 - 1  # the integers every JSON peer reads exactly
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")  # escapes of U+D800-U+DFFF (pairs too)


class _Refused(ValueError):
    """A frame that parses but is refused all the same (json.loads passes it on as is)."""


def shown(value: object, limit: int = 64) -> str:
    """``repr(value)`` for a message, cut to ``limit`` characters: a client's 10 MB string is
    not echoed back."""
    if isinstance(value, str) and len(value) > limit:
        return repr(value[:limit]) + "..."
    text = repr(value)
    return text if len(text) <= limit + 2 else text[:limit] + "..."


def _refuse_constant(name: str) -> float:
    raise _Refused(f"non-finite number {name} is not allowed")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Refused(f"number {shown(text, 32)} is not finite")
    return value


def _safe_int(text: str) -> int:
    if len(text.lstrip("-")) > 16 or abs(value := int(text)) > MAX_SAFE_INTEGER:
        raise _Refused(f"integer {shown(text, 32)} is out of range (beyond ±2**53 - 1)")
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) < len(pairs):
        seen: set[str] = set()
        duplicate = next(key for key, _ in pairs if key in seen or seen.add(key))
        raise _Refused(f"key {shown(duplicate)} appears more than once in one object")
    return obj


def _lone_surrogate(value: Any) -> bool:
    """Whether a string in ``value`` (keys included) holds an unpaired surrogate."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(item, dict):
            stack.extend(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _load_object(text: str) -> dict[str, Any]:
    try:
        raw = json.loads(
            text,
            parse_constant=_refuse_constant,
            parse_float=_finite_float,
            parse_int=_safe_int,
            object_pairs_hook=_unique_keys,
        )
    except _Refused as exc:
        raise ProtocolError("invalid_json", f"frame is refused: {exc}") from exc
    except ValueError as exc:
        raise ProtocolError("invalid_json", f"frame is not valid JSON: {exc}") from exc
    except (
        RecursionError
    ) as exc:  # nesting deeper than the decoder goes: refused like any bad frame
        raise ProtocolError("invalid_json", "frame is nested too deeply to be read") from exc
    if _SURROGATE_ESCAPE.search(text) and _lone_surrogate(raw):
        raise ProtocolError(
            "invalid_json",
            "frame is refused: a string holds a lone UTF-16 surrogate "
            "escape; write the character itself or a surrogate pair",
        )
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


def parse_client_event(text: str, beta: bool = False) -> Any:
    """A typed client event, or ProtocolError (``invalid_json``, ``unknown_event``,
    ``invalid_event``) that names the problem and echoes the frame's event_id. With ``beta``
    a session.update's flat beta session is read in the GA shape first."""
    raw = _load_object(text)
    if beta and raw.get("type") == "session.update" and "session" in raw:
        raw["session"] = beta_session_to_ga(raw["session"])
    event_id = raw.get("event_id")
    if not isinstance(event_id, str) or len(event_id) > MAX_EVENT_ID_CHARS:
        event_id = None
    kind = raw.get("type")
    if not isinstance(kind, str):
        raise ProtocolError(
            "invalid_event", "event has no string 'type'", param="type", event_id=event_id
        )
    if kind not in CLIENT_EVENT_TYPES:
        raise ProtocolError(
            "unknown_event", f"unknown event type {shown(kind)}", param="type", event_id=event_id
        )
    try:
        return _ADAPTER.validate_python(raw)
    except ValidationError as exc:
        param, message = describe_validation_error(exc)
        code = "invalid_session" if kind == "session.update" else "invalid_event"
        raise ProtocolError(code, f"{kind}: {message}", param=param, event_id=event_id) from exc
