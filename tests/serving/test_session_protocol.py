"""Protocol rules of the realtime session: refused updates, bad input, timeouts, admission."""

from __future__ import annotations

import asyncio
import base64

import httpx
import pytest
import websockets

from benchmarks.support.realtime_client import Client

PACKET = base64.b64encode(bytes(2560)).decode("ascii")  # 80 ms of silence


async def _error(client: Client, timeout: float = 5.0) -> dict:
    return (await client.until("error", timeout)).event["error"]


def test_session_update_rules(server):
    """A session that asks for the session protocol (``sglang`` in its update) gets the
    Guide's strict rules; the GA default session is covered in test_openai_sdk.py."""

    async def scenario() -> None:
        client = await Client.connect(server.ws_url)
        created = (await client.until("session.created")).event
        assert created["session"]["object"] == "realtime.session"
        assert "sglang" not in created["session"]  # nothing asked for the extensions yet
        assert created["session"]["audio"]["input"]["format"] == {
            "type": "audio/pcm",
            "rate": 24000,
        }

        bad_id = await client.send(
            "session.update", session={"type": "realtime", "model": "other/model", "sglang": {}}
        )
        error = await _error(client)
        assert error["code"] == "model_mismatch" and error["event_id"] == bad_id

        await client.send(
            "session.update",
            session={
                "sglang": {},
                "audio": {"input": {"turn_detection": {"type": "far_field_vad"}}},
            },
        )
        assert (await _error(client))["code"] == "unsupported_turn_detection"
        await client.send(
            "session.update",
            session={
                "sglang": {},
                "audio": {"input": {"format": {"type": "audio/pcm", "rate": 8000}}},
            },
        )
        assert (await _error(client))["code"] == "unsupported_audio_format"
        await client.send("session.update", session={"voice": "alloy", "sglang": {}})
        error = await _error(client)
        assert error["code"] == "invalid_session" and error["param"] == "session.voice"
        await client.send(
            "session.update", session={"sglang": {}, "audio": {"output": {"voice": "alloy"}}}
        )
        assert (await _error(client))[
            "code"
        ] == "unsupported_voice"  # strict: refused, not a warning

        update_id = await client.send(
            "session.update",
            session={
                "type": "realtime",
                "model": "fdb/embedded-cascade",
                "sglang": {},
                "audio": {"input": {"turn_detection": {"type": "server_vad", "threshold": 0.6}}},
            },
        )
        updated = (await client.until("session.updated")).event
        assert updated["client_event_id"] == update_id
        audio = updated["session"]["audio"]
        assert audio["input"]["format"] == {
            "type": "audio/pcm",
            "rate": 16000,
        }  # the Guide's default
        assert audio["output"]["format"] == {"type": "audio/pcm", "rate": 24000}
        assert audio["input"]["turn_detection"]["threshold"] == 0.6
        assert audio["input"]["turn_detection"]["prefix_padding_ms"] == 300
        assert updated["session"]["sglang"]["granted"]["model"] == "fdb/embedded-cascade"

        await client.send("session.update", session={"audio": {"output": {"voice": "alloy"}}})
        error = await _error(client)
        assert error["code"] == "frozen_field" and "session field is frozen" in error["message"]
        await client.send("session.update", session={"sglang": {"sampling": {"top_p": 0.5}}})
        assert (await _error(client))["code"] == "unsupported_sampling"

        await client.send(
            "session.update",
            session={"instructions": "Be brief.", "sglang": {"sampling": {"temperature": 0.3}}},
        )
        hot = (await client.until("session.updated")).event["session"]
        assert (
            hot["instructions"] == "Be brief." and hot["sglang"]["sampling"]["temperature"] == 0.3
        )
        await client.send("session.close")
        await client.until("session.closed")

    asyncio.run(scenario())


def test_bad_input_is_refused_and_the_session_continues(server):
    async def scenario() -> None:
        client = await Client.connect(server.ws_url)
        await client.open_session()
        await client.send("input_audio_buffer.append", audio=PACKET, sglang={"seq": 0})
        await client.until("sglang.input_audio.accepted")
        skipped = await client.send("input_audio_buffer.append", audio=PACKET, sglang={"seq": 2})
        error = await _error(client)
        assert (
            error["code"] == "bad_seq"
            and error["event_id"] == skipped
            and error["param"] == "sglang.seq"
        )
        await client.send("input_audio_buffer.append", audio=PACKET, sglang={"seq": 1})
        assert (await client.until("sglang.input_audio.accepted")).event["accepted_end_ms"] == 160

        await client.send_raw("{not json")
        assert (await _error(client))["code"] == "invalid_json"
        deep = (
            "[" * 100_000 + "]" * 100_000
        )  # nested past the decoder's recursion limit (#25, defect 6)
        await client.send_raw(deep)
        assert (await _error(client))["code"] == "invalid_json"
        await client.send_raw('{"type": "session.update", "session": {"x": ' + deep + "}}")
        assert (await _error(client))["code"] == "invalid_json"
        await client.send_raw(b"\x00\x01")
        assert (await _error(client))["code"] == "binary_frame"
        await client.send("conversation.dance")
        error = await _error(client)
        assert error["code"] == "unknown_event" and "conversation.dance" in error["message"]
        await client.send("input_audio_buffer.append", audio="***", sglang={"seq": 2})
        assert (await _error(client))["code"] == "invalid_audio"
        await client.send("input_audio_buffer.append", sglang={"seq": 2})
        error = await _error(client)
        assert error["code"] == "invalid_event" and error["param"] == "audio"
        too_big = base64.b64encode(bytes(1_920_002)).decode("ascii")
        await client.send("input_audio_buffer.append", audio=too_big, sglang={"seq": 2})
        assert (await _error(client))["code"] == "input_too_large"
        await client.send("response.create")
        assert (await _error(client))["message"] == "manual turn commands are not granted"

        await client.send("sglang.input_audio.end")
        await client.until("sglang.input_audio.drained", 10)
        await client.send("input_audio_buffer.append", audio=PACKET, sglang={"seq": 2})
        assert (await _error(client))["code"] == "input_ended"
        units = client.of_type("sglang.unit.done")
        assert [u["sglang"]["media_time"]["duration_ms"] for u in units] == [160]
        await client.send("session.close")
        await client.until("session.closed")
        assert await client.wait_closed() == (1000, "client_closed")
        assert all(not e["sglang"]["fatal"] for e in client.of_type("error"))

    asyncio.run(scenario())


