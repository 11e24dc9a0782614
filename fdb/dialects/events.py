"""Server → client events, as typed records: the protocol's vocabulary, built by the server
(``serving.realtime``) and named by the client's dialects (:mod:`fdb.dialects.catalog`).

Names and shapes follow the OpenAI Realtime GA events plus the ``sglang.*`` session receipts
(docs: the Full-Duplex Guide's turn-based session protocol); ``BETA_NAMES`` gives the beta
dialect's names where they differ. Every event carries a fresh
``event_id``; acknowledgements carry the ``client_event_id`` of the event they answer.
Times are milliseconds on the input timeline (speech boundaries, units) or on the reply's own
audio timeline (``media_time`` of an audio delta).
"""

from __future__ import annotations

import uuid
from typing import Any, Literal

from pydantic import BaseModel, Field


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:20]}"


class ServerEvent(BaseModel):
    type: str
    event_id: str = Field(default_factory=lambda: new_id("event"))


def event_type(model: type[ServerEvent]) -> str:
    """The wire name (GA) of an event record."""
    return model.model_fields["type"].default


# --- session -----------------------------------------------------------------------------


class SessionCreated(ServerEvent):
    type: Literal["session.created"] = "session.created"
    session: dict[str, Any]


class SessionUpdated(ServerEvent):
    type: Literal["session.updated"] = "session.updated"
    client_event_id: str | None
    session: dict[str, Any]


class SessionClosed(ServerEvent):
    type: Literal["session.closed"] = "session.closed"
    reason: str
    client_event_id: str | None = None


class ErrorBody(BaseModel):
    type: str = "invalid_request_error"
    code: str
    message: str
    param: str | None = None
    event_id: str | None = None


class ErrorSglang(BaseModel):
    fatal: bool = False


class ErrorEvent(ServerEvent):
    type: Literal["error"] = "error"
    error: ErrorBody
    sglang: ErrorSglang = ErrorSglang()


# --- input receipts and units ------------------------------------------------------------


class InputAudioAccepted(ServerEvent):
    type: Literal["sglang.input_audio.accepted"] = "sglang.input_audio.accepted"
    seq: int
    accepted_end_ms: float | int
    client_event_id: str | None


class InputAudioEnded(ServerEvent):
    type: Literal["sglang.input_audio.ended"] = "sglang.input_audio.ended"
    accepted_end_ms: float | int
    tail_policy: Literal["flush", "pad"] = "flush"
    client_event_id: str | None


class InputAudioDrained(ServerEvent):
    type: Literal["sglang.input_audio.drained"] = "sglang.input_audio.drained"
    accepted_end_ms: float | int
    consumed_ms: float | int
    discarded_ms: float | int = 0
    padding_ms: float | int = 0
    client_event_id: str | None


class MediaTime(BaseModel):
    t_start_ms: float | int
    duration_ms: float | int


class UnitSglang(BaseModel):
    media_time: MediaTime


class UnitDone(ServerEvent):
    type: Literal["sglang.unit.done"] = "sglang.unit.done"
    unit_id: str
    sglang: UnitSglang


class SpeechStarted(ServerEvent):
    type: Literal["input_audio_buffer.speech_started"] = "input_audio_buffer.speech_started"
    audio_start_ms: int
    item_id: str


class SpeechStopped(ServerEvent):
    type: Literal["input_audio_buffer.speech_stopped"] = "input_audio_buffer.speech_stopped"
    audio_end_ms: int
    item_id: str


class Committed(ServerEvent):
    type: Literal["input_audio_buffer.committed"] = "input_audio_buffer.committed"
    item_id: str
    previous_item_id: str | None


class TranscriptionUsage(BaseModel):
    type: Literal["duration"] = "duration"
    seconds: float  # the utterance's audio that was transcribed


class TranscriptionCompleted(ServerEvent):
    type: Literal["conversation.item.input_audio_transcription.completed"] = (
        "conversation.item.input_audio_transcription.completed"
    )
    item_id: str
    content_index: int = 0
    transcript: str
    usage: TranscriptionUsage


class ItemTruncated(ServerEvent):
    """The answer to ``conversation.item.truncate``; ``audio_end_ms`` is the cut position the
    server used (the client's, clamped to the audio the server sent)."""

    type: Literal["conversation.item.truncated"] = "conversation.item.truncated"
    item_id: str
    content_index: int = 0
    audio_end_ms: int


class InputAudioCleared(ServerEvent):
    type: Literal["input_audio_buffer.cleared"] = "input_audio_buffer.cleared"


class OutputAudioCleared(ServerEvent):
    type: Literal["output_audio_buffer.cleared"] = "output_audio_buffer.cleared"
    response_id: str | None = None


# --- the conversation's items (GA: added, then done once complete) --------------------------


class ItemAdded(ServerEvent):
    type: Literal["conversation.item.added"] = "conversation.item.added"
    previous_item_id: str | None = None
    item: dict[str, Any]


class ItemDone(ServerEvent):
    type: Literal["conversation.item.done"] = "conversation.item.done"
    previous_item_id: str | None = None
    item: dict[str, Any]


class OutputItemAdded(ServerEvent):
    type: Literal["response.output_item.added"] = "response.output_item.added"
    response_id: str
    output_index: int = 0
    item: dict[str, Any]


class OutputItemDone(ServerEvent):
    type: Literal["response.output_item.done"] = "response.output_item.done"
    response_id: str
    output_index: int = 0
    item: dict[str, Any]


class ContentPart(BaseModel):
    type: Literal["audio", "text"]
    transcript: str | None = None
    text: str | None = None


