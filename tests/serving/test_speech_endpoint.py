"""POST /v1/audio/speech on the real server (Piper voice), and the pass-through to an
OpenAI-compatible speech service (a small local HTTP server standing in for it); the
reply_delay_ms handicap on both and on a realtime reply (a real server launched with it)."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import numpy as np
import pytest
import soundfile as sf
from fastapi.testclient import TestClient

from benchmarks.support.realtime_client import Client
from serving.app import create_app
from serving.systems import SpeechService, SystemConfig
from tests.serving.conftest import LAUNCH_YAML, _pcm16, launched_server, silence

TEXT = "Hello there. This is the second sentence."
DELAY_S = 0.6  # reply_delay_ms of the delayed server


def _post(server, body: dict, timeout: float = 60.0) -> httpx.Response:
    return httpx.post(f"{server.base_url}/v1/audio/speech", json=body, timeout=timeout)


def test_stream_raw_pcm_declares_rate_and_sends_each_sentence(server):
    body = {"input": TEXT, "stream": True, "stream_format": "audio", "response_format": "pcm"}
    arrivals = []
    with httpx.stream(
        "POST", f"{server.base_url}/v1/audio/speech", json=body, timeout=60.0
    ) as reply:
        assert reply.status_code == 200
        assert reply.headers["content-type"].startswith("audio/pcm")
        assert reply.headers["x-sample-rate"] == "22050"
        assert reply.headers["x-channels"] == "1" and reply.headers["x-bit-depth"] == "16"
        for data in reply.iter_bytes():
            arrivals.append(len(data))
    total = sum(arrivals)
    assert total % 2 == 0
    assert 1.0 < total / 2 / 22050 < 8.0
    assert len(arrivals) >= 2, "two sentences should come as at least two chunks"


def test_sse_stream_ends_with_done(server):
    reply = _post(server, {"input": TEXT, "stream": True, "stream_format": "sse"})
    assert reply.status_code == 200
    assert reply.headers["content-type"].startswith("text/event-stream")
    events = [json.loads(line[5:]) for line in reply.text.splitlines() if line.startswith("data:")]
    assert [e["type"] for e in events][-1] == "speech.audio.done"
    deltas = [base64.b64decode(e["audio"]) for e in events if e["type"] == "speech.audio.delta"]
    assert len(deltas) >= 2
    assert events[-1]["usage"]["audio_bytes"] == sum(len(d) for d in deltas)


def test_whole_wav_and_refusals(server):
    reply = _post(server, {"input": "Good morning.", "response_format": "wav", "voice": "default"})
    assert reply.status_code == 200 and reply.headers["content-type"] == "audio/wav"
    data, rate = sf.read(io.BytesIO(reply.content))
    assert rate == 22050 and len(data) > 0.3 * rate

    cloned = _post(
        server, {"input": "Hi.", "ref_audio": "data:audio/wav;base64,UklGRg==", "ref_text": "x"}
    )
    assert cloned.status_code == 400
    error = cloned.json()["error"]
    assert error["code"] == "voice_cloning_unsupported" and "ignore_ref_audio" in error["message"]
    ignored = _post(
        server,
        {
            "input": "Hi.",
            "ref_audio": "file:///nowhere.wav",
            "ignore_ref_audio": True,
            "max_new_tokens": 500,
        },
    )
    assert ignored.status_code == 200 and len(ignored.content) > 0

    for body, code in (
        ({"input": ""}, "invalid_request"),
        ({"input": "Hi.", "voice": "alloy"}, "voice_not_found"),
        ({"input": "Hi.", "model": "other"}, "model_not_found"),
        ({"input": "Hi.", "response_format": "mp3"}, "invalid_request"),
    ):
        bad = _post(server, body)
        assert bad.status_code == 400 and bad.json()["error"]["code"] == code, body

    caps = httpx.get(f"{server.base_url}/v1/realtime/capabilities").json()["speech"]
    assert caps["voice_cloning"] is False and caps["sample_rate"] == 22050


class _FakeSpeechService(BaseHTTPRequestHandler):
    seen: list[tuple[dict, str | None]] = []

    def do_POST(self):  # noqa: N802 (http.server API)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append((body, self.headers.get("Authorization")))
        pcm = b"\x01\x00" * 2400
        self.send_response(200)
        self.send_header("Content-Type", "audio/pcm")
        self.send_header("X-Sample-Rate", "24000")
        self.send_header("X-Channels", "1")
        self.send_header("Content-Length", str(len(pcm)))
        self.end_headers()
        self.wfile.write(pcm)

    def log_message(self, *args):
        pass


@pytest.fixture
def speech_service():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _FakeSpeechService)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()


def test_pass_through_relays_body_and_headers(speech_service, monkeypatch):
    monkeypatch.setenv("FDB_TEST_SPEECH_KEY", "sekrit")
    system = SystemConfig(
        speech_service=SpeechService(
            base_url=speech_service, model="svc-tts", api_key_env="FDB_TEST_SPEECH_KEY"
        )
    )
    client = TestClient(create_app(system))  # no lifespan: no local models, pass-through only
    body = {
        "input": "Hi.",
        "ref_audio": "file:///x.wav",
        "ref_text": "x",
        "stream": True,
        "model": "mine",
    }
    reply = client.post("/v1/audio/speech", json=body)
    assert reply.status_code == 200
    assert (
        reply.headers["x-sample-rate"] == "24000" and reply.headers["content-type"] == "audio/pcm"
    )
    assert len(reply.content) == 4800
    sent, auth = _FakeSpeechService.seen[-1]
    assert sent == {**body, "model": "svc-tts"} and auth == "Bearer sekrit"
    caps = create_app(system).state.runtime.system
    assert caps.speech_service.api_key_env == "FDB_TEST_SPEECH_KEY"  # the name only, never the key

    monkeypatch.delenv("FDB_TEST_SPEECH_KEY")
    missing = client.post("/v1/audio/speech", json=body)
    assert (
        missing.status_code == 503 and "FDB_TEST_SPEECH_KEY" in missing.json()["error"]["message"]
    )


def test_pass_through_waits_reply_delay_ms(speech_service):
    client = TestClient(
        create_app(
            SystemConfig(speech_service=SpeechService(base_url=speech_service), reply_delay_ms=300)
        )
    )
    start = time.monotonic()
    reply = client.post("/v1/audio/speech", json={"input": "Hi.", "stream": True})
    assert reply.status_code == 200 and len(reply.content) == 4800
    assert time.monotonic() - start >= 0.3


@pytest.fixture(scope="module")
def delayed(tmp_path_factory):
    """The real server with the handicap: every reply's first audio waits DELAY_S."""
    launch = LAUNCH_YAML + f"reply_delay_ms: {round(DELAY_S * 1000)}\n"
    with launched_server(tmp_path_factory.mktemp("delayed"), launch) as info:
        yield info


