"""Whole sessions against the real server: one spoken turn, barge-in with pacing, commit mode."""

from __future__ import annotations

import asyncio
import base64
import math

import numpy as np

from benchmarks.support.realtime_client import Client
from tests.serving.conftest import _pcm16, silence

LEAD_MS = 1000  # max_output_lead_ms of the system
SLACK_MS = 200  # scheduling slack of a loaded 2-core machine


def _audio_bytes(events: list[dict]) -> int:
    return sum(len(base64.b64decode(e["delta"])) for e in events)


async def _end_and_close(client: Client, timeout: float = 30.0) -> tuple[dict, dict]:
    end_id = await client.send("sglang.input_audio.end")
    ended = (await client.until("sglang.input_audio.ended", 5)).event
    drained = (await client.until("sglang.input_audio.drained", timeout)).event
    assert ended["client_event_id"] == end_id and drained["client_event_id"] == end_id
    close_id = await client.send("session.close")
    closed = (await client.until("session.closed", 5)).event
    assert closed == {**closed, "reason": "client_closed", "client_event_id": close_id}
    assert await client.wait_closed() == (1000, "client_closed")
    return ended, drained


def _check_units(client: Client, input_ms: float) -> None:
    units = client.of_type("sglang.unit.done")
    assert len(units) == math.ceil(input_ms / 200)
    for k, unit in enumerate(units):
        assert unit["unit_id"] == f"unit_{k}"
        assert unit["sglang"]["media_time"]["t_start_ms"] == k * 200
    durations = [u["sglang"]["media_time"]["duration_ms"] for u in units]
    assert all(d == 200 for d in durations[:-1]) and 0 < durations[-1] <= 200
    assert abs(sum(durations) - input_ms) < 1e-6


def _check_receipts(client: Client, pcm: bytes, packets: int) -> None:
    accepted = client.of_type("sglang.input_audio.accepted")
    assert [a["seq"] for a in accepted] == list(range(packets))
    expected_end = [min((k + 1) * 2560, len(pcm)) / 32 for k in range(packets)]
    assert [a["accepted_end_ms"] for a in accepted] == expected_end


def test_one_spoken_turn(server, question_pcm):
    """The question, sent in 80 ms packets at 4x real time, is detected, transcribed, answered
    with audio, and the session drains and closes cleanly."""

    async def scenario() -> Client:
        client = await Client.connect(server.ws_url)
        updated = await client.open_session()
        turn = updated["session"]["audio"]["input"]["turn_detection"]
        assert turn["type"] == "server_vad" and turn["silence_duration_ms"] == 500
        assert updated["session"]["sglang"]["granted"]["interaction"] == "turn_based"
        packets = await client.send_audio(question_pcm, interval_s=0.02)
        await client.until("response.done", 30)
        ended, drained = await _end_and_close(client)
        input_ms = len(question_pcm) / 32
        assert ended["accepted_end_ms"] == input_ms and ended["tail_policy"] == "flush"
        assert drained["consumed_ms"] == input_ms and drained["accepted_end_ms"] == input_ms
        assert drained["discarded_ms"] == 0 and drained["padding_ms"] == 0
        _check_receipts(client, question_pcm, packets)
        _check_units(client, input_ms)
        return client

    client = asyncio.run(scenario())
    types = client.types()
    order = [
        "session.created",
        "session.updated",
        "input_audio_buffer.speech_started",
        "input_audio_buffer.speech_stopped",
        "input_audio_buffer.committed",
        "conversation.item.input_audio_transcription.completed",
        "response.created",
        "response.output_audio_transcript.delta",
        "response.output_audio.delta",
        "response.output_audio.done",
        "response.output_audio_transcript.done",
        "response.done",
        "sglang.input_audio.drained",
        "session.closed",
    ]
    positions = [types.index(name) for name in order]
    assert positions == sorted(positions), types
    assert "error" not in types
    started = client.of_type("input_audio_buffer.speech_started")[0]
    stopped = client.of_type("input_audio_buffer.speech_stopped")[0]
    assert started["item_id"] == stopped["item_id"]
    assert 0 <= started["audio_start_ms"] < 600 < stopped["audio_end_ms"] < len(question_pcm) / 32
    transcript = client.of_type("conversation.item.input_audio_transcription.completed")[0][
        "transcript"
    ]
    assert "capital" in transcript.lower() and "france" in transcript.lower()
    done = client.of_type("response.done")[0]["response"]
    assert done["status"] == "completed" and done["status_details"]["reason"] == "stop"
    deltas = client.of_type("response.output_audio.delta")
    assert {d["response_id"] for d in deltas} == {done["id"]}
    assert len({d["item_id"] for d in deltas}) == 1
    assert _audio_bytes(deltas) > 24000 * 2 * 0.5  # at least half a second of 24 kHz PCM16
    spoken = client.of_type("response.output_audio_transcript.done")[0]["transcript"]
    assert spoken and done["output"][0]["content"][0]["transcript"] == spoken


