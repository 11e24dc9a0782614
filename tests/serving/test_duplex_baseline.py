"""The duplex-baseline system on a real server (real Silero, faster-whisper, SmolLM2, Piper):
the native grant, a spoken question answered through the recorder's native profile, yielding
when the user talks over a reply, units and the drain, and the native session.update rules."""

from __future__ import annotations

import asyncio
import base64
import math
from pathlib import Path

import httpx
import numpy as np
import pytest

from benchmarks.support.realtime_client import PACKET_BYTES, Client
from fdb.audio import Audio, float_to_pcm16, write_wav
from fdb.dialects import NATIVE, NATIVE_80
from fdb.session_settings import session_settings
from recorders.session import record_session
from tests.serving.conftest import launched_server, silence

LAUNCH_YAML = """\
system: duplex-baseline
max_sessions: 2
session_update_timeout_s: 2.0
idle_timeout_s: 5.0
"""


@pytest.fixture(scope="module")
def native_server(tmp_path_factory: pytest.TempPathFactory):
    with launched_server(tmp_path_factory.mktemp("duplex"), LAUNCH_YAML) as info:
        yield info


def test_capabilities_grant_what_the_native_profile_requires(native_server):
    caps = httpx.get(f"{native_server.base_url}/v1/realtime/capabilities").json()
    for key, want in NATIVE.oracle.required_grant:
        assert caps[key] == want, key
    assert caps["native_full_duplex"] is True and caps["first_unit_ms"] == 1000
    assert caps["turn_control"] == [None] and caps["client_commit"] is False
    assert caps["supports_cancel"] is True and caps["supports_truncate"] is False
    assert caps["sampling_parameters"] == ["temperature", "max_new_tokens_per_unit"]
    assert caps["output_audio_format"] == {"type": "audio/pcm", "rate": 24000}
    assert set(caps["limits"]) >= {"max_input_bytes", "idle_timeout_s", "session_update_timeout_s"}


def test_a_spoken_question_is_answered_and_the_native_oracle_passes(
    native_server, speech, tmp_path
):
    audio = np.concatenate([silence(0.25), speech["question"], silence(3.0)])
    rec = asyncio.run(
        record_session(
            native_server.ws_url,
            Audio(audio, 16000),
            tmp_path / "s",
            sample_id="duplex/question",
            variant="main",
            profile=NATIVE,
            turn_detection=None,
            timeout_s=60,
        )
    )
    assert rec.status == "ok", rec.failure
    assert rec.verdict.status == "pass", rec.verdict.violations
    assert rec.granted["interaction"] == "native" and rec.granted["native_unit_ms"] == 1000
    assert rec.responses.completed >= 1 and rec.responses.output_duration_s > 0.5
    trace = _trace(tmp_path / "s")
    recv = [e for e in trace if e["dir"] == "recv"]
    input_ms = len(audio) / 16
    units = [e["event"] for e in recv if e["type"] == "sglang.unit.done"]
    assert len(units) == math.ceil(
        input_ms / 1000
    )  # the tail unit is padded, reported at its length
    assert units[-1]["sglang"]["media_time"]["duration_ms"] == pytest.approx(
        input_ms - 1000 * (len(units) - 1)
    )
    accepted = [e for e in recv if e["type"] == "sglang.input_audio.accepted"]
    appends = [e for e in trace if e["type"] == "input_audio_buffer.append"]
    assert len(accepted) == len(appends)
    order = [
        e["type"]
        for e in trace
        if e["type"]
        in (
            "sglang.input_audio.end",
            "sglang.input_audio.ended",
            "sglang.input_audio.drained",
            "session.close",
            "session.closed",
        )
    ]
    assert order == [
        "sglang.input_audio.end",
        "sglang.input_audio.ended",
        "sglang.input_audio.drained",
        "session.close",
        "session.closed",
    ]
    drained = next(e["event"] for e in recv if e["type"] == "sglang.input_audio.drained")
    assert drained["padding_ms"] == pytest.approx(len(units) * 1000 - input_ms)


