"""Every serving column on hand-built traces with known answers, and the capacity rule."""

from __future__ import annotations

import pytest

from fdb.dialects import NATIVE, TURN_BASED
from fdb.records.serving import ServingRow
from fdb.session_records import LoopLagStats, PacingStats, SessionRecord, TraceEvent, Verdict
from scorers.serving import (
    Reply,
    Session,
    buffer_needed_s,
    capacity,
    combine_repeats,
    first_audio_s,
    level_row,
    mean_open,
    reply_rtf,
    speech_end_first_audio_s,
    unit_lags,
)

PACKET = 2560  # 80 ms of 16 kHz PCM16
CHUNK = 4800  # 100 ms of 24 kHz PCM16


def _record(
    profile=TURN_BASED, status="ok", verdict="pass", t0="2026-01-01T00:00:00+00:00", **kw
) -> SessionRecord:
    return SessionRecord(
        sample_id="c/1",
        variant="clean",
        profile=profile.name,
        trace_format=profile.trace_format,
        url="ws://x",
        output_rate=24000,
        timeout_s=90,
        status=status,
        t0_wall=t0,
        verdict=Verdict(status=verdict),
        **kw,
    )


def _appends(n: int, last_bytes: int = PACKET, delay: float = 0.0) -> list[TraceEvent]:
    out = []
    for k in range(n):
        size = last_bytes if k == n - 1 else PACKET
        out.append(
            TraceEvent(
                t=k * 0.08,
                dir="send",
                type="input_audio_buffer.append",
                event={"audio_bytes": size},
                scheduled=k * 0.08,
                t_end=k * 0.08 + 0.001 + delay,
            )
        )
    return out


def _unit(t: float, k: int, duration: float = 1000) -> TraceEvent:
    return TraceEvent(
        t=t,
        dir="recv",
        type="sglang.unit.done",
        event={
            "unit_id": f"unit_{k}",
            "sglang": {"media_time": {"t_start_ms": k * 1000, "duration_ms": duration}},
        },
    )


def _reply(rid: str, created: float, arrivals: list[float]) -> list[TraceEvent]:
    out = [
        TraceEvent(t=created, dir="recv", type="response.created", event={"response": {"id": rid}})
    ]
    out += [
        TraceEvent(
            t=a,
            dir="recv",
            type="response.output_audio.delta",
            event={"response_id": rid, "audio_bytes": CHUNK},
        )
        for a in arrivals
    ]
    return out


def test_reply_columns_on_a_gap():
    reply = Reply(response_id="r", created_t=1.0, chunks=[(1.5, 0.1), (1.6, 0.1), (1.9, 0.1)])
    assert first_audio_s(reply) == pytest.approx(0.5)
    # third chunk is due at 1.5 + 0.2 = 1.7 and arrives at 1.9: a 200 ms buffer is needed
    assert buffer_needed_s(reply) == pytest.approx(0.2)
    assert reply_rtf(reply) == pytest.approx(0.4 / 0.2)
    assert reply_rtf(Reply(response_id="r", chunks=[(1.0, 0.1)])) is None
    assert buffer_needed_s(Reply(response_id="r")) is None
    assert first_audio_s(Reply(response_id="r", created_t=1.0)) is None


def test_turn_based_level_row():
    smooth = _appends(10) + _reply("a", 1.0, [1.2, 1.21, 1.22, 1.23])  # fast: rtf 0.1, no gap
    gappy = _appends(10) + _reply("b", 2.0, [2.5, 2.6, 2.9]) + _reply("empty", 3.0, [])
    sessions = [
        Session(record=_record(), trace=smooth),
        Session(record=_record(t0="2026-01-01T00:00:01+00:00"), trace=gappy),
    ]
    row = level_row(2, sessions)
    assert (row.replies, row.empty_replies) == (3, 1)
    assert row.first_audio_p50_ms == pytest.approx(
        200.0
    ) and row.first_audio_p95_ms == pytest.approx(500.0)
    assert row.buffer_needed_p90_ms == pytest.approx(200.0)
    assert row.underrun_replies == 1  # 200 ms > 80 ms reserve; the smooth reply needs 0
    assert level_row(2, sessions, reserve_ms=250).underrun_replies == 0
    assert row.rtf_p90 == pytest.approx(2.0)
    assert row.units is None and row.unit_lag_p50_ms is None  # native-only columns stay null
    assert not row.meets_targets and row.missed_targets == ["reply RTF p90 2.0 not < 1"]
    assert level_row(1, sessions[:1]).meets_targets


