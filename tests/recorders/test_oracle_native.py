"""The oracle's native rules (profile minicpmo-native-pr2377) on hand-built traces: units account
for every accepted byte and never run ahead of the audio sent, output ends before the drain, an
empty EOS unit only closes unit-aligned input."""

from __future__ import annotations

import pytest

from fdb.dialects import NATIVE, TURN_BASED
from fdb.session_records import TraceEvent
from recorders.oracle import judge_trace

PACKET = 1280  # samples of one 80 ms packet at 16 kHz


def native_trace(
    input_samples: int = 40000,
    reply_at: float | None = 1.5,
    empty_eos_unit: bool = False,
    late_reply: bool = False,
) -> list[TraceEvent]:
    """A clean native session: 80 ms appends, 1 s units, one reply, end/ended(pad)/drained/close."""
    rows: list[tuple[float, str, str, dict]] = []

    def add(t: float, direction: str, kind: str, event: dict) -> None:
        rows.append((round(t, 6), direction, kind, {"type": kind, **event}))

    grant = {**dict(NATIVE.oracle.required_grant), "native_full_duplex": True}
    add(-0.2, "recv", "session.created", {"session": {"id": "s"}})
    add(-0.15, "send", "session.update", {"event_id": "u1", "session": {"type": "realtime"}})
    add(
        -0.1,
        "recv",
        "session.updated",
        {"client_event_id": "u1", "session": {"sglang": {"granted": grant}}},
    )
    sent, unit = 0, 0
    for seq, start in enumerate(range(0, input_samples, PACKET)):
        n = min(PACKET, input_samples - start)
        t = seq * 0.08
        add(
            t,
            "send",
            "input_audio_buffer.append",
            {"event_id": f"a{seq}", "sglang": {"seq": seq}, "audio_bytes": 2 * n},
        )
        sent += n
        add(
            t + 0.002,
            "recv",
            "sglang.input_audio.accepted",
            {"seq": seq, "accepted_end_ms": sent / 16, "client_event_id": f"a{seq}"},
        )
        while sent - unit * 16000 >= 16000:
            add(t + 0.003, "recv", "sglang.unit.done", _unit(unit, 1000))
            unit += 1
    T = input_samples / 16000
    if reply_at is not None:
        at = T + 0.021 if late_reply else reply_at
        add(at, "recv", "response.created", {"response": {"id": "r1", "status": "in_progress"}})
        for k in range(2):
            add(
                at + 0.001 * (k + 1),
                "recv",
                "response.output_audio.delta",
                {
                    "response_id": "r1",
                    "item_id": "i1",
                    "audio_offset": 4800 * k,
                    "audio_bytes": 4800,
                },
            )
        add(
            at + 0.004,
            "recv",
            "response.done",
            {
                "response": {
                    "id": "r1",
                    "status": "completed",
                    "status_details": {"type": "completed", "reason": "stop"},
                }
            },
        )
    add(T, "send", "sglang.input_audio.end", {"event_id": "e1"})
    add(
        T + 0.01,
        "recv",
        "sglang.input_audio.ended",
        {"accepted_end_ms": sent / 16, "tail_policy": "pad", "client_event_id": "e1"},
    )
    tail = sent / 16 - unit * 1000
    if tail > 0:
        add(T + 0.011, "recv", "sglang.unit.done", _unit(unit, tail))
        unit += 1
    if empty_eos_unit:
        add(T + 0.012, "recv", "sglang.unit.done", _unit(unit, 0))
    add(
        T + 0.02,
        "recv",
        "sglang.input_audio.drained",
        {
            "accepted_end_ms": sent / 16,
            "consumed_ms": sent / 16,
            "discarded_ms": 0,
            "padding_ms": NATIVE.units.padding_ms(sent / 16),
            "client_event_id": "e1",
        },
    )
    add(T + 0.03, "send", "session.close", {"event_id": "c1"})
    add(T + 0.04, "recv", "session.closed", {"reason": "client_closed"})
    rows.sort(key=lambda r: r[0])
    return [TraceEvent(t=t, dir=d, type=k, event=e) for t, d, k, e in rows]