def test_the_80ms_profile_records_a_session_with_its_settings(native_server, speech, tmp_path):
    """personaplex-native-80ms against the bundled server: 24 kHz input on 80 ms units, one
    response, and the session settings sent, granted and echoed (the reference acknowledged)."""
    voice = httpx.get(f"{native_server.base_url}/v1/realtime/capabilities").json()["voices"][0]
    write_wav(tmp_path / "ref.wav", 0.1 * np.sin(np.arange(16000) / 5.0, dtype=np.float32), 16000)
    settings = session_settings(
        NATIVE_80.name,
        "Answer in one short sentence.",
        voice,
        '{"temperature": 0.5}',
        tmp_path / "ref.wav",
    )
    audio = np.concatenate([silence(0.25), speech["question"], silence(2.5)])
    rec = asyncio.run(
        record_session(
            native_server.ws_url,
            Audio(audio, 16000),
            tmp_path / "s",
            sample_id="duplex/question",
            variant="main",
            profile=NATIVE_80,
            turn_detection=None,
            timeout_s=60,
            settings=settings,
        )
    )
    assert rec.status == "ok" and rec.verdict.status == "pass", (
        rec.failure,
        rec.verdict.violations,
    )
    assert rec.granted["native_unit_ms"] == 80 and rec.input.rate == 24000
    assert rec.responses.created == 1 and rec.responses.output_duration_s > 0.5, rec.responses
    assert rec.extra["session_settings"]["voice"] == voice
    updated = next(
        e["event"]["session"] for e in _trace(tmp_path / "s") if e["type"] == "session.updated"
    )
    assert (
        updated["instructions"] == "Answer in one short sentence."
        and updated["sglang"]["voice"] == voice
    )
    assert updated["sglang"]["sampling"]["temperature"] == 0.5
    assert updated["audio"]["input"]["format"]["rate"] == 24000
    assert updated["sglang"]["reference_audio"]["sha256"] == settings.reference_audio.sha256
    assert updated["sglang"]["reference_audio"]["applied"] is False


def test_an_unknown_voice_or_a_bad_reference_is_refused(native_server):
    async def scenario() -> list[dict]:
        client = await Client.connect(native_server.ws_url)
        try:
            await client.until("session.created", 5)
            refused = []
            for sglang in (
                {"voice": "NATF2"},
                {"reference_audio": {"media_type": "audio/wav", "data": "bm90IGEgd2F2"}},
            ):
                await client.send("session.update", session={"type": "realtime", "sglang": sglang})
                refused.append((await client.until("error", 5)).event["error"])
            return refused
        finally:
            await client.close()

    voice, reference = asyncio.run(scenario())
    assert (
        voice["code"] == "unsupported_voice"
        and "NATF2" in voice["message"]
        and voice["param"] == "session.sglang.voice"
    )
    assert reference["code"] == "invalid_reference_audio"


def _trace(directory: Path) -> list[dict]:
    import json

    return [json.loads(line) for line in (directory / "trace.jsonl").read_text().splitlines()]


async def _reply_after_onset(url: str, question: bytes, overlap: bytes) -> tuple[float, list[dict]]:
    """Ask ``question`` on 200 ms units; 0.6 s after the reply's first audio send ``overlap``
    (speech or silence) and 3 s of silence. Returns the first reply's audio (ms) received after
    the overlap began, and its response.done."""
    client = await Client.connect(url)
    try:
        await client.open_session(
            {"type": "realtime", "sglang": {"timebase": {"native_unit_ms": 200}}}
        )
        seq = await client.send_audio(question)
        seq = await client.silence_until("response.output_audio.delta", seq)
        seq = await client.send_audio(float_to_pcm16(silence(0.6)), first_seq=seq)
        onset = client.now()
        seq = await client.send_audio(overlap + float_to_pcm16(silence(3.0)), first_seq=seq)
        await client.send("sglang.input_audio.end")
        await client.until("sglang.input_audio.drained", 30)
        first = client.of_type("response.created")[0]["response"]["id"]
        after = sum(
            len(base64.b64decode(r.event["delta"]))
            for r in client.received
            if r.type == "response.output_audio.delta"
            and r.event["response_id"] == first
            and r.t >= onset
        )
        done = [e for e in client.of_type("response.done") if e["response"]["id"] == first]
        return after / 48, done
    finally:
        await client.close()


