"""Every server event of real sessions validates: standard ones against the ``openai`` SDK's
GA ``RealtimeServerEvent`` union (a discriminated TypeAdapter), extension ones against our own
models (``fdb.dialects.events.EXTENSION_EVENTS``). A type known to neither fails.

Values the Full-Duplex Guide prescribes outside the SDK's literal types are the only deviations
allowed, each at its one path (docs/formats.md, "Realtime extension events"):
``response.status_details.reason`` ``stop``, ``empty_turn`` and ``interrupted`` (the SDK knows
``turn_detected``, ``client_cancelled``, ``max_output_tokens`` and ``content_filter``) and
``session.audio.input.format.rate`` 16000 (the SDK's PCM is 24 kHz only).
"""

from __future__ import annotations

import asyncio
import copy
import typing
from typing import Annotated, Any, Union

import numpy as np
import pytest
from openai.types.realtime.realtime_server_event import RealtimeServerEvent
from pydantic import Field, TypeAdapter, ValidationError

from benchmarks.support.realtime_client import Client
from fdb.dialects.events import EXTENSION_EVENTS
from tests.serving.conftest import _pcm16, silence

_MEMBERS = typing.get_args(typing.get_args(RealtimeServerEvent)[0])
SDK_EVENT = TypeAdapter(Annotated[Union[_MEMBERS], Field(discriminator="type")])  # noqa: UP007
SDK_TYPES = {typing.get_args(m.model_fields["type"].annotation)[0] for m in _MEMBERS}
# (event types, path, {the Guide's value: an SDK value standing in for it, None: left out})
GUIDE_DEVIATIONS = [
    (
        {"response.created", "response.done"},
        ("response", "status_details", "reason"),
        {"interrupted": "client_cancelled", "stop": None, "empty_turn": None},
    ),
    ({"session.updated"}, ("session", "audio", "input", "format", "rate"), {16000: 24000}),
]


SHORT = {"sampling": {"max_new_tokens_per_unit": 12}}  # short replies keep the test fast


def _standard(event: dict[str, Any]) -> dict[str, Any]:
    """``event`` with the Guide's documented values replaced by SDK ones (only at their path)."""
    event = copy.deepcopy(event)
    for types, path, values in GUIDE_DEVIATIONS:
        node = event if event["type"] in types else None
        for key in path[:-1]:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict) and node.get(path[-1]) in values:
            if (sdk := values[node[path[-1]]]) is None:
                del node[path[-1]]
            else:
                node[path[-1]] = sdk
    return event


def check_event(event: dict[str, Any]) -> None:
    kind = event["type"]
    if kind in SDK_TYPES:
        try:
            SDK_EVENT.validate_python(_standard(event))
        except ValidationError as exc:
            pytest.fail(f"{kind} does not validate against the openai SDK: {exc}\n{event}")
    elif kind in EXTENSION_EVENTS:
        model = EXTENSION_EVENTS[kind]
        assert model.model_validate(event).model_dump(mode="json") == event, kind
    else:
        pytest.fail(f"{kind} is neither an openai SDK event nor a registered extension event")


def test_the_checker_refuses_what_it_should():
    with pytest.raises(pytest.fail.Exception, match="neither"):
        check_event({"type": "sglang.made_up", "event_id": "e"})
    with pytest.raises(pytest.fail.Exception, match="openai SDK"):  # a required field missing
        check_event({"type": "conversation.item.truncated", "event_id": "e", "item_id": "i"})
    with pytest.raises(pytest.fail.Exception, match="openai SDK"):  # a deviation off its path
        check_event(
            {"type": "response.done", "event_id": "e", "response": {"status": "interrupted"}}
        )


async def _errors_question_text_truncate(url: str, question: bytes) -> Client:
    """Malformed JSON, an unknown event, a binary frame and an odd-length append before the
    session.update (the GA default session takes audio at once);
    a spoken question (audio reply), then the same question with a text-only reply; truncates
    (a good one and an unknown item); the end of input, drain and close."""
    client = await Client.connect(url)
    await client.until("session.created", 5)
    await client.send_raw("{nope")
    await client.send("made.up.event")
    await client.send_raw(b"\x00\x01")
    await client.send("input_audio_buffer.append", audio="AAAA", sglang={"seq": 0})
    for _ in range(4):
        await client.until("error", 5)
    await client.send(
        "session.update",
        session={
            "type": "realtime",
            "sglang": SHORT,
            "audio": {"input": {"turn_detection": {"type": "server_vad"}}},
        },
    )
    await client.until("session.updated", 5)
    seq = await client.send_audio(question, interval_s=0.02)
    audio_done = (await client.until("response.done", 60)).event["response"]
    await client.send("session.update", session={"output_modalities": ["text"]})
    await client.until("session.updated", 5)
    await client.send_audio(question, first_seq=seq, interval_s=0.02)
    await client.until("response.done", 60)
    await client.send(
        "conversation.item.truncate",
        item_id=audio_done["output"][0]["id"],
        content_index=0,
        audio_end_ms=500,
    )
    await client.until("sglang.response.heard", 5)
    await client.send(
        "conversation.item.truncate", item_id="item_unknown", content_index=0, audio_end_ms=1
    )
    await client.until("error", 5)
    await client.send("sglang.input_audio.end")
    await client.until("sglang.input_audio.drained", 30)
    await client.send("session.close")
    await client.wait_closed()
    return client


