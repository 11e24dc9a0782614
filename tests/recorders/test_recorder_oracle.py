"""The protocol oracle on hand-built traces: a clean session passes, each broken rule fails."""

from __future__ import annotations

import pytest

from fdb.dialects import TURN_BASED
from fdb.session_records import TraceEvent
from recorders.oracle import judge_trace
from tests.recorders.recorder_fakes import Reply, good_trace

TD = {"type": "server_vad", "silence_duration_ms": 500}
INPUT_MS = 1000.0


def judge(events, td=TD, input_ms=INPUT_MS):
    return judge_trace(events, TURN_BASED, td, input_ms)


def index(events, type_, nth=0, direction=None):
    found = [
        i
        for i, e in enumerate(events)
        if e.type == type_ and (direction is None or e.dir == direction)
    ]
    return found[nth]


def rules(verdict):
    return {v.split(":")[0] for v in verdict.violations}


def test_clean_session_passes():
    events, _ = good_trace()
    verdict = judge(events)
    assert verdict.status == "pass", verdict.violations


def test_unaligned_input_with_short_last_packet_and_unit_passes():
    events, _ = good_trace(input_samples=15000)
    assert judge(events, input_ms=15000 / 16).status == "pass"


def test_each_cancellation_with_its_own_speech_started_passes():
    events, _ = good_trace(
        replies=(Reply(at=0.2, cancel=True, rid="r1"), Reply(at=0.6, cancel=True, rid="r2"))
    )
    assert judge(events).status == "pass", judge(events).violations


def test_echo_of_another_turn_detection_type_fails():
    events, _ = good_trace(echo_type="semantic_vad")
    verdict = judge(events)
    assert verdict.status == "fail"
    assert any("handshake" in v and "semantic_vad" in v for v in verdict.violations)


def test_missing_echo_fails():
    events, _ = good_trace()
    i = index(events, "session.updated")
    events[i].event["session"]["audio"]["input"].pop("turn_detection")
    assert "handshake" in rules(judge(events))


def test_accepted_seq_gap_and_wrong_end_ms_fail():
    events, _ = good_trace()
    events[index(events, "sglang.input_audio.accepted", 2)].event["seq"] = 3
    events[index(events, "sglang.input_audio.accepted", 4)].event["accepted_end_ms"] = 123
    verdict = judge(events)
    assert any("accepted seq 3, expected 2" in v for v in verdict.violations)
    assert any("accepted_end_ms 123" in v for v in verdict.violations)


def test_missing_accepted_receipt_fails():
    events, _ = good_trace()
    del events[index(events, "sglang.input_audio.accepted", 5)]
    assert "accepted" in rules(judge(events))


def test_append_seq_out_of_order_fails():
    events, _ = good_trace()
    events[index(events, "input_audio_buffer.append", 1)].event["sglang"]["seq"] = 7
    assert "input" in rules(judge(events))


@pytest.mark.parametrize(
    "field,value,needle",
    [
        ("unit_id", "unit_9", "unit id 'unit_9'"),
        ("t_start_ms", 333, "t_start_ms 333"),
        ("duration_ms", 150, "unit_1 lasts 150"),
    ],
)
def test_unit_rules(field, value, needle):
    events, _ = good_trace()
    unit = events[index(events, "sglang.unit.done", 1)].event
    if field == "unit_id":
        unit["unit_id"] = value
    else:
        unit["sglang"]["media_time"][field] = value
    verdict = judge(events)
    assert any(needle in v for v in verdict.violations), verdict.violations


def test_units_not_summing_to_input_fail():
    events, _ = good_trace()
    del events[index(events, "sglang.unit.done", 4)]
    verdict = judge(events)
    assert any("4 units" in v for v in verdict.violations)


def test_drain_arithmetic_and_tail_policy():
    events, _ = good_trace()
    events[index(events, "sglang.input_audio.ended")].event["tail_policy"] = "pad"
    drained = events[index(events, "sglang.input_audio.drained")].event
    drained["consumed_ms"], drained["discarded_ms"], drained["padding_ms"] = 900, 100, 40
    violations = " | ".join(judge(events).violations)
    for needle in ("tail_policy 'pad'", "consumed_ms 900", "discarded_ms 100", "padding_ms 40"):
        assert needle in violations


def test_ordering_of_end_ended_drained_close_closed():
    events, _ = good_trace()
    drained = events.pop(index(events, "sglang.input_audio.drained"))
    events.insert(index(events, "sglang.input_audio.ended"), drained)  # drained before ended
    _retime(events)
    assert any("drained before sglang.input_audio.ended" in v for v in judge(events).violations)

    events, _ = good_trace()
    close = events.pop(index(events, "session.close"))
    events.insert(index(events, "sglang.input_audio.drained"), close)
    _retime(events)
    assert any(
        "session.close before sglang.input_audio.drained" in v for v in judge(events).violations
    )


