"""fdb.dialects.views: every view reads a well-formed GA and beta event; a value of the wrong
type reads as None and is kept as received; unknown keys are kept; nested objects are read as
leniently; the audio delta is chosen by the dialect's names."""

from __future__ import annotations

import pytest

from fdb.dialects import events as ev
from fdb.dialects import get_dialect, views

RESPONSE = {
    "id": "r1",
    "status": "completed",
    "status_details": {"type": "completed", "reason": "stop"},
    "output": [],
}
# a well-formed event of each view (GA name), with the fields it reads
GOOD: list[tuple[str, type[views.Event], dict]] = [
    ("session.created", views.SessionEvent, {"session": {"id": "s"}}),
    ("session.updated", views.SessionEvent, {"session": {"x": 1}, "client_event_id": "u1"}),
    ("session.closed", views.SessionClosed, {"reason": "client", "client_event_id": "c1"}),
    (
        "error",
        views.Error,
        {"error": {"type": "t", "code": "c", "message": "m", "param": None}, "sglang": {}},
    ),
    (
        "sglang.input_audio.accepted",
        views.InputAudioReceipt,
        {"seq": 0, "accepted_end_ms": 80, "client_event_id": "a0"},
    ),
    (
        "sglang.input_audio.drained",
        views.InputAudioReceipt,
        {"accepted_end_ms": 80.0, "consumed_ms": 80, "discarded_ms": 0, "padding_ms": 920},
    ),
    (
        "sglang.unit.done",
        views.UnitDone,
        {"unit_id": "unit_0", "sglang": {"media_time": {"t_start_ms": 0, "duration_ms": 1000}}},
    ),
    ("input_audio_buffer.speech_started", views.InputItemEvent, {"audio_start_ms": 10}),
    ("conversation.item.truncated", views.InputItemEvent, {"item_id": "i", "audio_end_ms": 5}),
    (
        "conversation.item.input_audio_transcription.completed",
        views.Transcription,
        {"item_id": "i", "transcript": "hi"},
    ),
    ("response.created", views.ResponseEvent, {"response": {"id": "r1", "status": "in_progress"}}),
    ("response.done", views.ResponseEvent, {"response": RESPONSE}),
    (
        "response.output_audio_transcript.delta",
        views.TextDelta,
        {"response_id": "r1", "item_id": "i", "output_index": 0, "delta": "he"},
    ),
    ("response.output_audio.done", views.TextDone, {"response_id": "r1"}),
    ("response.output_text.done", views.TextDone, {"text": "hello"}),
    (
        "sglang.response.progress",
        views.ReplyMark,
        {"response_id": "r1", "text_end": 3, "audio_ms": 120.5, "text": "hel"},
    ),
    (
        "response.output_audio.delta",
        views.AudioDelta,
        {"response_id": "r1", "item_id": "i", "delta": "AAAA", "sglang": {"chunk_seq": 0}},
    ),
]


def _without_none(value):
    if isinstance(value, dict):
        return {k: _without_none(v) for k, v in value.items() if v is not None}
    return value


def _names(ga: str) -> list[str]:
    return [ga] + ([ev.BETA_NAMES[ga]] if ga in ev.BETA_NAMES else [])


@pytest.mark.parametrize(
    "name,view,fields",
    [(name, view, fields) for ga, view, fields in GOOD for name in _names(ga)],
    ids=lambda x: x if isinstance(x, str) else "",
)
def test_each_view_reads_a_well_formed_ga_and_beta_event(name, view, fields):
    raw = {"type": name, "event_id": "e1", **fields}
    event = views.read_event(raw)
    assert type(event) is view and event.type == name and event.event_id == "e1"
    assert event.malformed == {}
    for key, value in fields.items():
        shown = event.shown(key)
        assert (
            shown.model_dump(exclude_none=True) if isinstance(shown, views.View) else shown
        ) == (_without_none(value)), key
    assert event.model_dump(exclude_none=True) == _without_none(raw)


def test_the_beta_names_are_read_too():
    assert any(name in views.VIEWS for name in ev.BETA_NAMES.values())
    beta = views.read_event({"type": "response.audio.delta", "delta": "AAAA"})
    assert isinstance(beta, views.AudioDelta) and beta.delta == "AAAA"
    text = views.read_event({"type": "response.audio_transcript.delta", "delta": "x"})
    assert isinstance(text, views.TextDelta) and text.delta == "x"


@pytest.mark.parametrize(
    "raw,field,received",
    [
        ({"type": "sglang.input_audio.accepted", "seq": "3"}, "seq", "3"),  # strict: no "3" for 3
        ({"type": "sglang.input_audio.accepted", "seq": True}, "seq", True),  # nor a bool
        ({"type": "sglang.input_audio.drained", "consumed_ms": "80"}, "consumed_ms", "80"),
        ({"type": "session.updated", "session": "nope"}, "session", "nope"),
        ({"type": "session.updated", "client_event_id": 5}, "client_event_id", 5),
        ({"type": "error", "error": "boom"}, "error", "boom"),
        ({"type": "error", "error": ["x"]}, "error", ["x"]),
        ({"type": "response.done", "response": 3}, "response", 3),
        ({"type": "response.output_audio.delta", "delta": 0}, "delta", 0),
        ({"type": "response.output_audio.delta", "response_id": ["r"]}, "response_id", ["r"]),
        ({"type": 5}, "type", 5),
    ],
)
def test_a_wrong_typed_value_reads_none_and_is_kept_as_received(raw, field, received):
    event = views.read_event(raw)
    assert getattr(event, field) is None
    assert event.malformed == {field: received}
    assert event.shown(field) == received and type(event.shown(field)) is type(received)