def test_speech_first_audio_waits_reply_delay_ms(delayed):
    body = {"input": "Hi.", "stream": True, "stream_format": "audio", "response_format": "pcm"}
    start = time.monotonic()
    with httpx.stream(
        "POST", f"{delayed.base_url}/v1/audio/speech", json=body, timeout=60.0
    ) as reply:
        assert reply.status_code == 200
        chunks = reply.iter_bytes()
        first = next(data for data in chunks if data)
        ttfa = time.monotonic() - start
        assert len(first) + sum(len(data) for data in chunks) > 0.2 * 22050 * 2
    assert ttfa >= DELAY_S


async def _committed_turn(server, speech) -> Client:
    """A commit-mode session whose question is committed; returns once its first transcript
    delta (just before the held first audio) arrived."""
    client = await Client.connect(server.ws_url)
    await client.open_session({"audio": {"input": {"turn_detection": None}}})
    await client.send_audio(
        _pcm16(np.concatenate([silence(0.2), speech["question"]])), interval_s=0.02
    )
    await client.send("input_audio_buffer.commit")
    await client.until("response.output_audio_transcript.delta", 30)
    return client


def test_realtime_first_audio_waits_and_cancel_during_the_wait(delayed, speech):
    async def held() -> Client:
        client = await _committed_turn(delayed, speech)
        await client.until("response.done", 30)
        await client.close()
        return client

    async def cancelled() -> Client:
        client = await _committed_turn(delayed, speech)
        await client.send("response.cancel")
        await client.until("response.done", 10)
        await asyncio.sleep(DELAY_S)  # past the end of the wait: nothing more of the reply comes
        await client.close()
        return client

    client = asyncio.run(held())
    at = {
        name: next(r.t for r in client.received if r.type == name)
        for name in (
            "response.created",
            "response.output_audio_transcript.delta",
            "response.output_audio.delta",
        )
    }
    assert at["response.output_audio.delta"] - at["response.created"] >= DELAY_S
    assert (
        at["response.output_audio.delta"] - at["response.output_audio_transcript.delta"]
        >= DELAY_S - 0.05
    )
    assert client.of_type("response.done")[0]["response"]["status"] == "completed"

    client = asyncio.run(cancelled())
    done = client.of_type("response.done")
    assert len(done) == 1 and done[0]["response"]["status"] == "cancelled", client.types()
    assert done[0]["response"]["status_details"]["reason"] == "interrupted"
    assert "response.output_audio.delta" not in client.types() and "error" not in client.types()
