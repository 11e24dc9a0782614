"""The bundled server is an OpenAI Realtime server to the unmodified ``openai`` SDK: its GA client
(``client.realtime.connect``) and its beta client (``client.beta.realtime.connect``, which sends
``OpenAI-Beta: realtime=v1``), each sending 24 kHz PCM16 as the SDK's types have it. Every server
event is validated against the SDK's own server-event union of that dialect (a discriminated
TypeAdapter, no deviation allowed), and the GA flows behave as OpenAI documents them: the item
lifecycle announces every item before a delta names it, barge-in and response.cancel end a reply
with ``turn_detected`` / ``client_cancelled``, ``interrupt_response`` false lets it play on,
truncate answers ``conversation.item.truncated``, a manual turn (turn_detection null) is answered
at ``response.create``, and a text item too. No ``sglang.*`` event reaches a session that did not
ask for them.

One deviation is allowed, at one path: the beta ``Session.model`` is a literal of OpenAI's model
names, so a beta session.created / session.updated naming this deployment's model is validated
with that one value swapped for an SDK name.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
import typing
from typing import Annotated, Any, Union

import numpy as np
import pytest
from openai import AsyncOpenAI
from openai.types.beta.realtime.realtime_server_event import RealtimeServerEvent as BetaServerEvent
from openai.types.realtime.realtime_server_event import RealtimeServerEvent as GaServerEvent
from pydantic import Field, TypeAdapter, ValidationError

from fdb.audio import float_to_pcm16, resample


def _adapter(union: Any) -> TypeAdapter:
    members = typing.get_args(typing.get_args(union)[0])
    return TypeAdapter(Annotated[Union[members], Field(discriminator="type")])  # noqa: UP007


GA = _adapter(GaServerEvent)
BETA = _adapter(BetaServerEvent)
PACKET_S = 0.08
SHORT = 12  # max_output_tokens: short replies keep the test fast
# max_output_tokens of the reply that plays on through a barge-in: some 9 s of audio, more than
# twice the barge-in (60 tokens took 18 s)
KEPT_TOKENS = 30


def _pcm24(*parts: np.ndarray) -> bytes:
    """16 kHz float parts -> one 24 kHz PCM16 stream (what the SDK's session format declares)."""
    return float_to_pcm16(resample(np.concatenate(parts), 16000, 24000))


def _quiet(seconds: float) -> np.ndarray:
    return np.zeros(int(seconds * 16000), np.float32)


class Session:
    """An SDK connection with every received event validated and kept."""

    def __init__(self, conn: Any, adapter: TypeAdapter, beta: bool = False) -> None:
        self.beta = beta
        self.conn, self.adapter = conn, adapter
        self.events: list[dict[str, Any]] = []
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        while True:
            raw = await self.conn.recv_bytes()
            event = json.loads(raw)
            checked = event
            if self.beta and event.get("type") in ("session.created", "session.updated"):
                checked = {**event, "session": {**event["session"], "model": "gpt-realtime"}}
            try:
                self.adapter.validate_python(checked)
            except ValidationError as exc:
                pytest.fail(
                    f"{event.get('type')} does not validate against the SDK's union: {exc}\n{event}"
                )
            self.events.append(event)

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == kind]

    async def until(self, kind: str, count: int = 1, timeout: float = 40.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while len(self.of(kind)) < count:
            if self._reader.done():
                self._reader.result()
                pytest.fail(f"the connection ended before {count} {kind}")
            if time.monotonic() > deadline:
                pytest.fail(
                    f"no {kind} (x{count}) within {timeout} s; "
                    f"got {[e['type'] for e in self.events]}"
                )
            await asyncio.sleep(0.02)
        return self.of(kind)[count - 1]

    async def send_audio(self, pcm: bytes, interval_s: float = PACKET_S) -> None:
        step = int(24000 * PACKET_S) * 2
        start = time.monotonic()
        for k, offset in enumerate(range(0, len(pcm), step)):
            delay = start + k * interval_s - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            await self.conn.input_audio_buffer.append(
                audio=base64.b64encode(pcm[offset : offset + step]).decode()
            )

    async def close(self) -> None:
        self._reader.cancel()
        await asyncio.gather(self._reader, return_exceptions=True)


def _client(server) -> AsyncOpenAI:
    http = server.ws_url.replace("ws://", "http://").removesuffix("/realtime")
    return AsyncOpenAI(
        api_key="sk-not-used", base_url=http, websocket_base_url=http.replace("http://", "ws://")
    )


def _ga_session(turn_detection: dict | None, **extra: Any) -> dict[str, Any]:
    return {
        "type": "realtime",
        "max_output_tokens": SHORT,
        "audio": {
            "input": {
                "format": {"type": "audio/pcm", "rate": 24000},
                "turn_detection": turn_detection,
            }
        },
        **extra,
    }


def _announced_before_use(events: list[dict[str, Any]]) -> None:
    """Every item a delta or part names was announced (output_item.added) before it."""
    announced: set[str] = set()
    for event in events:
        if event["type"] == "response.output_item.added":
            announced.add(event["item"]["id"])
        elif event["type"].startswith(
            (
                "response.output_audio",
                "response.content_part",
                "response.audio",
                "response.output_text",
                "response.text",
            )
        ):
            assert event["item_id"] in announced, f"{event['type']} names an item never added"


def test_the_openai_sdk_ga_client_talks_to_the_bundled_server(server, speech):
    question = _pcm24(_quiet(0.25), speech["question"], _quiet(1.5))

    async def scenario() -> Session:
        async with _client(server).realtime.connect(model="fdb/embedded-cascade") as conn:
            s = Session(conn, GA)
            created = await s.until("session.created")
            assert created["session"]["audio"]["input"]["format"] == {
                "type": "audio/pcm",
                "rate": 24000,
            }
            await conn.session.update(
                session=_ga_session(
                    {"type": "server_vad", "silence_duration_ms": 500},
                    tools=[
                        {"type": "function", "name": "lookup", "parameters": {"type": "object"}}
                    ],
                    audio={
                        "input": {
                            "format": {"type": "audio/pcm", "rate": 24000},
                            "turn_detection": {"type": "server_vad", "silence_duration_ms": 500},
                        },
                        "output": {"voice": "alloy"},
                    },
                )
            )
            await s.until("session.updated")
            await s.send_audio(question)
            await s.until("response.done", timeout=60)
            await s.close()
            return s

    s = asyncio.run(scenario())
    kinds = [e["type"] for e in s.events]
    assert not [k for k in kinds if k.startswith("sglang.")], "extension events in a GA session"
    warnings = {e["error"]["param"] for e in s.of("error") if e["error"]["type"] == "warning"}
    assert warnings == {"session.tools", "session.audio.output.voice"}
    assert not [e for e in s.of("error") if e["error"]["type"] != "warning"]
    transcript = s.of("conversation.item.input_audio_transcription.completed")[0][
        "transcript"
    ].lower()
    assert "capital" in transcript and "france" in transcript  # 24 kHz read as 24 kHz
    audio = sum(len(base64.b64decode(e["delta"])) for e in s.of("response.output_audio.delta"))
    assert audio > 24000  # more than 0.5 s of reply audio
    order = [
        k
        for k in kinds
        if k
        in (
            "input_audio_buffer.committed",
            "conversation.item.added",
            "conversation.item.done",
            "response.created",
            "response.output_item.added",
            "response.content_part.added",
            "response.content_part.done",
            "response.output_item.done",
            "response.done",
        )
    ]
    assert order == [
        "input_audio_buffer.committed",
        "conversation.item.added",
        "conversation.item.done",
        "response.created",
        "response.output_item.added",
        "conversation.item.added",
        "response.content_part.added",
        "response.content_part.done",
        "response.output_item.done",
        "conversation.item.done",
        "response.done",
    ]
    _announced_before_use(s.events)
    done = s.of("response.done")[0]["response"]
    assert done["status"] == "completed" and done["status_details"]["reason"] is None
    user, assistant = (e["item"] for e in s.of("conversation.item.added"))
    assert s.of("conversation.item.added")[1]["previous_item_id"] == user["id"]


def test_ga_cancel_truncate_and_barge_in(server, speech):
    long_question = _pcm24(_quiet(0.25), speech["long_question"], _quiet(0.8))
    barge = _pcm24(speech["barge_in"], _quiet(1.0))
    vad = {"type": "server_vad", "silence_duration_ms": 500}

    async def one(interrupt: bool | None) -> Session:
        async with _client(server).realtime.connect(model="fdb/embedded-cascade") as conn:
            s = Session(conn, GA)
            td = vad if interrupt is None else {**vad, "interrupt_response": interrupt}
            tokens = KEPT_TOKENS if interrupt is False else 60
            await conn.session.update(session={**_ga_session(td), "max_output_tokens": tokens})
            await s.until("session.updated")
            await s.send_audio(long_question)
            while not s.of(
                "response.output_audio.delta"
            ):  # keep the input live until the reply speaks
                await s.send_audio(float_to_pcm16(np.zeros(1920, np.float32)))
                await asyncio.sleep(PACKET_S)
            if interrupt is None:  # the client stops the reply itself, then says what it played
                await conn.response.cancel()
                done = await s.until("response.done")
                item = done["response"]["output"][0]["id"]
                await conn.conversation.item.truncate(
                    item_id=item, content_index=0, audio_end_ms=40
                )
                await s.until("conversation.item.truncated")
                await conn.conversation.item.truncate(
                    item_id=item, content_index=0, audio_end_ms=10**6
                )
                await s.until("error")
                await conn.response.cancel()  # nothing in progress now
                await s.until("error", 2)
            else:
                await s.send_audio(barge)
                await s.until("response.done", timeout=60)
                await asyncio.sleep(0.5)
            await s.close()
            return s

    async def scenario() -> list[Session]:
        # The reply that plays on takes some 9 s, nearly all of it real-time playback: the other
        # two sessions, one after the other, run beside it (the server's max_sessions is 2).
        kept = asyncio.create_task(one(False))
        cancelled = await one(None)
        barged = await one(True)
        return [cancelled, barged, await kept]

    cancelled, barged, kept = asyncio.run(scenario())
    first = cancelled.of("response.done")[0]["response"]
    assert (first["status"], first["status_details"]["reason"]) == ("cancelled", "client_cancelled")
    truncated = cancelled.of("conversation.item.truncated")[0]
    assert (truncated["audio_end_ms"], truncated["content_index"]) == (40, 0)
    codes = [e["error"]["code"] for e in cancelled.of("error")]
    assert codes == ["invalid_value", "response_cancel_not_active"]
    first = barged.of("response.done")[0]["response"]
    assert (first["status"], first["status_details"]["reason"]) == ("cancelled", "turn_detected")
    assert kept.of("input_audio_buffer.speech_started")[1:], "the barge-in was not heard"
    kinds = [e["type"] for e in kept.events]
    heard = [k for k, kind in enumerate(kinds) if kind == "input_audio_buffer.speech_started"][1]
    assert heard < kinds.index("response.done"), "the barge-in was heard after the reply ended"
    first = kept.of("response.done")[0]["response"]
    assert first["status"] == "completed", "interrupt_response false must let the reply play on"
    for s in (cancelled, barged, kept):
        _announced_before_use(s.events)


def test_ga_manual_turns_and_text_items(server, speech):
    question = _pcm24(_quiet(0.25), speech["question"], _quiet(0.3))

    async def scenario() -> Session:
        async with _client(server).realtime.connect(model="fdb/embedded-cascade") as conn:
            s = Session(conn, GA)
            await conn.session.update(session=_ga_session(None))
            await s.until("session.updated")
            await s.send_audio(question, interval_s=0.0)
            await conn.input_audio_buffer.commit()
            await s.until("input_audio_buffer.committed")
            await asyncio.sleep(1.0)
            assert not s.of("response.created"), "a GA manual turn waits for response.create"
            await conn.response.create()
            await s.until("response.done", timeout=60)
            await conn.conversation.item.create(
                item={
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": "Say hello."}],
                }
            )
            await s.until("conversation.item.done", 3)
            await conn.response.create()
            await s.until("response.done", 2, timeout=60)
            await conn.input_audio_buffer.append(audio=base64.b64encode(bytes(3840)).decode())
            await conn.input_audio_buffer.clear()
            await s.until("input_audio_buffer.cleared")
            await s.close()
            return s

    s = asyncio.run(scenario())
    assert not s.of("error"), s.of("error")
    replies = s.of("response.done")
    assert [r["response"]["status"] for r in replies] == ["completed", "completed"]
    assert all(r["response"]["output"] for r in replies), "each response.create got a spoken reply"
    text_item = s.of("conversation.item.added")[2]["item"]
    assert text_item["content"] == [{"type": "input_text", "text": "Say hello."}]


def test_the_openai_sdk_beta_client_gets_the_beta_dialect(server, speech):
    question = _pcm24(_quiet(0.25), speech["question"], _quiet(1.5))

    async def scenario() -> Session:
        async with _client(server).beta.realtime.connect(model="fdb/embedded-cascade") as conn:
            s = Session(conn, BETA, beta=True)
            await s.until("session.created")
            await conn.session.update(
                session={
                    "modalities": ["text", "audio"],
                    "input_audio_format": "pcm16",
                    "output_audio_format": "pcm16",
                    "turn_detection": {"type": "server_vad", "silence_duration_ms": 500},
                    "max_response_output_tokens": SHORT,
                    "temperature": 0.8,
                }
            )
            await s.until("session.updated")
            await s.send_audio(question)
            await s.until("response.done", timeout=60)
            await s.close()
            return s

    s = asyncio.run(scenario())
    kinds = {e["type"] for e in s.events}
    assert {
        "response.audio.delta",
        "response.audio_transcript.delta",
        "response.audio.done",
        "conversation.item.created",
        "response.output_item.added",
    } <= kinds
    assert not {k for k in kinds if k.startswith(("sglang.", "response.output_audio"))} | (
        kinds & {"conversation.item.added", "conversation.item.done"}
    )
    session = s.of("session.updated")[0]["session"]
    assert (
        session["input_audio_format"] == "pcm16"
        and session["turn_detection"]["type"] == "server_vad"
    )
    assert session["temperature"] == 0.8
    assert (
        "capital"
        in s.of("conversation.item.input_audio_transcription.completed")[0]["transcript"].lower()
    )
    _announced_before_use(s.events)
