"""The dialect registry: one record per dialect, read by name or trace format; behaviour that
is data (cut rules, session shapes) needs no code to vary."""

from __future__ import annotations

import pickle

from fdb.dialects import ALL, DIALECTS, OPENAI_BETA, TURN_BASED, CutRule, dialect_for_trace_format
from fdb.dialects.catalog import BY_TRACE_FORMAT, dialects_help
from fdb.dialects.events import BETA_NAMES, EXTENSION_EVENTS, OutputAudioDelta, event_type
from fdb.dialects.shapes import SHAPES
from fdb.playout import trace_playout_inputs
from fdb.session_records import TraceEvent


def test_every_dialect_has_its_own_name_and_trace_format_and_survives_pickling():
    assert len(BY_TRACE_FORMAT) == len(DIALECTS)
    for name, dialect in DIALECTS.items():
        assert dialect.name == name and dialect_for_trace_format(dialect.trace_format) is dialect
        assert f"{name} (" in dialects_help()
        assert (
            pickle.loads(pickle.dumps(dialect)) == dialect
        )  # the finisher process gets it pickled


def test_audio_events_are_the_server_records_names():
    ga, beta = event_type(OutputAudioDelta), BETA_NAMES[event_type(OutputAudioDelta)]
    assert TURN_BASED.events.audio_delta == (ga,) and OPENAI_BETA.events.audio_delta == (beta,)
    assert "sglang.input_audio.drained" in EXTENSION_EVENTS


def _recv(t: float, type_: str, **event) -> TraceEvent:
    return TraceEvent(t=t, dir="recv", type=type_, event=event)


def test_a_dialect_with_other_cut_rules_needs_no_code():
    trace = [
        _recv(0.0, "response.audio.delta", response_id="r1", audio_offset=0, audio_bytes=4),
        _recv(0.1, "input_audio_buffer.speech_started"),
        _recv(0.2, "output_audio_buffer.cleared", response_id="r1"),
    ]
    assert trace_playout_inputs(trace, b"\0" * 4, OPENAI_BETA)[1] == [(0.1, ALL), (0.2, "r1")]
    no_td = {"type": "server_vad", "interrupt_response": False}
    assert trace_playout_inputs(trace, b"\0" * 4, OPENAI_BETA, no_td)[1] == [(0.2, "r1")]
    cleared_only = OPENAI_BETA.model_copy(
        update={
            "cuts": OPENAI_BETA.cuts.model_copy(
                update={
                    "rules": (CutRule(event="output_audio_buffer.cleared", target="response_id"),)
                }
            )
        }
    )
    assert trace_playout_inputs(trace, b"\0" * 4, cleared_only)[1] == [(0.2, "r1")]


def test_session_shapes_build_and_read_their_own_session_objects():
    td = {"type": "server_vad"}
    ga = TURN_BASED.session_update(td, "m", None)
    assert ga["audio"]["input"]["turn_detection"] == td and ga["sglang"] == {}
    assert TURN_BASED.session.echoed_turn_detection(ga) == td
    beta = OPENAI_BETA.session_update(td, "m", None)
    assert "model" not in beta and OPENAI_BETA.session.echoed_turn_detection(beta) == td
    assert OPENAI_BETA.session.declared_output_rate(beta) == 24000
    assert OPENAI_BETA.with_tail(2.5).end.tail_s == 2.5 and OPENAI_BETA.end.tail_s == 1.0


def test_the_ga_shape_reads_a_session_whose_audio_is_not_an_object_as_declaring_nothing():
    """A server's session.updated with ``audio`` (or ``audio.input``) a string or a list: the
    shape reads nothing from it (it crashed the recorder's checks before), and the same session
    with well-formed audio still reads."""
    ga = SHAPES["ga"]
    for audio in ("pcm", [1], {"input": "x", "output": [2]}, {"input": {"format": "pcm16"}}):
        session = {"type": "realtime", "audio": audio}
        assert ga.echoed_turn_detection(session) is None
        assert ga.declared_output_rate(session) is None
        assert ga.wrong_24k_input(session) is None
    good = {
        "audio": {
            "input": {"format": {"rate": 16000}, "turn_detection": {"type": "server_vad"}},
            "output": {"format": {"rate": 24000}},
        }
    }
    assert ga.echoed_turn_detection(good) == {"type": "server_vad"}
    assert ga.declared_output_rate(good) == 24000
    assert ga.wrong_24k_input(good) == "session.updated declares input rate 16000"
