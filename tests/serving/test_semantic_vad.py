"""semantic_vad on the real server: Smart Turn holds a pause in the middle of a sentence that
server_vad would have cut, the whole question is answered, and a bad eagerness is refused."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from benchmarks.support.realtime_client import Client
from tests.serving.conftest import _pcm16, silence


@pytest.fixture(scope="module")
def paused_question() -> bytes:
    """A question with a 0.8 s pause after "um," (longer than server_vad's 500 ms). Smart Turn
    scores the first part incomplete (p ~ 0.01) and the whole question complete (p ~ 0.98)."""
    from fdb.audio import resample
    from fdb.models.tts import PiperTts

    tts = PiperTts(deterministic=True)

    def say(text: str) -> np.ndarray:
        return resample(tts.synthesize(text), tts.rate, 16000)

    return _pcm16(
        np.concatenate(
            [
                silence(0.25),
                say("Could you tell me, um,"),
                silence(0.8),
                say("what is the capital of France?"),
                silence(1.5),
            ]
        )
    )


def test_semantic_vad_holds_a_mid_sentence_pause_and_answers(server, paused_question):
    async def scenario() -> tuple[Client, dict, dict]:
        client = await Client.connect(server.ws_url)
        await client.until("session.created", 5)
        await client.send(
            "session.update",
            session={
                "audio": {
                    "input": {"turn_detection": {"type": "semantic_vad", "eagerness": "bogus"}}
                }
            },
        )
        refused = (await client.until("error", 5)).event["error"]
        await client.send(
            "session.update",
            session={
                "type": "realtime",
                "sglang": {},
                "audio": {
                    "input": {"turn_detection": {"type": "semantic_vad", "eagerness": "medium"}}
                },
            },
        )  # sglang: the end, session.closed
        updated = (await client.until("session.updated", 5)).event
        # in real time: a held pause is timed on the input the turn detector has received, and
        # the resumed speech's start comes from the VAD, which may lag a faster input on a loaded
        # host (at 4x real time the pause once ran out before the VAD saw the speech resume)
        await client.send_audio(paused_question, interval_s=0.08)
        await client.until("input_audio_buffer.committed", 20)  # Smart Turn ended the turn
        await client.send("sglang.input_audio.end")  # the reply then leaves unpaced
        await client.until("response.done", 60)
        await client.send("session.close")
        await client.until("session.closed", 5)
        return client, refused, updated

    client, refused, updated = asyncio.run(scenario())
    assert refused["code"] == "invalid_turn_detection" and "eagerness" in refused["message"]
    turn = updated["session"]["audio"]["input"]["turn_detection"]
    assert turn == {
        "type": "semantic_vad",
        "eagerness": "medium",
        "interrupt_response": True,
        "create_response": True,
    }
    assert "semantic_vad" in updated["session"]["sglang"]["granted"]["turn_control"]
    types = client.types()
    assert types.count("input_audio_buffer.speech_started") == 1, types
    assert types.count("input_audio_buffer.committed") == 1
    transcript = client.of_type("conversation.item.input_audio_transcription.completed")[0][
        "transcript"
    ]
    assert "tell me" in transcript.lower() and "france" in transcript.lower()
    stopped = client.of_type("input_audio_buffer.speech_stopped")[0]["audio_end_ms"]
    assert stopped > 250 + 800 + 1500  # after the pause and the second half
    done = client.of_type("response.done")[0]["response"]
    assert done["status"] == "completed" and done["status_details"]["reason"] == "stop"
    assert types.count("error") == 1
