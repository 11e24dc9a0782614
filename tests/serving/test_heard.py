"""What the history keeps of a reply, observed through the protocol on the real server:
``sglang.response.progress`` boundaries, ``conversation.item.truncate`` and
``sglang.response.heard``, after a barge-in and after a client's truncate."""

from __future__ import annotations

import asyncio
import base64

import numpy as np

from benchmarks.support.realtime_client import Client
from tests.serving.conftest import _pcm16, silence

LEAD_MS = 1000  # max_output_lead_ms of the system
SLACK_MS = 400  # event-loop and socket delays on a loaded 2-core machine


def _of_response(client: Client, type_: str, response_id: str) -> list[dict]:
    return [e for e in client.of_type(type_) if e.get("response_id") == response_id]


def _check_progress(client: Client, response_id: str) -> list[dict]:
    """Boundaries grow, each at the end of a chunk's audio, the last at the end of all of it."""
    progress = _of_response(client, "sglang.response.progress", response_id)
    deltas = _of_response(client, "response.output_audio.delta", response_id)
    audio_ms = sum(len(base64.b64decode(d["delta"])) for d in deltas) / 48
    assert progress, "no sglang.response.progress"
    ends = [p["text_end"] for p in progress]
    times = [p["audio_ms"] for p in progress]
    assert ends == sorted(ends) and times == sorted(times) and ends[0] > 0
    assert times[-1] <= audio_ms + 1e-3
    return progress


def test_truncate_keeps_the_sentences_heard(server, speech):
    """A long reply delivered at once (the input ended): truncating between its first two
    boundaries keeps the first chunk; past the audio sent it is clamped and keeps all; an
    unknown item is item_not_found and the session goes on."""
    pcm = _pcm16(np.concatenate([silence(0.25), speech["long_question"], silence(0.8)]))

    async def scenario() -> tuple[Client, dict]:
        client = await Client.connect(server.ws_url)
        await client.open_session()
        await client.send_audio(pcm, interval_s=0.01)
        await client.send("sglang.input_audio.end")
        done = (await client.until("response.done", 60)).event["response"]
        await client.until("sglang.input_audio.drained", 10)
        progress = _check_progress(client, done["id"])
        assert len(progress) >= 2, progress
        item_id = done["output"][0]["id"]
        middle = int(progress[0]["audio_ms"] + progress[1]["audio_ms"]) // 2
        first_id = await client.send(
            "conversation.item.truncate", item_id=item_id, content_index=0, audio_end_ms=middle
        )
        cut = [
            (await client.until(t, 5)).event
            for t in ("conversation.item.truncated", "sglang.response.heard")
        ]
        await client.send(
            "conversation.item.truncate", item_id=item_id, content_index=0, audio_end_ms=10_000_000
        )
        beyond = [
            (await client.until(t, 5)).event
            for t in ("conversation.item.truncated", "sglang.response.heard")
        ]
        unknown_id = await client.send(
            "conversation.item.truncate",
            item_id="item_never_sent",
            content_index=0,
            audio_end_ms=100,
        )
        unknown = (await client.until("error", 5)).event["error"]
        await client.send(
            "conversation.item.truncate", item_id=item_id, content_index=1, audio_end_ms=100
        )
        bad_index = (await client.until("error", 5)).event["error"]
        await client.send("session.close")
        await client.until("session.closed", 5)
        return client, {
            "done": done,
            "progress": progress,
            "middle": middle,
            "cut": cut,
            "beyond": beyond,
            "unknown": unknown,
            "unknown_id": unknown_id,
            "first_id": first_id,
            "bad_index": bad_index,
        }

    client, got = asyncio.run(scenario())
    transcript = got["done"]["output"][0]["content"][0]["transcript"]
    assert got["done"]["status"] == "completed"
    progress, (truncated, heard) = got["progress"], got["cut"]
    assert truncated == {
        **truncated,
        "item_id": got["done"]["output"][0]["id"],
        "content_index": 0,
        "audio_end_ms": got["middle"],
    }
    assert heard["response_id"] == got["done"]["id"]
    assert (
        heard["text_end"] == progress[0]["text_end"]
        and heard["audio_ms"] == progress[0]["audio_ms"]
    )
    assert heard["text"] == transcript[: heard["text_end"]] and len(heard["text"]) < len(transcript)
    truncated, heard = got["beyond"]
    sent_ms = (
        sum(
            len(base64.b64decode(d["delta"])) for d in client.of_type("response.output_audio.delta")
        )
        / 48
    )
    assert truncated["audio_end_ms"] == int(sent_ms)  # clamped to the audio sent
    assert (
        heard["text_end"] == len(transcript) == progress[-1]["text_end"]
        and heard["text"] == transcript
    )
    assert (
        got["unknown"]["code"] == "item_not_found"
        and got["unknown"]["event_id"] == got["unknown_id"]
    )
    assert (
        got["bad_index"]["code"] == "invalid_value" and got["bad_index"]["param"] == "content_index"
    )
    assert len(client.of_type("error")) == 2


def test_barge_in_keeps_only_what_was_played(server, speech):
    """Real-time input: the user speaks over a long reply once its first chunk has played. The
    reply is cancelled and ``sglang.response.heard`` keeps the boundaries whose audio had played
    by the wall clock when the speech started, not all the audio delivered ahead of it."""
    question = _pcm16(np.concatenate([silence(0.25), speech["long_question"], silence(0.6)]))
    barge_in = _pcm16(np.concatenate([speech["barge_in"], silence(1.0)]))

    async def scenario() -> Client:
        client = await Client.connect(server.ws_url)
        await client.open_session()
        seq = await client.send_audio(question)
        seq = await client.silence_until("sglang.response.progress", seq, limit_s=24)
        # The answer to the barge-in may be short (a hot update applies from the next reply).
        await client.send(
            "session.update", session={"sglang": {"sampling": {"max_new_tokens_per_unit": 8}}}
        )
        seq = await client.send_audio(_pcm16(silence(1.2)), first_seq=seq)  # the first chunk plays
        await client.send_audio(barge_in, first_seq=seq)
        await client.send("sglang.input_audio.end")
        await client.until("sglang.input_audio.drained", 60)
        await client.send("session.close")
        await client.until("session.closed", 5)
        return client

    client = asyncio.run(scenario())
    assert "error" not in client.types()
    first = client.of_type("response.done")[0]["response"]
    assert first["status"] == "cancelled" and first["status_details"]["reason"] == "interrupted"
    progress = _check_progress(client, first["id"])
    heard = _of_response(client, "sglang.response.heard", first["id"])
    assert len(heard) == 1, client.types()
    heard = heard[0]
    sent_text = "".join(
        d["delta"]
        for d in _of_response(client, "response.output_audio_transcript.delta", first["id"])
    )
    assert heard["text"] == sent_text[: heard["text_end"]]
    assert heard["text_end"] in [p["text_end"] for p in progress]  # the first chunk played
    # Played by the wall clock when the speech was detected: from the first audio to the
    # interruption, which the server sends as speech_started right after it cancels the reply.
    first_audio = next(r.t for r in client.received if r.type == "response.output_audio.delta")
    started = [r.t for r in client.received if r.type == "input_audio_buffer.speech_started"][1]
    played_ms = (started - first_audio) * 1000
    assert heard["audio_ms"] <= played_ms + SLACK_MS
    assert all(
        p["text_end"] <= heard["text_end"]
        for p in progress
        if p["audio_ms"] <= played_ms - SLACK_MS
    )
    types = client.types()
    assert types.index("sglang.response.heard") < types.index("response.done")