def test_an_int_stays_an_int_and_a_float_a_float():
    event = views.read_event({"type": "sglang.input_audio.drained", "consumed_ms": 80})
    assert type(event.consumed_ms) is int and event.shown("consumed_ms") == 80
    event = views.read_event({"type": "sglang.input_audio.drained", "consumed_ms": 80.5})
    assert type(event.consumed_ms) is float


def test_unknown_keys_are_kept_and_shown_reads_keys_not_attributes():
    raw = {"type": "response.done", "response": RESPONSE, "extra": {"k": [1]}, "json": 7}
    event = views.read_event(raw)
    assert event.model_extra == {"extra": {"k": [1]}, "json": 7}
    assert event.shown("extra") == {"k": [1]}
    assert event.shown("json") == 7  # the key's value, not BaseModel.json
    assert event.shown("missing") is None and event.shown("model_dump") is None
    assert event.body.model_extra == {"output": []} or event.body.output == []


def test_an_unknown_type_or_none_reads_as_a_plain_event():
    event = views.read_event({"type": "x.unheard_of", "a": 1})
    assert type(event) is views.Event and event.type == "x.unheard_of" and event.shown("a") == 1
    event = views.read_event({"no": "type"})
    assert type(event) is views.Event and event.type is None and event.shown("no") == "type"


def test_nested_objects_are_read_leniently():
    raw = {
        "type": "sglang.unit.done",
        "unit_id": "unit_0",
        "sglang": {"media_time": {"t_start_ms": 0, "duration_ms": "80"}, "x": 1},
    }
    event = views.read_event(raw)
    assert isinstance(event, views.UnitDone) and event.malformed == {}
    media = event.sglang.media_time
    assert media.t_start_ms == 0 and media.duration_ms is None
    assert media.malformed == {"duration_ms": "80"} and media.shown("duration_ms") == "80"
    assert event.sglang.shown("x") == 1
    # a nested value that is not an object at all reads as None at its own level
    event = views.read_event({"type": "sglang.unit.done", "sglang": {"media_time": 7}})
    assert event.sglang.media_time is None and event.sglang.malformed == {"media_time": 7}
    done = views.read_event({"type": "response.done", "response": {"status_details": "x"}})
    assert done.body.status_details is None and done.body.shown("status_details") == "x"


def test_error_and_response_bodies_are_never_missing():
    assert views.read_event({"type": "error"}).body == views.ErrorBody()
    bad = views.read_event({"type": "error", "error": "boom", "sglang": {"fatal": "yes"}})
    assert bad.body == views.ErrorBody() and bad.body.shown("code") is None
    assert bad.fatal is True  # the truth of the value received
    assert views.read_event({"type": "error", "sglang": {"fatal": 0}}).fatal is False
    assert views.read_event({"type": "error", "sglang": []}).fatal is False
    assert views.read_event({"type": "response.done", "response": None}).body == views.Response()


@pytest.mark.parametrize(
    "dialect", ["turn-based", "minicpmo-native-pr2377", "openai-ga", "openai-beta"]
)
def test_the_audio_delta_is_the_dialects(dialect):
    audio = get_dialect(dialect).events.audio_delta
    for name in views.AUDIO_DELTAS:
        event = views.read_event({"type": name, "delta": "AAAA"}, audio)
        if name in audio:
            assert isinstance(event, views.AudioDelta) and event.delta == "AAAA"
        else:
            assert not isinstance(event, views.AudioDelta) and event.shown("delta") == "AAAA"
    # a dialect may name an audio delta no view knows
    custom = views.read_event({"type": "x.audio", "delta": "AAAA"}, ("x.audio",))
    assert isinstance(custom, views.AudioDelta)


def test_the_view_names_are_the_server_records():
    assert views.ERROR == "error" and views.RESPONSE_DONE == "response.done"
    assert views.AUDIO_DELTAS == ("response.output_audio.delta", "response.audio.delta")
    assert set(views.VIEWS) >= {views.SESSION_CREATED, views.INPUT_AUDIO_DRAINED}


def test_at_and_as_key():
    session = {"audio": {"input": {"format": {"rate": 24000}}, "output": "x"}}
    assert views.at(session, "audio", "input", "format", "rate") == 24000
    assert views.at(session, "audio", "output", "format") is None  # a step that is no object
    assert views.at(session, "missing", "x") is None and views.at("s", "a") is None
    assert views.as_key("r1") == "r1" and views.as_key(5) == 5
    assert views.as_key(["r"]) is None and views.as_key({"a": 1}) is None
