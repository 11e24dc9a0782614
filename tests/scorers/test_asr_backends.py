"""The three ASR backends behind one interface: the OpenAI-compatible client against a local
HTTP server that wraps the real faster-whisper backend (real words), its retries, errors and
key handling; the Parakeet backend's checks that run without NeMo or a GPU (missing package,
sha256 refusal, device check, hypothesis parsing); the registry."""

from __future__ import annotations

import io
import json
import threading
from email.parser import BytesParser
from email.policy import default
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import numpy as np
import pytest
import soundfile as sf

from benchmarks.support.treebuild import V10Tree, turn_json
from fdb.audio import read_wav
from fdb.errors import FdbError, MissingExtraError
from fdb.io import read_json, sha256_file
from fdb.models.asr import ASR_BACKENDS, load_asr
from fdb.models.asr_openai import AsrEndpointError, OpenAiCompatibleAsr
from fdb.models.asr_parakeet import (
    PARAKEET_SHA256,
    ParakeetAsr,
    check_device,
    words_from_hypotheses,
)
from scorers.asr_phase import run_v10_asr

SECRET = "sk-test-not-a-real-key-7f3a"
KEY_ENV = "FDB_TEST_ASR_KEY"


class FakeEndpoint:
    """``POST /v1/audio/transcriptions`` served by the real faster-whisper backend.

    ``script`` holds statuses to answer before transcribing (e.g. [503, 503]); ``no_words``
    answers verbose_json without a words list. Every request's fields and headers are kept.
    """

    def __init__(self, asr):
        self.asr, self.script, self.requests, self.replies, self.no_words = asr, [], [], [], False
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output quiet
                pass

            def do_POST(self):
                endpoint.handle(self)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def handle(self, req):
        body = req.rfile.read(int(req.headers["Content-Length"]))
        message = BytesParser(policy=default).parsebytes(
            f"Content-Type: {req.headers['Content-Type']}\r\n\r\n".encode() + body
        )
        fields = {
            p.get_param("name", header="content-disposition"): p.get_payload(decode=True)
            for p in message.iter_parts()
        }
        self.requests.append(
            {"path": req.path, "auth": req.headers.get("Authorization"), "fields": fields}
        )
        if self.script:
            return self.answer(req, self.script.pop(0), {"error": "busy"})
        samples, rate = sf.read(io.BytesIO(fields["file"]), dtype="float32")
        assert rate == 16000
        transcript = self.asr.transcribe(samples)
        words = [{"word": w.text, "start": w.start, "end": w.end} for w in transcript.words]
        reply = {"text": transcript.text, "segments": [], "language": "english"} | (
            {} if self.no_words else {"words": words}
        )
        self.replies.append(reply)
        self.answer(req, 200, reply)

    def answer(self, req, status, obj):
        data = json.dumps(obj).encode()
        req.send_response(status)
        req.send_header("Content-Type", "application/json")
        req.send_header("Content-Length", str(len(data)))
        req.end_headers()
        req.wfile.write(data)


@pytest.fixture(scope="module")
def endpoint(whisper):
    server = FakeEndpoint(whisper)
    yield server
    server.server.shutdown()


@pytest.fixture
def client(endpoint, monkeypatch):
    monkeypatch.setenv(KEY_ENV, SECRET)
    endpoint.script.clear()
    endpoint.requests.clear()
    endpoint.no_words = False
    return OpenAiCompatibleAsr(
        endpoint.url, "whisper-tiny.en", api_key_env=KEY_ENV, retry_sleep_s=0.0
    )


def clip(reference, start=3.0, end=7.0):
    audio = read_wav(reference / "smooth_turn_taking_example/1/output.wav").samples
    return audio[int(start * 16000) : int(end * 16000)]


def test_openai_compatible_real_words(client, endpoint, reference):
    transcript = client.transcribe(clip(reference))
    assert len(transcript.words) >= 5 and transcript.text == " ".join(
        w.text for w in transcript.words
    )
    reply = endpoint.replies[-1]
    assert [(w.text, w.start, w.end) for w in transcript.words] == [
        (w["word"].strip(), w["start"], w["end"]) for w in reply["words"]
    ]
    request = endpoint.requests[-1]
    assert request["path"] == "/v1/audio/transcriptions" and request["auth"] == f"Bearer {SECRET}"
    fields = request["fields"]
    assert (
        fields["response_format"] == b"verbose_json"
        and fields["timestamp_granularities[]"] == b"word"
    )
    assert fields["model"] == b"whisper-tiny.en" and fields["language"] == b"en"
    assert transcript.language == "english"  # the reply's language, for language: auto
    ident = json.dumps(client.identity.model_dump())
    assert (
        SECRET not in ident
        and KEY_ENV in ident
        and client.identity.name == "openai-compatible/whisper-tiny.en"
    )