def test_mean_open_is_time_averaged():
    assert mean_open([(0.0, 10.0), (5.0, 15.0)]) == pytest.approx(20 / 15, abs=1e-3)
    assert mean_open([]) is None
    first = Session(record=_record(), trace=_appends(2))  # 0 .. 0.08 s
    second = Session(record=_record(t0="2026-01-01T00:00:00.040000+00:00"), trace=_appends(2))
    assert level_row(2, [first, second]).mean_open == pytest.approx(0.16 / 0.12, abs=1e-3)


def test_native_unit_lag_and_miss():
    # 2.5 s of input: units 0, 1 (1000 ms) and the short last unit of 500 ms
    trace = _appends(32)[:31] + [
        TraceEvent(
            t=31 * 0.08,
            dir="send",
            type="input_audio_buffer.append",
            event={"audio_bytes": PACKET // 2},
            scheduled=2.48,
            t_end=2.481,
        )
    ]
    # 31 packets of 80 ms = 2480 ms + 40 ms = 2520 ms: units end at 1000 (packet 12),
    # 2000 (packet 24), input end
    trace += [
        _unit(0.96 + 0.001 + 0.3, 0),
        _unit(1.92 + 0.001 + 1.5, 1),
        _unit(2.481 + 0.2, 2, 520),
    ]
    lags, expected = unit_lags(trace, NATIVE)
    assert expected == 3
    assert lags == pytest.approx([0.3, 1.5, 0.2])
    row = level_row(1, [Session(record=_record(NATIVE), trace=trace)], NATIVE)
    assert row.native and row.units == 3 and row.unit_misses == 1
    assert row.unit_lag_p50_ms == pytest.approx(300.0) and row.unit_lag_p95_ms == pytest.approx(
        1500.0
    )
    assert row.rtf_p90 is None and row.first_audio_p50_ms is None  # no reply, no first audio
    assert "unit miss 33.33% > 1%" in row.missed_targets
    # a native reply's first audio arrives 0.5 s after unit_0's input was ready
    # (unit_0 done at 1.261)
    spoken = trace + _reply("n", 0.5, [1.461, 1.5, 1.6, 1.7])
    native = level_row(1, [Session(record=_record(NATIVE), trace=spoken)])
    assert native.first_audio_p50_ms == pytest.approx(500.0) and native.rtf_p90 is None
    assert native.buffer_needed_p90_ms == pytest.approx(0.0)


def test_native_never_finished_and_failed_sessions_miss_every_unit():
    short = _appends(25)  # 2000 ms: two units, one never finishes
    lone = short + [_unit(1.0, 0)]
    failed = Session(
        record=_record(NATIVE, status="disconnected", verdict="fail"), trace=short + [_unit(1.0, 0)]
    )
    row = level_row(2, [Session(record=_record(NATIVE), trace=lone), failed])
    assert row.units == 4 and row.unit_misses == 3 and row.sessions_failed == 1
    assert row.missed_targets[0] == "1 failed sessions"


def test_failures_503_and_pacing_are_counted_and_miss():
    denied = Session(record=_record(status="admission_denied", verdict="fail", t0=None), trace=[])
    late = Session(
        record=_record(pacing=PacingStats(violations=2), loop_lag=LoopLagStats(client_behind=True)),
        trace=_appends(3) + _reply("a", 0.1, [0.2, 0.21]),
    )
    broken = Session(record=_record(status="timeout", verdict="fail"), trace=_appends(2))
    row = level_row(4, [denied, late, broken])
    assert (row.sessions, row.sessions_failed, row.admission_denied) == (3, 1, 1)
    assert (row.pacing_violations, row.client_behind) == (1, 1)
    assert row.missed_targets[:3] == [
        "1 failed sessions",
        "1 admission denials (503)",
        "1 pacing violations (client-limited: the load generator fell behind)",
    ]
    assert row.client_limited and row.client_limited_sessions == 1
    empty = level_row(1, [])
    assert (
        empty.first_audio_p50_ms is None
        and empty.mean_open is None
        and empty.underrun_replies is None
    )


def _row(level: int, meets: bool) -> ServingRow:
    return ServingRow(
        concurrency=level, profile="turn-based", native=False, sessions=1, meets_targets=meets
    )


def test_capacity_rule():
    found = capacity([_row(1, True), _row(2, True), _row(4, False), _row(8, True)])
    assert (found.sessions, found.at_least, found.first_miss) == (2, False, 4)
    assert found.line().startswith("Capacity: 2 sessions")
    every = capacity([_row(2, True), _row(1, True)])
    assert (every.sessions, every.at_least) == (2, True) and "at least 2" in every.line()
    none = capacity([_row(1, False), _row(2, True)])
    assert none.sessions is None and none.first_miss == 1 and "below the lowest" in none.line()
    assert capacity([]).line() == "Capacity: no level recorded"


def _paced(violations: int, behind: bool) -> Session:
    record = _record(
        pacing=PacingStats(violations=violations), loop_lag=LoopLagStats(client_behind=behind)
    )
    return Session(record=record, trace=_appends(3) + _reply("a", 0.1, [0.2, 0.21]))


def test_client_limited_when_pacing_breaks_with_client_loop_lag():
    limited = level_row(8, [_paced(3, True), _paced(0, False)])
    assert (limited.client_limited_sessions, limited.client_behind, limited.client_limited) == (
        1,
        1,
        True,
    )
    assert limited.missed_targets == [
        "1 pacing violations (client-limited: the load generator fell behind)"
    ]
    # late packets while the client loop kept time: the server stopped reading (backpressure)
    server = level_row(8, [_paced(3, False)], client_cpu=0.4)
    assert not server.client_limited and server.missed_targets == ["1 pacing violations"]
    # ... unless the client process used (nearly) a whole core: a saturated load generator
    assert level_row(8, [_paced(3, False)], client_cpu=0.95).client_limited
    # loop lag without any pacing violation does not make the level client-limited
    assert not level_row(8, [_paced(0, True)], client_cpu=0.95).client_limited
    found = capacity([_row(4, True), limited.model_copy(update={"concurrency": 8})])
    assert (found.sessions, found.at_least, found.first_miss, found.client_limited) == (
        4,
        True,
        8,
        True,
    )
    assert found.line().startswith("Capacity: at least 4 sessions (at level 8 the load generator")
    alone = capacity([limited])
    assert alone.sessions is None and "not measured" in alone.line()


def test_repeats_pool_sessions_and_meet_only_when_every_repeat_does():
    good = [Session(record=_record(), trace=_appends(10) + _reply("a", 1.0, [1.2, 1.21, 1.22]))]
    slow = [Session(record=_record(), trace=_appends(10) + _reply("b", 1.0, [1.2, 1.5, 1.8]))]
    rows = [level_row(2, good, client_cpu=0.2), level_row(2, slow, client_cpu=0.3)]
    pooled = level_row(2, good + slow)
    row = combine_repeats(pooled, rows)
    assert row.repeats == 2 and row.sessions == 2 and row.replies == 2 and row.client_cpu == 0.3
    assert not row.meets_targets and row.missed_targets == ["repeat 2: reply RTF p90 3.0 not < 1"]
    assert row.rtf_p90 == pytest.approx(3.0) and row.first_audio_p50_ms == pytest.approx(200.0)
    assert combine_repeats(pooled, rows[:1]) == rows[0]
    both_good = combine_repeats(level_row(2, good + good), [rows[0], rows[0]])
    assert both_good.meets_targets and both_good.missed_targets == []


def test_first_audio_after_the_speech_end():
    # speech ends at 0.5 s of input: packet 6 ([480, 560) ms) holds it and was sent by 0.481
    early = _reply(
        "early", 0.3, [0.6]
    )  # created before the speech end: a reply to an earlier pause
    trace = _appends(20) + early + _reply("turn", 1.0, [1.281, 1.4])
    assert speech_end_first_audio_s(trace, TURN_BASED, 24000, 0.5) == pytest.approx(0.8)
    assert (
        speech_end_first_audio_s(trace, TURN_BASED, 24000, 1.2) is None
    )  # no reply created after it
    silent = _appends(20) + _reply("empty", 1.0, [])
    assert speech_end_first_audio_s(silent, TURN_BASED, 24000, 0.5) is None
    assert speech_end_first_audio_s([], TURN_BASED, 24000, 0.5) is None
