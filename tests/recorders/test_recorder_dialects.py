"""The native, legacy half-duplex and OpenAI GA/beta profiles against scripted loopback peers:
session shape, events, the end of the session, the oracle and the export's playout cut."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

from fdb.dialects import LEGACY, NATIVE, NATIVE_80, OPENAI_BETA, OPENAI_GA, get_dialect
from fdb.errors import FdbError
from fdb.playout import playout_window, trace_playout_inputs
from fdb.session_records import SessionRecord, read_trace
from recorders.session import record_session
from tests.recorders.dialect_fakes import DialectServer, Faults
from tests.recorders.test_recorder_session import speech

TD = {"type": "server_vad", "silence_duration_ms": 500}


def record(profile, out, faults=None, td=None, timeout_s=5.0, seconds=0.6, tail_s=0.2):
    async def main():
        async with DialectServer(profile, faults) as server:
            rec = await record_session(
                server.url,
                speech(seconds),
                out,
                sample_id="cat/1",
                variant="main",
                profile=profile,
                turn_detection=td,
                model="m",
                timeout_s=timeout_s,
                tail_s=tail_s,
            )
            return rec, server

    return asyncio.run(main())


def test_native_session_passes_with_pad_arithmetic(tmp_path):
    rec, server = record(NATIVE.name, tmp_path / "s", seconds=1.5)
    assert rec.status == "ok" and rec.verdict.status == "pass", (
        rec.failure,
        rec.verdict.violations,
    )
    assert rec.trace_format == "realtime-pcm16-v1" and rec.granted["interaction"] == "native"
    appends = [e for e in server.received if e["type"] == "input_audio_buffer.append"]
    assert [a["sglang"] for a in appends[:2]] == [
        {"seq": 0, "t_start_ms": 0},
        {"seq": 1, "t_start_ms": 80},
    ]
    drained = next(
        e
        for e in read_trace(tmp_path / "s" / "trace.jsonl")
        if e.type == "sglang.input_audio.drained"
    )
    assert drained.event["padding_ms"] == 500.0 and rec.drain_s is not None and rec.drain_s >= 0
    assert (
        rec.loop_lag.ticks > 0
        and rec.loop_lag.max_ms is not None
        and not rec.loop_lag.client_behind
    )


def test_native_80ms_session_asks_for_its_unit_and_is_one_response(tmp_path):
    from recorders.oracle import judge_trace

    rec, server = record(NATIVE_80.name, tmp_path / "s", seconds=0.5)
    assert rec.status == "ok" and rec.verdict.status == "pass", (
        rec.failure,
        rec.verdict.violations,
    )
    assert rec.trace_format == "realtime-native80-pcm16-v1" and rec.input.rate == 24000
    session = server.received[0]["session"]
    assert session["sglang"] == {"timebase": {"native_unit_ms": 80}}
    assert session["audio"]["input"]["format"] == {"type": "audio/pcm", "rate": 24000}
    appends = [e for e in server.received if e["type"] == "input_audio_buffer.append"]
    assert [a["sglang"] for a in appends[:2]] == [
        {"seq": 0, "t_start_ms": 0},
        {"seq": 1, "t_start_ms": 80},
    ]
    trace = read_trace(tmp_path / "s" / "trace.jsonl")
    done = next(e for e in trace if e.type == "response.done")
    assert done.event["response"]["status_details"]["reason"] == "input_audio_ended"
    created = next(e for e in trace if e.type == "response.created")
    second = created.model_copy(
        update={"event": {"response": {"id": "resp_2", "status": "in_progress"}}}
    )
    early = done.model_copy(update={"t": created.t})
    doctored = sorted([e for e in trace if e is not done] + [second, early], key=lambda e: e.t)
    violations = judge_trace(doctored, NATIVE_80, None, rec.input.duration_s * 1000).violations
    assert any("the session is one response" in v for v in violations)
    assert any("input_audio_ended before sglang.input_audio.end" in v for v in violations)
    assert (
        judge_trace(trace, NATIVE, None, rec.input.duration_s * 1000).status == "fail"
    )  # 1 s units, 16 kHz


def test_native_rejects_turn_detection():
    with pytest.raises(FdbError, match="does not take --turn-detection"):
        NATIVE.validate_turn_detection(TD)
    with pytest.raises(FdbError, match="requires --turn-detection"):
        LEGACY.validate_turn_detection(None)
    with pytest.raises(FdbError, match="does not take eagerness"):
        LEGACY.validate_turn_detection({"type": "server_vad", "eagerness": "low"})
    assert (
        LEGACY.validate_turn_detection({"type": "semantic_vad", "eagerness": "low"})["eagerness"]
        == "low"
    )


@pytest.mark.parametrize("profile", [LEGACY, OPENAI_GA, OPENAI_BETA])
def test_conversation_profiles_end_with_the_legacy_tail(tmp_path, profile):
    rec, server = record(profile.name, tmp_path / "s", td=TD)
    assert rec.status == "ok" and rec.verdict.status == "pass", (
        rec.failure,
        rec.verdict.violations,
    )
    assert rec.close_code == 1000 and rec.turn_detection_granted["type"] == "server_vad"
    updates = [e for e in server.received if e["type"] == "session.update"]
    assert len(updates) == 2 and updates[1]["session"] in ({}, {"type": "realtime"})
    appends = [e for e in server.received if e["type"] == "input_audio_buffer.append"]
    assert all("sglang" not in a for a in appends)
    assert not any(
        e["type"].startswith("sglang.") or e["type"] == "session.close" for e in server.received
    )
    shape = updates[0]["session"]
    if profile.shape == "beta":
        assert shape["turn_detection"] == TD and "type" not in shape
    else:
        assert shape["audio"]["input"]["turn_detection"] == TD and shape["type"] == "realtime"
    if profile is OPENAI_BETA:
        assert server.headers[0].get("openai-beta") == "realtime=v1"
    assert rec.input.rate == profile.formats.input_rate and rec.responses.audio_deltas == 3
    trace = read_trace(tmp_path / "s" / "trace.jsonl")
    tail = [e for e in trace if e.type == "session.update"][1]
    assert tail.t >= rec.input.duration_s + 0.2 - 1e-3


@pytest.mark.parametrize("cleared", [False, True])
def test_legacy_barge_in_is_accepted_and_cuts_playout(tmp_path, cleared):
    rec, _ = record(LEGACY.name, tmp_path / "s", Faults(barge_in=True, send_cleared=cleared), td=TD)
    assert rec.verdict.status == "pass", rec.verdict.violations
    assert rec.responses.cancelled == 1
    trace = read_trace(tmp_path / "s" / "trace.jsonl")
    output = (tmp_path / "s" / "output.pcm").read_bytes()
    deltas, cuts = trace_playout_inputs(trace, output, LEGACY, TD)
    window = playout_window(deltas, cuts, 24000, rec.input.duration_s)
    assert window.barge_in_cuts == 1
    _, kept = trace_playout_inputs(trace, output, LEGACY, {**TD, "interrupt_response": False})
    assert len(kept) == (1 if cleared else 0)  # cleared cuts even when interrupt_response is false


def test_legacy_cancel_without_speech_during_it_fails(tmp_path):
    rec, _ = record(LEGACY.name, tmp_path / "s", Faults(barge_in=True), td=TD)
    trace = read_trace(tmp_path / "s" / "trace.jsonl")
    from recorders.oracle import judge_trace

    created = next(i for i, e in enumerate(trace) if e.type == "response.created")
    starts = [
        i
        for i, e in enumerate(trace)
        if e.type == "input_audio_buffer.speech_started" and i > created
    ]
    doctored = [e for i, e in enumerate(trace) if i not in starts]
    verdict = judge_trace(doctored, LEGACY, TD, rec.input.duration_s * 1000)
    assert any("saw no speech_started during it" in v for v in verdict.violations)


def test_profiles_declare_their_contracts():
    assert (NATIVE.units.unit_ms, NATIVE.units.tail_policy, NATIVE.units.padding_ms(1500)) == (
        1000,
        "pad",
        500,
    )
    assert LEGACY.trace_format == "realtime-legacy-pcm16-v1" and LEGACY.events.audio_delta == (
        "response.audio.delta",
    )
    assert (
        OPENAI_GA.events.audio_delta == ("response.output_audio.delta",)
        and OPENAI_GA.formats.input_rate == 24000
    )
    assert get_dialect("openai-beta").shape == "beta" and not OPENAI_BETA.events.receipts
    assert LEGACY.interrupts(None) and not LEGACY.interrupts({"interrupt_response": False})


def test_session_json_round_trips(tmp_path):
    rec, _ = record(OPENAI_GA.name, tmp_path / "s", td=TD)
    stored = SessionRecord.model_validate(json.loads((tmp_path / "s" / "session.json").read_text()))
    assert stored == rec and stored.profile == "openai-ga" and np.isfinite(stored.loop_lag.mean_ms)
