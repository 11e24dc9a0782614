"""Server → client events as a client reads them: lenient, typed views.

The server builds its events from the strict records of :mod:`fdb.dialects.events`; a client
(the recorders) meets whatever a server sends: an OpenAI GA or beta server leaves out fields
the records require, and a broken one sends values of the wrong type. A client must record and
judge such an event, never refuse it, so it reads each event through a view:

- every field is optional (``None`` when absent) and unknown keys are kept (``extra="allow"``);
- a value that is not of its field's type (strictly: no ``"3"`` for 3) reads as ``None`` and is
  kept, as received, in ``malformed``; :meth:`View.shown` gives it back for messages and for the
  checks that judge the value itself;
- a nested object is a view of its own, as lenient.

A view is made once, where an event arrives (:func:`read_event`), from the parsed JSON object;
the object itself stays what is recorded. The event names come from the server's records
(``event_type``) and their beta names (``BETA_NAMES``): one home for the protocol's vocabulary.

The openai SDK's realtime types (``openai.types.realtime``) are not used here: they require
the fields a GA server sends (and validate strictly or not at all), know neither the beta names
in the same tree nor the ``sglang`` extensions, and would put the SDK on the recorder's path.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable
from typing import Any, TypeVar, get_args

from pydantic import BaseModel, ConfigDict, PrivateAttr, ValidationError

from fdb.dialects import events as ev


class View(BaseModel):
    """A lenient view of a JSON object sent by a server (see the module's docstring); made by
    :func:`lenient`, which reads a value that is not of its field's type as None."""

    model_config = ConfigDict(extra="allow", frozen=True, strict=True)

    _malformed: dict[str, Any] = PrivateAttr(default_factory=dict)

    @property
    def malformed(self) -> dict[str, Any]:
        """The fields whose value was not of their type, as received."""
        return self._malformed

    def shown(self, name: str) -> Any:
        """A key's value as received: a field's typed value or its malformed one, a kept extra
        key's value; None when absent (a key that names no field is never read as an attribute:
        ``shown("json")`` is the key's value, not the model's method)."""
        if name in self._malformed:
            return self._malformed[name]
        if name in type(self).model_fields:
            return getattr(self, name)
        return (self.model_extra or {}).get(name)


V = TypeVar("V", bound=View)


def lenient(view: type[V], data: dict[str, Any]) -> V:
    """``view`` of ``data``. A well-formed object is validated once (the common case, in
    pydantic's core); otherwise each field that failed is read again: a nested view leniently,
    anything else as None, kept in ``malformed``."""
    try:
        return view.model_validate(data)
    except ValidationError as exc:
        bad = {e["loc"][0] for e in exc.errors() if e["loc"] and e["loc"][0] in data}
        if not bad:
            raise
    fixed, malformed = dict(data), {}
    for key in bad:
        nested = _nested_view(view, str(key))
        if nested is not None and isinstance(data[key], dict):
            fixed[key] = lenient(nested, data[key])
        else:
            fixed[key], malformed[key] = None, data[key]
    result = view.model_validate(fixed)
    result._malformed = malformed
    return result


def at(value: Any, *path: str) -> Any:
    """The value at ``path`` in nested JSON objects that no view names (a session object, whose
    shape is the dialect's): None where a key is missing or a step is not an object."""
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def as_key(value: Any) -> Any:
    """A received id (as ``shown``) as a dict key: the value itself, or None for one that no key
    can be (a list or an object)."""
    return value if isinstance(value, Hashable) else None


def _nested_view(view: type[View], name: str) -> type[View] | None:
    """The view class of field ``name`` (declared ``SomeView | None``), if it is one."""
    for arg in get_args(view.model_fields[name].annotation):
        if isinstance(arg, type) and issubclass(arg, View):
            return arg
    return None


# --- the parts ------------------------------------------------------------------------------

Number = float | int  # an int stays an int (messages quote it as received)


class ErrorBody(View):
    type: str | None = None
    code: str | None = None
    message: str | None = None
    param: str | None = None
    event_id: str | None = None


class ErrorSglang(View):
    fatal: bool | None = None


class MediaTime(View):
    t_start_ms: Number | None = None
    duration_ms: Number | None = None


class DeltaSglang(View):
    chunk_seq: int | None = None
    media_time: MediaTime | None = None


class UnitSglang(View):
    media_time: MediaTime | None = None


class StatusDetails(View):
    type: str | None = None
    reason: str | None = None


class Response(View):
    id: str | None = None
    status: str | None = None
    status_details: StatusDetails | None = None
    output: list[Any] | None = None


# --- the events -----------------------------------------------------------------------------


class Event(View):
    """Any server event; the view of a type no narrower view names."""

    type: str | None = None
    event_id: str | None = None


class SessionEvent(Event):
    """session.created / session.updated: the session object (its shape is the dialect's,
    :mod:`fdb.dialects.shapes`)."""

    session: dict[str, Any] | None = None
    client_event_id: str | None = None


class SessionClosed(Event):
    reason: str | None = None
    client_event_id: str | None = None


class Error(Event):
    error: ErrorBody | None = None
    sglang: ErrorSglang | None = None

    @property
    def body(self) -> ErrorBody:
        """The error object; an empty one when it is missing or not an object."""
        return self.error if self.error is not None else ErrorBody()

    @property
    def fatal(self) -> bool:
        """sglang.fatal, as the truth of the value received."""
        return bool(self.sglang.shown("fatal")) if self.sglang is not None else False


class InputAudioReceipt(Event):
    """sglang.input_audio.accepted / ended / drained."""

    seq: int | None = None
    accepted_end_ms: Number | None = None
    consumed_ms: Number | None = None
    discarded_ms: Number | None = None
    padding_ms: Number | None = None
    tail_policy: str | None = None
    client_event_id: str | None = None


class UnitDone(Event):
    unit_id: str | None = None
    sglang: UnitSglang | None = None


class InputItemEvent(Event):
    """input_audio_buffer.speech_started / speech_stopped / committed and
    conversation.item.truncated: an input item and a position on the input timeline."""

    item_id: str | None = None
    previous_item_id: str | None = None
    audio_start_ms: Number | None = None
    audio_end_ms: Number | None = None
    content_index: int | None = None


class Transcription(Event):
    item_id: str | None = None
    transcript: str | None = None


class ResponseEvent(Event):
    """response.created / response.done."""

    response: Response | None = None

    @property
    def body(self) -> Response:
        """The response object; an empty one when it is missing or not an object."""
        return self.response if self.response is not None else Response()


class Part(Event):
    """An event of one content part of a response."""

    response_id: str | None = None
    item_id: str | None = None
    output_index: int | None = None
    content_index: int | None = None


class AudioDelta(Part):
    """response.output_audio.delta (beta: response.audio.delta). Its ``sglang`` (chunk_seq,
    media_time: :class:`DeltaSglang`) is left unread here, as a kept extra key: the delta view
    is made for each audio chunk of every paced session, and a nested view costs it twice as
    much; judges read it from the trace."""

    delta: str | None = None


class TextDelta(Part):
    """A transcript or text delta."""

    delta: str | None = None


class TextDone(Part):
    """A transcript or text done."""

    transcript: str | None = None
    text: str | None = None


class ReplyMark(Event):
    """sglang.response.progress / sglang.response.heard."""

    response_id: str | None = None
    item_id: str | None = None
    text_end: int | None = None
    audio_ms: Number | None = None
    text: str | None = None


def _names(*models: type[ev.ServerEvent]) -> list[str]:
    """The GA names of ``models`` and their beta names."""
    names = [ev.event_type(model) for model in models]
    return names + [ev.BETA_NAMES[name] for name in names if name in ev.BETA_NAMES]


VIEWS: dict[str, type[Event]] = {
    **dict.fromkeys(_names(ev.SessionCreated, ev.SessionUpdated), SessionEvent),
    **dict.fromkeys(_names(ev.SessionClosed), SessionClosed),
    **dict.fromkeys(_names(ev.ErrorEvent), Error),
    **dict.fromkeys(
        _names(ev.InputAudioAccepted, ev.InputAudioEnded, ev.InputAudioDrained), InputAudioReceipt
    ),
    **dict.fromkeys(_names(ev.UnitDone), UnitDone),
    **dict.fromkeys(
        _names(ev.SpeechStarted, ev.SpeechStopped, ev.Committed, ev.ItemTruncated), InputItemEvent
    ),
    **dict.fromkeys(_names(ev.TranscriptionCompleted), Transcription),
    **dict.fromkeys(_names(ev.ResponseCreated, ev.ResponseDone), ResponseEvent),
    **dict.fromkeys(_names(ev.OutputAudioTranscriptDelta, ev.OutputTextDelta), TextDelta),
    **dict.fromkeys(
        _names(ev.OutputAudioDone, ev.OutputAudioTranscriptDone, ev.OutputTextDone), TextDone
    ),
    **dict.fromkeys(_names(ev.ResponseProgress, ev.ResponseHeard), ReplyMark),
}

# The names a client compares a view's ``type`` with (GA; ``BETA_NAMES`` gives the beta ones).
SESSION_CREATED = ev.event_type(ev.SessionCreated)
SESSION_UPDATED = ev.event_type(ev.SessionUpdated)
SESSION_CLOSED = ev.event_type(ev.SessionClosed)
ERROR = ev.event_type(ev.ErrorEvent)
INPUT_AUDIO_DRAINED = ev.event_type(ev.InputAudioDrained)
SPEECH_STARTED = ev.event_type(ev.SpeechStarted)
COMMITTED = ev.event_type(ev.Committed)
ITEM_TRUNCATED = ev.event_type(ev.ItemTruncated)
RESPONSE_CREATED = ev.event_type(ev.ResponseCreated)
RESPONSE_DONE = ev.event_type(ev.ResponseDone)
AUDIO_DELTAS = tuple(_names(ev.OutputAudioDelta))  # GA, beta


def read_event(raw: dict[str, Any], audio: Collection[str] = AUDIO_DELTAS) -> Event:
    """The view of a parsed server event, chosen by its ``type``: :class:`AudioDelta` for the
    events that carry reply audio (``audio``: a dialect's ``events.audio_delta``; by default
    the GA and the beta name), :class:`Event` for a type no view names, or none. Never raises:
    what does not fit reads as None."""
    kind = raw.get("type")
    if not isinstance(kind, str):
        return lenient(Event, raw)
    return lenient(AudioDelta if kind in audio else VIEWS.get(kind, Event), raw)
