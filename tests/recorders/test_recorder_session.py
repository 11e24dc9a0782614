"""record_session against scripted servers: a clean session, and each way a server can fail.

Every failure ends as a recorded status with its reason; the trace and the audio received so far
are kept, and no exception escapes.
"""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path

import numpy as np
import pytest

from fdb.audio import Audio, read_wav
from fdb.errors import FdbError, SampleError
from fdb.io import sha256_file
from fdb.session_records import SessionRecord, read_trace
from recorders.batch import SessionJob, record_many
from recorders.session import input_pcm16, record_session
from tests.recorders.recorder_fakes import Script, ScriptedServer, tone

TD = {"type": "server_vad", "silence_duration_ms": 500}


def speech(seconds: float = 0.6, rate: int = 16000) -> Audio:
    t = np.arange(int(seconds * rate)) / rate
    return Audio((0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), rate)


def record(
    script: Script, out: Path, audio: Audio | None = None, timeout_s: float = 5.0
) -> SessionRecord:
    async def main():
        async with ScriptedServer(script) as server:
            return await record_session(
                server.url,
                audio or speech(),
                out,
                sample_id="synthetic_pause_handling/1",
                variant="main",
                profile="turn-based",
                turn_detection=TD,
                model="m",
                timeout_s=timeout_s,
            )

    return asyncio.run(main())


def stored(out: Path) -> SessionRecord:
    return SessionRecord.model_validate(json.loads((out / "session.json").read_text()))


def test_clean_session_writes_the_directory(tmp_path):
    out = tmp_path / "s"
    rec = record(Script(reply_at_packet=3, reply_ms=300), out)
    assert rec.status == "ok" and rec.failure is None, rec.failure
    assert rec.verdict.status == "pass", rec.verdict.violations
    assert sorted(p.name for p in out.iterdir()) == [
        "input.wav",
        "output.pcm",
        "session.json",
        "trace.jsonl",
    ]
    assert (
        stored(out) == rec
        and json.loads((out / "session.json").read_text())["schema"] == "fdb-session-1"
    )
    assert rec.close_code == 1000 and rec.pacing.packets == 8 and rec.pacing.violations == 0
    assert rec.turn_detection_requested == TD and rec.turn_detection_granted["type"] == "server_vad"
    assert rec.responses.created == rec.responses.completed == 1
    assert (out / "output.pcm").stat().st_size == rec.responses.output_bytes == 3 * 2400 * 2
    assert rec.input.samples == 9600 and rec.input.duration_s == pytest.approx(0.6)
    assert read_wav(out / "input.wav").rate == 16000
    assert rec.files["input.wav"] == sha256_file(out / "input.wav")
    trace = read_trace(out / "trace.jsonl")
    first = next(e for e in trace if e.type == "input_audio_buffer.append")
    assert first.scheduled == 0.0 and 0.0 <= first.t < 0.08 and first.t_end >= first.t
    assert all("audio" not in e.event for e in trace if e.dir == "send")
    deltas = [e for e in trace if e.type == "response.output_audio.delta"]
    assert all(e.event["delta"] is None for e in deltas)
    assert [e.event["audio_offset"] for e in deltas] == [0, 4800, 9600]
    assert trace[0].t < 0 and not list(out.glob(".*.tmp"))


def test_input_is_resampled_to_16k(tmp_path):
    audio = speech(0.5, rate=24000)
    rec = record(Script(reply_at_packet=None), tmp_path / "s", audio=audio)
    assert rec.status == "ok" and rec.verdict.status == "pass", rec.verdict.violations
    assert rec.input.samples == 8000 and rec.input.source_rate == 24000
    assert rec.responses.created == 0 and (tmp_path / "s" / "output.pcm").read_bytes() == b""
    assert rec.input.pcm_sha256 == __import__("hashlib").sha256(input_pcm16(audio)).hexdigest()


