"""POST /v1/audio/speech on the real server (Piper voice), and the pass-through to an
OpenAI-compatible speech service (a small local HTTP server standing in for it)."""

from __future__ import annotations

import base64
import io
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
import soundfile as sf
from fastapi.testclient import TestClient

from serving.app import create_app
from serving.systems import SpeechService, SystemConfig

TEXT = "Hello there. This is the second sentence."


def _post(server, body: dict, timeout: float = 60.0) -> httpx.Response:
    return httpx.post(f"{server.base_url}/v1/audio/speech", json=body, timeout=timeout)


def test_stream_raw_pcm_declares_rate_and_sends_each_sentence(server):
    body = {"input": TEXT, "stream": True, "stream_format": "audio", "response_format": "pcm"}
    arrivals = []
    with httpx.stream("POST", f"{server.base_url}/v1/audio/speech", json=body, timeout=60.0) as reply:
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

    cloned = _post(server, {"input": "Hi.", "ref_audio": "data:audio/wav;base64,UklGRg==", "ref_text": "x"})
    assert cloned.status_code == 400
    error = cloned.json()["error"]
    assert error["code"] == "voice_cloning_unsupported" and "ignore_ref_audio" in error["message"]
    ignored = _post(server, {"input": "Hi.", "ref_audio": "file:///nowhere.wav", "ignore_ref_audio": True,
                             "max_new_tokens": 500})
    assert ignored.status_code == 200 and len(ignored.content) > 0

    for body, code in (({"input": ""}, "invalid_request"), ({"input": "Hi.", "voice": "alloy"}, "voice_not_found"),
                       ({"input": "Hi.", "model": "other"}, "model_not_found"),
                       ({"input": "Hi.", "response_format": "mp3"}, "invalid_request")):
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
    system = SystemConfig(speech_service=SpeechService(base_url=speech_service, model="svc-tts",
                                                       api_key_env="FDB_TEST_SPEECH_KEY"))
    client = TestClient(create_app(system))  # no lifespan: no local models, pass-through only
    body = {"input": "Hi.", "ref_audio": "file:///x.wav", "ref_text": "x", "stream": True, "model": "mine"}
    reply = client.post("/v1/audio/speech", json=body)
    assert reply.status_code == 200
    assert reply.headers["x-sample-rate"] == "24000" and reply.headers["content-type"] == "audio/pcm"
    assert len(reply.content) == 4800
    sent, auth = _FakeSpeechService.seen[-1]
    assert sent == {**body, "model": "svc-tts"} and auth == "Bearer sekrit"
    caps = create_app(system).state.runtime.system
    assert caps.speech_service.api_key_env == "FDB_TEST_SPEECH_KEY"  # the name only, never the key

    monkeypatch.delenv("FDB_TEST_SPEECH_KEY")
    missing = client.post("/v1/audio/speech", json=body)
    assert missing.status_code == 503 and "FDB_TEST_SPEECH_KEY" in missing.json()["error"]["message"]