def test_openai_compatible_retries_and_errors(client, endpoint, reference, monkeypatch):
    endpoint.script[:] = [503, 429]
    assert client.transcribe(clip(reference, 3.0, 5.0)).words  # two retries, then a real answer
    assert len(endpoint.requests) == 3
    endpoint.script[:] = [503, 503, 503]
    with pytest.raises(AsrEndpointError, match="failed 3 attempts .*HTTP 503") as err:
        client.transcribe(clip(reference, 3.0, 5.0))
    assert SECRET not in err.value.one_line()
    endpoint.requests.clear()
    endpoint.script[:] = [401]
    with pytest.raises(AsrEndpointError, match="refused the request .*HTTP 401") as err:
        client.transcribe(clip(reference, 3.0, 5.0))
    assert (
        len(endpoint.requests) == 1
        and KEY_ENV in err.value.one_line()
        and SECRET not in err.value.one_line()
    )
    endpoint.no_words = True
    with pytest.raises(AsrEndpointError, match="no word timestamps"):
        client.transcribe(clip(reference, 3.0, 5.0))
    assert client.transcribe(np.zeros(0, np.float32)).words == []
    dead = OpenAiCompatibleAsr(
        "http://127.0.0.1:9/v1",
        "m",
        api_key_env=KEY_ENV,
        max_attempts=2,
        retry_sleep_s=0.0,
        timeout_s=2.0,
    )
    with pytest.raises(AsrEndpointError, match="failed 2 attempts .*ConnectError"):
        dead.transcribe(clip(reference, 3.0, 4.0))
    monkeypatch.delenv(KEY_ENV)
    with pytest.raises(FdbError, match=f"{KEY_ENV} is not set"):
        OpenAiCompatibleAsr(endpoint.url, "m", api_key_env=KEY_ENV)
    with pytest.raises(FdbError, match="not an http"):
        OpenAiCompatibleAsr("localhost:8000/v1", "m", api_key_env="PATH")


def test_asr_phase_through_the_endpoint(tmp_path, client, endpoint, reference):
    tree = V10Tree(tmp_path)
    folder = tree.add("candor_turn_taking", "1", 10.4, annotation=turn_json(2.01))
    (folder / "output.wav").write_bytes(
        (reference / "smooth_turn_taking_example/1/output.wav").read_bytes()
    )
    tree.samples[0].files["output.wav"] = sha256_file(folder / "output.wav")
    tree.manifest()
    receipt = run_v10_asr(
        tmp_path,
        load_asr(
            "openai-compatible",
            base_url=endpoint.url,
            model="whisper-tiny.en",
            api_key_env=KEY_ENV,
            retry_sleep_s=0.0,
        ),
    )
    assert [e.status for e in receipt.samples] == ["ok"]
    out = read_json(folder / "output.json")
    assert len(out["chunks"]) >= 15 and 2.5 <= out["chunks"][0]["timestamp"][0] <= 3.6
    text = (tmp_path / "asr.json").read_text()
    assert (
        SECRET not in text
        and read_json(tmp_path / "asr.json")["backend"]["name"]
        == "openai-compatible/whisper-tiny.en"
    )


def test_registry():
    assert ASR_BACKENDS == ("faster-whisper", "parakeet", "openai-compatible")
    with pytest.raises(FdbError, match="unknown ASR backend 'whisperx'"):
        load_asr("whisperx")


def test_parakeet_checks_without_nemo(tmp_path, monkeypatch):
    fake = tmp_path / "parakeet-tdt-0.6b-v2.nemo"
    fake.write_bytes(b"not a checkpoint")
    with pytest.raises(FdbError, match=r"has sha256 .*expected d99e39955c9d"):
        ParakeetAsr(fake)
    with pytest.raises(FdbError, match="does not exist"):
        load_asr("parakeet", nemo_path=tmp_path / "missing.nemo")
    with pytest.raises(MissingExtraError) as err:  # hash accepted, then the lazy NeMo import
        ParakeetAsr(fake, expected_sha256=sha256_file(fake))
    assert err.value.extra == "nemo" and "fdb[nemo]" in err.value.one_line()
    assert PARAKEET_SHA256.startswith("d99e39955c9d")
    with pytest.raises(FdbError, match="not supported"):
        check_device("tpu")
    import torch

    for count, ok in ((0, False), (2, False), (1, True)):
        monkeypatch.setattr(torch.cuda, "is_available", lambda c=count: c > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda c=count: c)
        if ok:
            assert check_device("cuda") == "cuda"
        else:
            with pytest.raises(FdbError, match=f"exactly one visible GPU, found {count}"):
                ParakeetAsr(fake, device="cuda")  # refused before the checkpoint is even hashed
    assert check_device("cpu") == "cpu"


def test_parakeet_hypothesis_words():
    hyp = SimpleNamespace(
        timestamp={
            "word": [
                {"word": "Hello,", "start": 0.32, "end": 0.64},
                {"word": " ", "start": 0.7, "end": 0.7},
                {"word": "there.", "start": np.float32(0.72), "end": None},
            ]
        }
    )
    for out in ([hyp], ([hyp], [[hyp]])):
        t = words_from_hypotheses(out)
        assert t.text == "Hello, there." and [(w.start, w.end) for w in t.words] == [
            (0.32, 0.64),
            (0.7200000286102295, None),
        ]
    assert (
        words_from_hypotheses([]).words == []
        and words_from_hypotheses([SimpleNamespace(timestamp=None)]).words == []
    )