def test_missing_closed_and_events_after_closed_fail():
    events, _ = good_trace()
    no_closed = [e for e in events if e.type != "session.closed"]
    assert any("no session.closed" in v for v in judge(no_closed).violations)
    late = TraceEvent(
        t=events[-1].t + 1,
        dir="recv",
        type="response.created",
        event={"type": "response.created", "response": {"id": "late", "status": "in_progress"}},
    )
    verdict = judge([*events, late])
    assert any("response.created after session.closed" in v for v in verdict.violations)


def test_response_without_done_fails():
    events, _ = good_trace()
    events = [e for e in events if e.type != "response.done"]
    assert any("has no response.done" in v for v in judge(events).violations)


def test_completed_with_wrong_reason_and_unknown_status_fail():
    events, _ = good_trace()
    events[index(events, "response.done")].event["response"]["status_details"]["reason"] = (
        "interrupted"
    )
    assert any(
        "completed response 'resp_1' with reason 'interrupted'" in v
        for v in judge(events).violations
    )
    events[index(events, "response.done")].event["response"]["status"] = "failed"
    assert any("ended with status 'failed'" in v for v in judge(events).violations)


def test_cancellation_without_speech_started_fails():
    events, _ = good_trace(replies=(Reply(at=0.3, cancel=True),))
    events = [e for e in events if e.type != "input_audio_buffer.speech_started"]
    assert any("no speech_started of its own" in v for v in judge(events).violations)


def test_one_speech_started_cannot_justify_two_cancellations():
    events, _ = good_trace(
        replies=(Reply(at=0.2, cancel=True, rid="r1"), Reply(at=0.6, cancel=True, rid="r2"))
    )
    starts = [i for i, e in enumerate(events) if e.type == "input_audio_buffer.speech_started"]
    keep = starts[0]
    events = [
        e
        for i, e in enumerate(events)
        if i == keep or e.type != "input_audio_buffer.speech_started"
    ]
    verdict = judge(events)
    assert sum("no speech_started of its own" in v for v in verdict.violations) == 1
    assert any("'r2'" in v for v in verdict.violations)


def test_cancellation_may_use_a_speech_started_from_before_the_response():
    events, _ = good_trace(replies=(Reply(at=0.3, cancel=True),))
    # keep only the speech_started that precedes response.created
    second = index(events, "input_audio_buffer.speech_started", 1)
    del events[second]
    assert judge(events).status == "pass"


def test_audio_after_response_done_or_before_created_fails():
    events, _ = good_trace()
    delta = events[index(events, "response.output_audio.delta")]
    after = delta.model_copy(deep=True)
    after.t = events[index(events, "response.done")].t + 0.001
    events.insert(index(events, "response.done") + 1, after)
    assert any("after its response.done" in v for v in judge(events).violations)
    stray = delta.model_copy(deep=True)
    stray.event["response_id"] = "ghost"
    events.insert(index(events, "response.output_audio.delta"), stray)
    assert any("'ghost' before its response.created" in v for v in judge(events).violations)


def test_error_event_and_failure_note_fail():
    events, _ = good_trace()
    err = TraceEvent(
        t=0.5,
        dir="recv",
        type="error",
        event={"type": "error", "error": {"code": "internal", "message": "boom"}},
    )
    events.insert(index(events, "sglang.unit.done", 2), err)
    assert any("server error internal: boom" in v for v in judge(events).violations)
    note = TraceEvent(
        t=events[-1].t, dir="note", type="failure", event={"status": "timeout", "reason": "late"}
    )
    assert any("session failed: late" in v for v in judge([*events, note]).violations)


@pytest.mark.parametrize(
    "error,needle",
    [
        ("boom", "server error event with error 'boom', not an object"),
        (["x"], "server error event with error ['x'], not an object"),
        ("", "server error None: None"),  # an empty one reads as an empty object
        ({"code": 42, "message": ["m"]}, "server error 42: ['m']"),  # quoted as received
    ],
)
def test_an_error_event_whose_error_is_malformed_fails_naming_it(error, needle):
    events, _ = good_trace()
    at = index(events, "sglang.unit.done", 2)
    events.insert(
        at, TraceEvent(t=0.5, dir="recv", type="error", event={"type": "error", "error": error})
    )
    verdict = judge(events)
    assert verdict.status == "fail"
    assert f"error: {needle} (event {at})" in verdict.violations


def test_clock_going_backwards_fails():
    events, _ = good_trace()
    events[10].t = -5.0
    assert "clock" in rules(judge(events))


def test_appended_audio_must_match_the_input_length():
    events, _ = good_trace()
    assert any("appends carry 1000 ms" in v for v in judge(events, input_ms=1200.0).violations)


def _retime(events):
    """Give moved events times in list order so only the rule under test is broken."""
    for i in range(1, len(events)):
        if events[i].t < events[i - 1].t:
            events[i].t = events[i - 1].t