def test_talking_over_the_reply_makes_it_yield(native_server, speech):
    question = float_to_pcm16(
        np.concatenate([silence(0.25), speech["long_question"], silence(0.1)])
    )
    barge_in = float_to_pcm16(speech["barge_in"])
    quiet = float_to_pcm16(silence(len(speech["barge_in"]) / 16000))

    async def both() -> list[tuple[float, list[dict]]]:  # two sessions at once (max_sessions 2)
        return await asyncio.gather(
            _reply_after_onset(native_server.ws_url, question, quiet),
            _reply_after_onset(native_server.ws_url, question, barge_in),
        )

    (heard_ms, done_heard), (yielded_ms, done_yielded) = asyncio.run(both())
    assert heard_ms > 1500, "without overlap the reply keeps talking"
    assert yielded_ms < heard_ms - 500
    assert yielded_ms <= 1200  # the yield unit plus one more on a loaded machine
    for done in (done_heard, done_yielded):
        assert [d["response"]["status_details"] for d in done] == [
            {"type": "completed", "reason": "stop"}
        ]


def test_native_session_update_rules(native_server):
    async def scenario() -> list[dict]:
        client = await Client.connect(native_server.ws_url)
        try:
            await client.until("session.created", 5)
            await client.send(
                "session.update",
                session={
                    "type": "realtime",
                    "audio": {"input": {"turn_detection": {"type": "server_vad"}}},
                },
            )
            refused = [(await client.until("error", 5)).event]
            await client.send(
                "session.update", session={"sglang": {"timebase": {"native_unit_ms": 500}}}
            )
            refused.append((await client.until("error", 5)).event)
            await client.send(
                "session.update", session={"type": "realtime", "model": "fdb/duplex-baseline"}
            )
            updated = (await client.until("session.updated", 5)).event
            assert updated["session"]["audio"]["input"]["turn_detection"] is None
            await client.send("input_audio_buffer.commit")
            refused.append((await client.until("error", 5)).event)
            await client.send(
                "session.update", session={"sglang": {"timebase": {"native_unit_ms": 200}}}
            )
            refused.append((await client.until("error", 5)).event)
            await client.send(
                "input_audio_buffer.append",
                audio=base64.b64encode(b"\0" * PACKET_BYTES).decode(),
                sglang={"seq": 0},
            )
            await client.until("sglang.input_audio.accepted", 5)
            await client.send("sglang.input_audio.end")
            ended = (await client.until("sglang.input_audio.ended", 5)).event
            drained = (await client.until("sglang.input_audio.drained", 10)).event
            assert ended["tail_policy"] == "pad"
            assert (drained["consumed_ms"], drained["padding_ms"]) == (80, 920)
            assert len(client.of_type("sglang.unit.done")) == 1
            await client.send("session.close")
            await client.until("session.closed", 5)
            assert (await client.wait_closed()) == (1000, "client_closed")
            return refused
        finally:
            await client.close()

    codes = [e["error"]["code"] for e in asyncio.run(scenario())]
    assert codes == ["not_applicable", "unsupported_unit", "not_granted", "frozen_field"]


def test_a_native_session_without_a_granted_update_is_closed(native_server):
    """The native session waits for a granted session.update (the Guide): launch.yaml sets
    session_update_timeout_s 2, and input before the grant is refused meanwhile."""

    async def scenario() -> Client:
        client = await Client.connect(native_server.ws_url)
        await client.until("session.created", 5)
        await client.send(
            "input_audio_buffer.append",
            audio=base64.b64encode(b"\0" * PACKET_BYTES).decode(),
            sglang={"seq": 0},
        )
        assert (await client.until("error", 5)).event["error"]["code"] == "session_not_open"
        assert await client.wait_closed(6) == (1008, "session_update_timeout")
        return client

    client = asyncio.run(scenario())
    fatal = [e for e in client.of_type("error") if e["error"]["code"] == "session_update_timeout"]
    assert len(fatal) == 1 and fatal[0]["sglang"]["fatal"] is True