def _unit(k: int, duration_ms: float) -> dict:
    return {
        "unit_id": f"unit_{k}",
        "sglang": {"media_time": {"t_start_ms": k * 1000, "duration_ms": duration_ms}},
    }


def judge(events: list[TraceEvent], input_ms: float = 2500.0, profile=NATIVE):
    return judge_trace(events, profile, None, input_ms)


def find(events: list[TraceEvent], type_: str) -> int:
    return next(i for i, e in enumerate(events) if e.type == type_)


def test_clean_native_session_with_a_padded_tail_passes():
    verdict = judge(native_trace())
    assert verdict.status == "pass", verdict.violations


def test_audio_or_a_completed_reply_after_the_drain_fails():
    verdict = judge(native_trace(late_reply=True))
    drain = [v for v in verdict.violations if v.startswith("drain:")]
    assert any("created after" in v for v in drain)
    assert any("audio for response 'r1' after" in v for v in drain)
    assert any("completed after" in v for v in drain)


def test_a_reply_cancelled_client_closed_after_session_close_passes():
    events = native_trace(reply_at=None)
    drained, close = find(events, "sglang.input_audio.drained"), find(events, "session.close")
    done = {
        "id": "r9",
        "status": "cancelled",
        "status_details": {"type": "cancelled", "reason": "client_closed"},
    }
    events.insert(
        close + 1,
        TraceEvent(t=events[close].t, dir="recv", type="response.done", event={"response": done}),
    )
    events.insert(
        drained,
        TraceEvent(
            t=events[drained].t,
            dir="recv",
            type="response.created",
            event={"response": {"id": "r9", "status": "in_progress"}},
        ),
    )
    verdict = judge(events)
    assert verdict.status == "pass", verdict.violations
    done["status"], done["status_details"] = "completed", {"type": "completed", "reason": "stop"}
    assert any(v.startswith("drain:") and "completed after" in v for v in judge(events).violations)


@pytest.mark.parametrize("input_samples,ok", [(32000, True), (40000, False)])
def test_an_empty_eos_unit_only_closes_unit_aligned_input(input_samples, ok):
    events = native_trace(input_samples, empty_eos_unit=True)
    verdict = judge(events, input_ms=input_samples / 16)
    assert (verdict.status == "pass") is ok, verdict.violations
    if input_samples % 16000 == 0:  # the turn-based profile allows no empty unit at all
        assert judge(events, input_ms=input_samples / 16, profile=TURN_BASED).status == "fail"


def test_a_unit_done_before_its_audio_was_sent_fails():
    events = native_trace()
    unit = find(events, "sglang.unit.done")
    moved = events.pop(unit)
    events.insert(
        find(events, "input_audio_buffer.append") + 1,
        TraceEvent(
            t=events[find(events, "input_audio_buffer.append")].t,
            dir="recv",
            type=moved.type,
            event=moved.event,
        ),
    )
    assert any("unit_0 done when only 80 ms" in v for v in judge(events).violations)


def test_accepted_audio_missing_from_the_units_fails():
    events = native_trace()
    last = [i for i, e in enumerate(events) if e.type == "sglang.unit.done"][-1]
    events[last].event["sglang"]["media_time"]["duration_ms"] = 400
    assert any("sum to 2400 ms" in v for v in judge(events).violations)


def test_reply_audio_moving_to_another_item_or_a_reply_before_updated_fails():
    events = native_trace()
    delta = [i for i, e in enumerate(events) if e.type == "response.output_audio.delta"][1]
    events[delta].event["item_id"] = "i2"
    created = events.pop(find(events, "response.created"))
    events.insert(find(events, "session.updated"), created)
    violations = judge(events).violations
    assert any("moved from item 'i1' to 'i2'" in v for v in violations)
    assert any("response.created before session.updated" in v for v in violations)