def test_cancelled_reply_is_recorded(tmp_path):
    rec = record(Script(cancel_reply=True), tmp_path / "s")
    assert rec.status == "ok" and rec.verdict.status == "pass"
    assert rec.responses.cancelled == 1


def test_disconnect_mid_stream(tmp_path):
    out = tmp_path / "s"
    rec = record(Script(disconnect_at_packet=4), out)
    assert rec.status == "disconnected" and rec.close_code == 1011
    assert "code 1011" in rec.failure and "sending input" in rec.failure
    assert rec.verdict.status == "fail"
    trace = read_trace(out / "trace.jsonl")
    assert sum(e.type == "sglang.input_audio.accepted" for e in trace) == 4
    assert (out / "output.pcm").stat().st_size == 14400  # the reply received before the drop
    assert stored(out).status == "disconnected"
    assert rec.files["input.wav"] == sha256_file(out / "input.wav")  # written after the session too


@pytest.mark.parametrize("code", [1000, 1008])
def test_server_closing_the_session_unasked_is_a_disconnect(tmp_path, code):
    rec = record(Script(server_close_at_packet=3, server_close_code=code), tmp_path / "s")
    assert rec.status == "disconnected" and rec.close_code == code
    assert f"code {code}, idle_timeout" in rec.failure and rec.verdict.status == "fail"


@pytest.mark.parametrize("fatal", [True, False])
def test_error_event_fails_the_session(tmp_path, fatal):
    out = tmp_path / "s"
    rec = record(Script(error_at_packet=4, fatal_error=fatal), out)
    assert rec.status == "error" and "internal" in rec.failure and "boom" in rec.failure
    assert rec.verdict.status == "fail"
    assert any(v.startswith("error: server error internal") for v in rec.verdict.violations)
    sent_close = [e for e in read_trace(out / "trace.jsonl") if e.type == "session.close"]
    assert len(sent_close) == (0 if fatal else 1)  # a non-fatal error still closes politely


def test_server_that_never_drains_times_out(tmp_path):
    out = tmp_path / "s"
    rec = record(Script(never_drain=True), out, timeout_s=1.5)
    assert rec.status == "timeout" and "sglang.input_audio.drained" in rec.failure
    assert rec.elapsed_s < 4.5
    assert any("no sglang.input_audio.drained" in v for v in rec.verdict.violations)
    assert any(e.type == "sglang.input_audio.ended" for e in read_trace(out / "trace.jsonl"))


def test_admission_503_is_retried(tmp_path):
    out = tmp_path / "s"
    rec = record(Script(deny_admissions=2), out)
    assert rec.status == "ok" and rec.admission_denials == 2 and rec.verdict.status == "pass"
    notes = [e for e in read_trace(out / "trace.jsonl") if e.type == "admission_denied"]
    assert [n.event["attempt"] for n in notes] == [1, 2] and notes[0].event["http_status"] == 503


def test_admission_denied_after_three_retries(tmp_path):
    out = tmp_path / "s"
    rec = record(Script(deny_admissions=10), out)
    assert rec.status == "admission_denied" and rec.admission_denials == 4
    assert stored(out).status == "admission_denied" and (out / "trace.jsonl").exists()


def test_invalid_json_fails_the_session(tmp_path):
    rec = record(Script(invalid_json_at_packet=2), tmp_path / "s")
    assert rec.status == "error" and "invalid JSON" in rec.failure


@pytest.mark.parametrize(
    "delta,detail",
    [
        ("abc", "length 3 is not a multiple of 4"),  # seen at once: the session stops there
        (
            "!!!!" * 8,
            "audio delta 1",
        ),  # the right shape: found when the finished session is decoded
    ],
)
def test_an_undecodable_audio_delta_fails_the_session_and_keeps_the_audio_before_it(
    tmp_path, delta, detail
):
    rec = record(Script(bad_delta=delta), tmp_path / "s")
    assert (
        rec.status == "error" and "undecodable audio delta" in rec.failure and detail in rec.failure
    )
    output = (tmp_path / "s" / "output.pcm").read_bytes()
    assert output.startswith(tone(100)) and len(output) < len(
        tone(300)
    )  # the bad delta is not in it
    trace = read_trace(tmp_path / "s" / "trace.jsonl")
    assert any(ev.type == "failure" and "undecodable" in ev.event["reason"] for ev in trace)