def test_session_update_timeout_and_idle_timeout(server):
    """launch.yaml sets session_update_timeout_s 1 and idle_timeout_s 2. A turn-based session is
    a GA session, active from session.created: one that never sends session.update is not
    closed for it (the native session is, test_duplex_baseline.py), only when it idles."""

    async def scenario() -> None:
        waiting = await Client.connect(server.ws_url)
        assert await waiting.wait_closed(5) == (1008, "idle_timeout")
        assert [e["error"]["code"] for e in waiting.of_type("error")] == ["idle_timeout"]

        idle = await Client.connect(server.ws_url)
        await idle.open_session()
        assert await idle.wait_closed(6) == (1008, "idle_timeout")
        assert idle.of_type("error")[0]["error"]["code"] == "idle_timeout"

    asyncio.run(scenario())


async def _sessions_down_to(server, count: int, timeout_s: float = 15.0) -> None:
    """Until /health counts at most ``count`` open sessions (the server is shared: an earlier
    test's session may still be closing); a session that never closes fails here."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    async with httpx.AsyncClient() as http:
        while (
            open_now := (await http.get(f"{server.base_url}/health")).json()["sessions"]
        ) > count:
            assert asyncio.get_running_loop().time() < deadline, (
                f"{open_now} sessions still open after {timeout_s} s"
            )
            await asyncio.sleep(0.05)


def test_max_sessions_refuses_the_upgrade_with_503(server):
    async def scenario() -> None:
        await _sessions_down_to(server, 0)
        first = await Client.connect(server.ws_url)
        second = await Client.connect(server.ws_url)
        await first.open_session()
        await second.open_session()
        with pytest.raises(websockets.InvalidStatus) as refused:
            await websockets.connect(server.ws_url)
        assert refused.value.response.status_code == 503
        await first.send("session.close")
        await first.wait_closed()
        await _sessions_down_to(server, 1)
        third = await Client.connect(server.ws_url)
        await third.until("session.created")
        for client in (second, third):
            await client.close()

    asyncio.run(scenario())


def test_24khz_input_is_counted_on_the_clients_timeline_to_the_last_unit(server):
    """A session with the extensions and 24 kHz input: 1 s sent in 80 ms appends is received
    as 1000 ms by every receipt, the end and the drain, and its 200 ms units cover the whole
    second, the last one included (the resampler's held tail is flushed at the end)."""
    step = 24000 * 80 // 1000 * 2  # 80 ms of 24 kHz PCM16

    async def scenario() -> Client:
        client = await Client.connect(server.ws_url)
        await client.open_session(
            {
                "type": "realtime",
                "audio": {
                    "input": {
                        "format": {"type": "audio/pcm", "rate": 24000},
                        "turn_detection": None,
                    }
                },
            }
        )
        pcm = bytes(24000 * 2)  # 1 s of silence
        for seq, offset in enumerate(range(0, len(pcm), step)):
            chunk = base64.b64encode(pcm[offset : offset + step]).decode("ascii")
            await client.send("input_audio_buffer.append", audio=chunk, sglang={"seq": seq})
        for _ in range(13):
            await client.until("sglang.input_audio.accepted", 5)
        await client.send("sglang.input_audio.end")
        await client.until("sglang.input_audio.drained", 15)
        await client.close()
        return client

    client = asyncio.run(scenario())
    receipts = [e["accepted_end_ms"] for e in client.of_type("sglang.input_audio.accepted")]
    assert receipts == [min(80 * (k + 1), 1000) for k in range(13)]
    assert client.of_type("sglang.input_audio.ended")[0]["accepted_end_ms"] == 1000
    assert client.of_type("sglang.input_audio.drained")[0]["accepted_end_ms"] == 1000
    units = [u["sglang"]["media_time"] for u in client.of_type("sglang.unit.done")]
    assert [u["t_start_ms"] for u in units] == [0, 200, 400, 600, 800]
    assert sum(u["duration_ms"] for u in units) == 1000