def test_a_long_user_turn_gets_one_backchannel_while_the_user_talks(native_server, speech):
    from fdb.audio import resample
    from fdb.models.tts import PiperTts

    tts = PiperTts(deterministic=True)
    long_turn = resample(
        tts.synthesize(
            "Yesterday I walked to the market and bought apples and pears and bananas and oranges "
            "and a big loaf of fresh bread for the weekend with my whole family"
        ),
        tts.rate,
        16000,
    )
    assert len(long_turn) > 5.5 * 16000

    async def scenario() -> tuple[float, Client]:
        client = await Client.connect(native_server.ws_url)
        try:
            await client.open_session(
                {"type": "realtime", "sglang": {"timebase": {"native_unit_ms": 200}}}
            )
            start = client.now()
            await client.send_audio(float_to_pcm16(np.concatenate([long_turn, silence(0.4)])))
            speech_end = start + len(long_turn) / 16000
            await client.send("session.close")  # no need to wait for the answer to the turn
            await client.until("session.closed", 10)
            return speech_end, client
        finally:
            await client.close()

    speech_end, client = asyncio.run(scenario())
    backchannels = [
        r
        for r in client.received
        if r.type == "response.output_audio_transcript.delta" and r.event["delta"] == "Mm-hmm."
    ]
    assert len(backchannels) == 1, [
        r.event["delta"] for r in client.received if "transcript" in r.type
    ]
    assert backchannels[0].t < speech_end, "the backchannel comes while the user still talks"
    done = client.of_type("response.done")
    assert done[0]["response"]["status_details"] == {"type": "completed", "reason": "stop"}


def test_response_cancel_ends_the_reply_at_the_next_unit(native_server, speech):
    async def scenario() -> Client:
        client = await Client.connect(native_server.ws_url)
        try:
            await client.open_session(
                {"type": "realtime", "sglang": {"timebase": {"native_unit_ms": 200}}}
            )
            seq = await client.send_audio(
                float_to_pcm16(np.concatenate([speech["long_question"], silence(0.1)]))
            )
            seq = await client.silence_until("response.output_audio.delta", seq)
            await client.send("response.cancel")
            await client.send_audio(float_to_pcm16(silence(0.6)), first_seq=seq)
            await client.until("response.done", 5)
            await client.send("session.close")
            await client.until("session.closed", 5)
            return client
        finally:
            await client.close()

    client = asyncio.run(scenario())
    done = client.of_type("response.done")[0]["response"]
    assert done["status_details"] == {"type": "cancelled", "reason": "interrupted"}
    kinds = client.types()
    after = kinds[kinds.index("response.done") :]
    assert "response.output_audio.delta" not in after


SEMANTIC_YAML = LAUNCH_YAML + (
    "session_nodes: {duplex: {turn_detection: semantic, eagerness: high}}\n"
)


def test_semantic_turn_detection_answers_a_spoken_question(tmp_path_factory, speech, tmp_path):
    """duplex-baseline with Smart Turn scoring each 200 ms pause (policy step 6): a spoken
    question is still answered and the native oracle passes."""
    audio = np.concatenate([silence(0.25), speech["question"], silence(3.0)])
    with launched_server(tmp_path_factory.mktemp("semantic"), SEMANTIC_YAML) as info:
        rec = asyncio.run(
            record_session(
                info.ws_url,
                Audio(audio, 16000),
                tmp_path / "s",
                sample_id="duplex/semantic",
                variant="main",
                profile=NATIVE,
                turn_detection=None,
                timeout_s=60,
            )
        )
    assert rec.status == "ok", rec.failure
    assert rec.verdict.status == "pass", rec.verdict.violations
    assert rec.responses.completed >= 1 and rec.responses.output_duration_s > 0.5


def test_semantic_turn_detection_needs_smart_turn_installed(monkeypatch):
    from fdb.errors import MissingExtraError
    from serving import models
    from serving.systems import resolve_system

    system = resolve_system(
        "duplex-baseline", overrides=[("session_nodes.duplex.turn_detection", "semantic")]
    )
    monkeypatch.setattr("fdb.models.turn.smart_turn_installed", lambda: False)
    with pytest.raises(MissingExtraError, match="pipecat-ai"):
        models.check_dependencies(system)