class _ContentPartEvent(ServerEvent):
    response_id: str
    item_id: str
    output_index: int = 0
    content_index: int = 0
    part: ContentPart


class ContentPartAdded(_ContentPartEvent):
    type: Literal["response.content_part.added"] = "response.content_part.added"


class ContentPartDone(_ContentPartEvent):
    type: Literal["response.content_part.done"] = "response.content_part.done"


# --- responses ---------------------------------------------------------------------------


class StatusDetails(BaseModel):
    """``reason`` is the server's own: ``stop`` / ``empty_turn`` (completed), ``turn_detected``
    (speech during the reply) or ``client_cancelled`` (response.cancel); the connection's
    dialect names it (the server's wire rendering)."""

    type: str
    reason: str | None


class OutputContent(BaseModel):
    type: Literal["output_audio", "output_text"]
    transcript: str | None = None
    text: str | None = None


class OutputItem(BaseModel):
    id: str
    object: Literal["realtime.item"] = "realtime.item"
    type: Literal["message"] = "message"
    role: Literal["assistant"] = "assistant"
    status: Literal["in_progress", "completed", "incomplete"]
    content: list[OutputContent] = []


class ResponseBody(BaseModel):
    id: str
    object: Literal["realtime.response"] = "realtime.response"
    status: Literal["in_progress", "completed", "cancelled", "failed", "incomplete"]
    status_details: StatusDetails | None = None
    output: list[OutputItem] = []
    output_modalities: list[str] = []


class ResponseCreated(ServerEvent):
    type: Literal["response.created"] = "response.created"
    response: ResponseBody


class ResponseDone(ServerEvent):
    type: Literal["response.done"] = "response.done"
    response: ResponseBody


class _Part(ServerEvent):
    response_id: str
    item_id: str
    output_index: int = 0
    content_index: int = 0


class AudioDeltaSglang(BaseModel):
    chunk_seq: int
    media_time: MediaTime


class OutputAudioDelta(_Part):
    type: Literal["response.output_audio.delta"] = "response.output_audio.delta"
    delta: str
    sglang: AudioDeltaSglang


class OutputAudioDone(_Part):
    type: Literal["response.output_audio.done"] = "response.output_audio.done"


class OutputAudioTranscriptDelta(_Part):
    type: Literal["response.output_audio_transcript.delta"] = (
        "response.output_audio_transcript.delta"
    )
    delta: str


class OutputAudioTranscriptDone(_Part):
    type: Literal["response.output_audio_transcript.done"] = "response.output_audio_transcript.done"
    transcript: str


class OutputTextDelta(_Part):
    type: Literal["response.output_text.delta"] = "response.output_text.delta"
    delta: str


class OutputTextDone(_Part):
    type: Literal["response.output_text.done"] = "response.output_text.done"
    text: str


# --- sglang extensions: how much of a reply was spoken and heard ----------------------------


class ResponseProgress(ServerEvent):
    """A boundary of an audio reply (the end of a chunk, see :mod:`serving.conversation.chunker`)
    whose audio has been sent in full: ``text_end`` characters of the reply's transcript are
    spoken by the first ``audio_ms`` of its audio."""

    type: Literal["sglang.response.progress"] = "sglang.response.progress"
    response_id: str
    item_id: str
    text_end: int
    audio_ms: float


class ResponseHeard(ServerEvent):
    """What the history keeps of a cut reply: its first ``text_end`` characters (``text``),
    ending at ``audio_ms`` of its audio. Sent when an interruption or a
    ``conversation.item.truncate`` sets the cut, again whenever the cut moves."""

    type: Literal["sglang.response.heard"] = "sglang.response.heard"
    response_id: str
    item_id: str
    text_end: int
    audio_ms: float
    text: str


MAX_ERROR_MESSAGE_CHARS = 1024
MAX_ERROR_PARAM_CHARS = 256


def _clip(text: str | None, limit: int) -> str | None:
    return text if text is None or len(text) <= limit else text[:limit] + "..."


def error_event(
    code: str,
    message: str,
    *,
    param: str | None = None,
    event_id: str | None = None,
    kind: str = "invalid_request_error",
    fatal: bool = False,
) -> ErrorEvent:
    """An error event; its message and param are cut to a bounded length, as they may quote
    what a client sent (a key, a value), and a client's 10 MB frame is not echoed back."""
    return ErrorEvent(
        error=ErrorBody(
            type=kind,
            code=code,
            message=_clip(message, MAX_ERROR_MESSAGE_CHARS),
            param=_clip(param, MAX_ERROR_PARAM_CHARS),
            event_id=event_id,
        ),
        sglang=ErrorSglang(fatal=fatal),
    )


# Server events outside the OpenAI Realtime GA set: the Guide's session receipts and the
# ``sglang.*`` extensions (docs/formats.md, "Realtime extension events").
EXTENSION_EVENTS: dict[str, type[ServerEvent]] = {
    event_type(model): model
    for model in (
        SessionClosed,
        InputAudioAccepted,
        InputAudioEnded,
        InputAudioDrained,
        UnitDone,
        ResponseProgress,
        ResponseHeard,
    )
}


# GA event name -> beta name (events not listed are named alike)
BETA_NAMES = {
    "response.output_audio.delta": "response.audio.delta",
    "response.output_audio.done": "response.audio.done",
    "response.output_audio_transcript.delta": "response.audio_transcript.delta",
    "response.output_audio_transcript.done": "response.audio_transcript.done",
    "response.output_text.delta": "response.text.delta",
    "response.output_text.done": "response.text.done",
    "conversation.item.added": "conversation.item.created",
}
BETA_ABSENT = frozenset({"conversation.item.done"})  # GA events beta does not send