def test_a_long_reply_starts_speaking_with_its_first_chunk(server, speech):
    """The reply is streamed: its first audio is synthesized from a short first chunk (at most
    12 words) and leaves before the later chunks' transcripts, well before the reply is done."""
    pcm = _pcm16(np.concatenate([silence(0.25), speech["long_question"], silence(1.0)]))

    async def scenario() -> Client:
        client = await Client.connect(server.ws_url)
        await client.open_session()
        await client.send_audio(pcm, interval_s=0.02)
        await client.until("response.output_audio.delta", 30)
        await client.until("response.done", 60)
        await _end_and_close(client)
        return client

    client = asyncio.run(scenario())
    assert "error" not in client.types()
    done = client.of_type("response.done")[0]["response"]
    assert done["status"] == "completed" and done["status_details"]["reason"] == "stop"
    deltas = [r for r in client.received if r.type == "response.output_audio_transcript.delta"]
    first_audio = next(r for r in client.received if r.type == "response.output_audio.delta")
    transcript_done = next(
        r for r in client.received if r.type == "response.output_audio_transcript.done"
    )
    spoken = transcript_done.event["transcript"]
    assert "".join(d.event["delta"] for d in deltas) == spoken
    assert len(deltas) >= 2 and len(deltas[0].event["delta"].split()) <= 12 < len(spoken.split())
    assert deltas[0].t <= first_audio.t < deltas[1].t
    assert transcript_done.t - first_audio.t > 1.0  # the rest of the reply played after it


def _check_pacing(client: Client, response_id: str) -> None:
    """Before the input ended, no audio left more than LEAD_MS ahead of the reply's clock."""
    ended_at = next(r.t for r in client.received if r.type == "sglang.input_audio.ended")
    deliveries = [
        r
        for r in client.received
        if r.type == "response.output_audio.delta" and r.event["response_id"] == response_id
    ]
    first = deliveries[0].t
    total_ms = 0.0
    for item in deliveries:
        total_ms += len(base64.b64decode(item.event["delta"])) / 48
        if item.t < ended_at:
            assert total_ms <= (item.t - first) * 1000 + LEAD_MS + SLACK_MS


def test_barge_in_cancels_the_reply_and_audio_is_paced(server, speech, question_pcm):
    """Real-time input: the user speaks again while the reply plays; the reply is cancelled
    (reason interrupted), its audio stops, and the second utterance is answered."""

    async def scenario() -> Client:
        client = await Client.connect(server.ws_url)
        await client.open_session()
        seq = await client.send_audio(question_pcm)
        # Keep streaming silence until the reply's audio starts arriving, then barge in.
        seq = await client.silence_until("response.output_audio.delta", seq, limit_s=16)
        barge_in = _pcm16(np.concatenate([speech["barge_in"], silence(1.0)]))
        seq = await client.send_audio(barge_in, first_seq=seq)
        await _end_and_close(client)
        return client

    client = asyncio.run(scenario())
    assert "error" not in client.types()
    done = client.of_type("response.done")
    assert len(done) == 2, client.types()
    first, second = done[0]["response"], done[1]["response"]
    assert first["status"] == "cancelled" and first["status_details"]["reason"] == "interrupted"
    assert second["status"] == "completed" and second["status_details"]["reason"] in (
        "stop",
        "empty_turn",
    )
    starts = [r.t for r in client.received if r.type == "input_audio_buffer.speech_started"]
    cancel_at = next(r.t for r in client.received if r.type == "response.done")
    assert len(starts) == 2 and starts[1] <= cancel_at
    late_audio = [
        r
        for r in client.received
        if r.type == "response.output_audio.delta"
        and r.event["response_id"] == first["id"]
        and r.t > cancel_at
    ]
    assert not late_audio
    _check_pacing(client, first["id"])
    transcripts = client.of_type("conversation.item.input_audio_transcription.completed")
    assert "spain" in transcripts[1]["transcript"].lower()


def test_commit_mode_and_client_cancel(server, speech):
    """turn_detection null: no VAD events, the commit ends the utterance; response.cancel
    cancels the reply while it plays; a second cancel does nothing."""
    pcm = _pcm16(np.concatenate([silence(0.2), speech["question"]]))

    async def scenario() -> Client:
        client = await Client.connect(server.ws_url)
        updated = await client.open_session({"audio": {"input": {"turn_detection": None}}})
        assert updated["session"]["audio"]["input"]["turn_detection"] is None
        await client.send_audio(pcm, interval_s=0.02)
        await client.send("input_audio_buffer.commit")
        await client.until("input_audio_buffer.committed", 10)
        await client.until("response.output_audio.delta", 30)
        await client.send("response.cancel")
        await client.send("response.cancel")
        await client.until("response.done", 10)
        await _end_and_close(client)
        return client

    client = asyncio.run(scenario())
    types = client.types()
    assert "input_audio_buffer.speech_started" not in types and "error" not in types
    transcript = client.of_type("conversation.item.input_audio_transcription.completed")[0][
        "transcript"
    ]
    assert "france" in transcript.lower()
    done = client.of_type("response.done")
    assert len(done) == 1
    assert done[0]["response"]["status"] == "cancelled"
    assert done[0]["response"]["status_details"]["reason"] == "interrupted"
    assert types.index("response.output_audio.done") < types.index("response.done")