async def _commit_and_cancel(url: str, question: bytes) -> Client:
    client = await Client.connect(url)
    await client.open_session({"sglang": SHORT, "audio": {"input": {"turn_detection": None}}})
    await client.send_audio(question, interval_s=0.02)
    await client.send("input_audio_buffer.commit")
    await client.send("input_audio_buffer.commit")  # nothing left to commit: an error
    await client.until("response.output_audio.delta", 60)
    await client.send("response.cancel")
    await client.until("response.done", 10)
    await client.send("sglang.input_audio.end")
    await client.until("sglang.input_audio.drained", 30)
    await client.send("session.close")
    await client.wait_closed()
    return client


async def _barge_in(url: str, question: bytes, barge_in: bytes) -> Client:
    client = await Client.connect(url)
    await client.open_session(
        {"sglang": SHORT, "audio": {"input": {"turn_detection": {"type": "server_vad"}}}}
    )
    seq = await client.send_audio(question, interval_s=0.02)
    seq = await client.silence_until("response.output_audio.delta", seq)
    await client.send_audio(barge_in, first_seq=seq, interval_s=0.04)
    await client.send("sglang.input_audio.end")
    await client.until("sglang.input_audio.drained", 60)
    await client.send("session.close")
    await client.wait_closed()
    return client


async def _timeout(url: str) -> Client:
    client = await Client.connect(
        url
    )  # no session.update: a GA session, closed when it idles (2 s)
    await client.wait_closed()
    return client


def test_every_server_event_validates(server, speech, question_pcm):
    long_question = _pcm16(np.concatenate([silence(0.25), speech["long_question"], silence(0.8)]))
    barge_in = _pcm16(np.concatenate([speech["barge_in"], silence(1.0)]))

    async def scenario() -> list[Client]:
        # the session that idles out only waits: it runs beside the first one (max_sessions 2)
        idle = asyncio.create_task(_timeout(server.ws_url))
        return [
            await _errors_question_text_truncate(server.ws_url, question_pcm),
            await _commit_and_cancel(server.ws_url, question_pcm),
            await _barge_in(server.ws_url, long_question, barge_in),
            await idle,
        ]

    clients = asyncio.run(scenario())
    events = [e.event for client in clients for e in client.received]
    for event in events:
        check_event(event)
    seen = {event["type"] for event in events}
    expected = {
        "session.created",
        "session.updated",
        "session.closed",
        "error",
        "sglang.input_audio.accepted",
        "sglang.input_audio.ended",
        "sglang.input_audio.drained",
        "sglang.unit.done",
        "input_audio_buffer.speech_started",
        "input_audio_buffer.speech_stopped",
        "input_audio_buffer.committed",
        "conversation.item.input_audio_transcription.completed",
        "response.created",
        "response.output_audio_transcript.delta",
        "response.output_audio.delta",
        "response.output_audio.done",
        "response.output_audio_transcript.done",
        "response.output_text.delta",
        "response.output_text.done",
        "response.done",
        "sglang.response.progress",
        "conversation.item.truncated",
        "sglang.response.heard",
        "conversation.item.added",
        "conversation.item.done",
        "response.output_item.added",
        "response.output_item.done",
        "response.content_part.added",
        "response.content_part.done",
    }
    assert expected <= seen, expected - seen
    codes = [e["error"]["code"] for e in events if e["type"] == "error"]
    assert {
        "invalid_json",
        "unknown_event",
        "binary_frame",
        "invalid_audio",
        "item_not_found",
        "input_audio_buffer_commit_empty",
        "idle_timeout",
    } <= set(codes), codes
    reasons = {
        e["response"]["status_details"]["reason"] for e in events if e["type"] == "response.done"
    }
    assert "interrupted" in reasons and "stop" in reasons