def test_broken_seq_order_is_a_protocol_violation(tmp_path):
    rec = record(Script(bad_seq_at_packet=2), tmp_path / "s")
    assert rec.status == "ok" and rec.verdict.status == "fail"
    assert any("accepted seq 3, expected 2" in v for v in rec.verdict.violations)


def test_wrong_turn_detection_echo_fails_the_verdict(tmp_path):
    rec = record(Script(echo_type="semantic_vad"), tmp_path / "s")
    assert rec.verdict.status == "fail" and any("semantic_vad" in v for v in rec.verdict.violations)


def test_connection_refused_is_recorded(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "s"
    rec = asyncio.run(
        record_session(
            f"ws://127.0.0.1:{port}/v1/realtime?api_key=secret",
            speech(),
            out,
            sample_id="a/1",
            variant="main",
            profile="turn-based",
            turn_detection=TD,
            timeout_s=3,
        )
    )
    assert rec.status == "error" and "cannot connect" in rec.failure
    assert "secret" not in (out / "session.json").read_text() + (out / "trace.jsonl").read_text()


def test_local_input_problems_raise_before_sending(tmp_path):
    out = tmp_path / "s"
    record(Script(), out)
    with pytest.raises(SampleError, match="already recorded"):
        record(Script(), out)
    with pytest.raises(FdbError, match="requires --turn-detection"):
        asyncio.run(
            record_session(
                "ws://x",
                speech(),
                tmp_path / "t",
                sample_id="a/1",
                variant="main",
                profile="turn-based",
                turn_detection=None,
            )
        )
    with pytest.raises(SampleError, match="empty"):
        asyncio.run(
            record_session(
                "ws://x",
                Audio(np.zeros(0, np.float32), 16000),
                tmp_path / "u",
                sample_id="a/1",
                variant="main",
                profile="turn-based",
                turn_detection=TD,
            )
        )


def test_record_many_isolates_failures_and_keeps_order(tmp_path):
    seen = []

    async def main():
        async with (
            ScriptedServer(Script()) as good,
            ScriptedServer(Script(disconnect_at_packet=2)) as bad,
        ):
            jobs = [
                SessionJob(good.url, speech(), tmp_path / "a", "s/a", "main", "turn-based", TD),
                SessionJob(bad.url, speech(), tmp_path / "b", "s/b", "main", "turn-based", TD),
                SessionJob(
                    good.url,
                    tmp_path / "missing.wav",
                    tmp_path / "c",
                    "s/c",
                    "main",
                    "turn-based",
                    TD,
                ),
                SessionJob(good.url, speech(), tmp_path / "d", "s/d", "main", "turn-based", TD),
            ]
            return await record_many(
                jobs, concurrency=2, progress=lambda d, n, r: seen.append((d, n, r.sample_id))
            )

    records = asyncio.run(main())
    assert [r.sample_id for r in records] == ["s/a", "s/b", "s/c", "s/d"]
    assert [r.status for r in records] == ["ok", "disconnected", "error", "ok"]
    assert "s/c" in records[2].failure and "audio file is missing" in records[2].failure
    assert stored(tmp_path / "c").status == "error"
    assert sorted(d for d, _, _ in seen) == [1, 2, 3, 4] and all(n == 4 for _, n, _ in seen)


def test_opening_slots_ramp_a_batch_but_a_silent_server_cannot_hold_it_back(tmp_path, monkeypatch):
    """Sessions prepare and open OPENING_CONCURRENCY at a time; a session whose server never
    answers gives its slot back after OPENING_HOLD_S, so such a server costs each session its own
    deadline, not the batch the sum of them."""
    from websockets.asyncio.server import serve

    import recorders.session as session_mod

    monkeypatch.setattr(session_mod, "OPENING_CONCURRENCY", 1)
    monkeypatch.setattr(session_mod, "OPENING_HOLD_S", 0.2)

    async def silent(ws):  # accepts the upgrade, never sends session.created
        await ws.wait_closed()

    async def main():
        async with serve(silent, "127.0.0.1", 0, compression=None, ping_interval=None) as server:
            url = f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1/realtime"
            jobs = [
                SessionJob(
                    url,
                    speech(),
                    tmp_path / f"s{k}",
                    f"silent/{k}",
                    "main",
                    "turn-based",
                    TD,
                    timeout_s=1.0,
                )
                for k in range(4)
            ]
            await session_mod.start_finisher()
            t = asyncio.get_running_loop().time()
            records = await record_many(jobs, concurrency=4)
            return records, asyncio.get_running_loop().time() - t

    records, wall = asyncio.run(main())
    assert [r.status for r in records] == ["timeout"] * 4
    assert all("waiting for session.created" in r.failure for r in records)
    # one slot: the 4th session opens 3 holds (0.6 s) after the first, waits its 1 s deadline, then
    # up to CLOSE_GRACE_S (2 s) for the silent server to answer its session.close: about 3.6 s;
    # the four one after another would take about 12 s
    assert 3.0 <= wall < 6.0, wall


def test_openings_start_at_most_opening_rate_a_second(monkeypatch):
    """Slots are taken at most OPENING_RATE a second; one cancelled while it waits for its
    start gives its slot back."""
    import recorders.session as session_mod
    from recorders.eventloop import CLOCK

    monkeypatch.setattr(session_mod, "OPENING_RATE", 20.0)  # one opening every 50 ms
    monkeypatch.setattr(session_mod, "OPENING_CONCURRENCY", 2)

    async def main():
        starts = []
        for _ in range(4):
            slot = await session_mod._opening_slot()
            starts.append(CLOCK())
            slot.release()
        gate = session_mod._GATES[asyncio.get_running_loop()]
        gate.next_start = CLOCK() + 60.0  # the next opening is far off: its waiter is still waiting
        waiting = asyncio.create_task(session_mod._opening_slot())
        await asyncio.sleep(0.01)
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
        slots = gate.slots
        for _ in range(2):  # both slots are free again: neither acquisition waits
            await asyncio.wait_for(slots.acquire(), 0.1)
        return starts, slots.locked()

    starts, exhausted = asyncio.run(main())
    # opening k is booked 50 ms after opening k-1's booking; the first wakes without a wait
    offsets = [t - starts[0] for t in starts]
    assert all(offset >= 0.05 * k - 0.002 for k, offset in enumerate(offsets)), offsets
    assert exhausted  # the cancelled waiter gave its slot back, and no more than that


def test_a_session_handed_to_the_finisher_reads_no_more_messages():
    from fdb.dialects import get_dialect
    from recorders.session import _Session

    profile = get_dialect("turn-based")
    delta_type = sorted(profile.events.audio_delta)[0]
    session = _Session("ws://127.0.0.1:1/v1/realtime", b"\0\0" * 3200, profile, {}, 10.0)
    message = json.dumps({"type": delta_type, "delta": "AAAAAA=="})
    session._on_message(message, 1.0)
    done = session.as_finished(1.0, None)
    assert done.audio is session.audio and list(done.audio.sizes) == [8] and len(done.raw) == 1
    session._on_message(message, 2.0)  # a late message (the close was not answered in time)
    assert list(done.audio.sizes) == [8] and len(session.raw) == 1 and session.output_bytes == 4
