"""Start-up health checks of service nodes and services (#23 part 3): ``health: models | request |
none`` per node, ``health: models | port | /path`` per service, and one-line failures that name
the check and how to change it. The services outside the machine are stood in for by a real
stdlib HTTP server on a loopback port (tests/recorders/speech_variants.py) and, for services,
by ``python -m http.server`` (a real server without /v1/models)."""

from __future__ import annotations

import json
import sys
import time

import pytest

from fdb.errors import FdbError
from serving.graph.registry import build_backend, parse_backend
from serving.service_nodes import probe
from serving.services import ServiceEntry, Services, answers
from serving.systems import apply_overrides, get_system
from tests.conftest import free_port
from tests.recorders.speech_variants import Answer, VariantServer, tone

TRANSCRIBE = ("POST", "/v1/audio/transcriptions")
CHAT = ("POST", "/v1/chat/completions")
SPEECH = ("POST", "/v1/audio/speech")
MODELS = ("GET", "/v1/models")


def _node(role: str, kind: str, url: str, **extra):
    return parse_backend(
        role,
        {
            "kind": kind,
            "base_url": f"{url}/v1",
            "model": "m1",
            "api_key_env": "FDB_NO_KEY",
            **extra,
        },
    )


def _probe(role: str, node) -> None:
    probe(role, node, build_backend(role, node))


def _failure(role: str, node) -> FdbError:
    with pytest.raises(FdbError) as err:
        _probe(role, node)
    line = err.value.one_line()
    assert "\n" not in line and len(line) < 600, line
    return err.value


def test_a_server_without_a_model_list_is_told_to_use_another_check():
    """faster-whisper-server (PyPI) has no GET /v1/models: the default check says which check
    failed and how to change it, instead of sending the user to fix a URL that is right."""
    with VariantServer({TRANSCRIBE: Answer.json({"text": " hello"})}) as fake:
        node = _node("asr", "openai_transcription", fake.url)
        error = _failure("asr", node)
        assert error.message == (
            f"asr node (openai_transcription, model 'm1'): health check 'models' failed: "
            f"GET {fake.url}/v1/models answered 404: the server has no model list"
        )
        assert error.hint.startswith(
            "set backends.asr.health: request (one real 0.5 s transcription at start-up) or none"
        )
        _probe("asr", node.model_copy(update={"health": "request"}))  # the fix it names works
        assert fake.paths()[-1] == "/v1/audio/transcriptions"


def test_request_check_sends_one_real_minimal_request_per_role():
    pcm = tone(22050, 0.2).tobytes()
    routes = {
        TRANSCRIBE: Answer(200, "text/plain; charset=utf-8", b"you"),
        CHAT: Answer.json({"choices": [{"message": {"role": "assistant", "content": "Hello"}}]}),
        SPEECH: Answer(200, "audio/pcm_s16le", pcm, {"X-Sample-Rate": "22050"}),
    }
    with VariantServer(routes) as fake:
        for role, kind in (
            ("asr", "openai_transcription"),
            ("llm", "openai_chat"),
            ("tts", "openai_speech"),
        ):
            _probe(role, _node(role, kind, fake.url, health="request"))
        assert [(s.method, s.path) for s in fake.seen] == [
            TRANSCRIBE,
            CHAT,
            SPEECH,
        ]  # no GET /v1/models
        asr, chat, speech = fake.seen
        assert b"RIFF" in asr.body and b'name="model"' in asr.body
        assert len(asr.body) > 16000  # 0.5 s of 16 kHz PCM16 in the WAV
        body = json.loads(chat.body)
        assert body["max_tokens"] == 1 and body["stream"] is True
        assert json.loads(speech.body)["input"] == "Hello."


def test_none_sends_nothing_and_models_still_streams_a_chat_token():
    with VariantServer(
        {
            MODELS: Answer.json({"object": "list", "data": [{"id": "m1"}]}),
            CHAT: Answer(
                200,
                "text/event-stream",
                b'data: {"choices": [{"delta": {"content": "Hi"}}]}\n\ndata: [DONE]\n\n',
            ),
        }
    ) as fake:
        for role, kind in (
            ("asr", "openai_transcription"),
            ("llm", "openai_chat"),
            ("tts", "openai_speech"),
        ):
            _probe(role, _node(role, kind, fake.url, health="none"))
        assert fake.seen == []
        _probe("llm", _node("llm", "openai_chat", fake.url))
        assert fake.paths() == ["/v1/models", "/v1/chat/completions"]


@pytest.mark.parametrize(
    ("routes", "role", "kind", "health", "message", "hint"),
    [
        (
            {MODELS: Answer.json({"data": [{"id": "tts-1"}, {"id": "tts-1-hd"}]})},
            "tts",
            "openai_speech",
            "models",
            "GET {url}/v1/models does not list model 'm1' (it serves ['tts-1', 'tts-1-hd'])",
            "set backends.tts.model to one it serves",
        ),
        (
            {MODELS: Answer.json({"models": ["m1"]})},
            "asr",
            "openai_transcription",
            "models",
            "answered 200 without an OpenAI model list",
            "set backends.asr.health: request or none",
        ),
        (
            {MODELS: Answer.json({"error": "no key"}, status=401)},
            "llm",
            "openai_chat",
            "models",
            "GET {url}/v1/models answered 401",
            "export the service's key in FDB_NO_KEY",
        ),
        (
            {TRANSCRIBE: Answer(500, "audio/wav", b"\x00RIFF" * 100)},
            "asr",
            "openai_transcription",
            "request",
            "health check 'request' (0.5 s transcription) failed: asr node (openai_transcription, "
            "model 'm1'): {url}/v1/audio/transcriptions answered 500: '<500 bytes, not text>'",
            "backends.asr.health picks",
        ),
        (
            {SPEECH: Answer.json({"error": {"message": "no default voice"}})},
            "tts",
            "openai_speech",
            "request",
            "answered application/json instead of audio (raw PCM16 or WAV)",
            "point the node at a server",
        ),
        (
            {CHAT: Answer.json({"detail": "Not a completion"})},
            "llm",
            "openai_chat",
            "request",
            "answered JSON that is not a chat completion",
            "backends.llm.health picks",
        ),
    ],
)
def test_each_failed_check_is_one_line_with_its_fix(routes, role, kind, health, message, hint):
    with VariantServer(routes) as fake:
        error = _failure(role, _node(role, kind, fake.url, health=health))
    assert message.format(url=fake.url) in error.message and hint in error.hint, error.one_line()


def test_health_is_checked_in_the_launch_file():
    with pytest.raises(
        FdbError, match=r"backends: asr.health: Input should be 'models', 'request' or 'none'"
    ):
        apply_overrides(
            get_system("embedded-cascade"),
            {
                "backends": {
                    "asr": {
                        "kind": "openai_transcription",
                        "base_url": "http://h/v1",
                        "model": "m",
                        "health": "ping",
                    }
                }
            },
            "launch.yaml",
        )
    with pytest.raises(FdbError, match=r"services.0.health: String should match pattern"):
        apply_overrides(
            get_system("embedded-cascade"),
            {"services": [{"name": "a", "command": ["x"], "port": 9001, "health": "ping"}]},
            "launch.yaml",
        )


def _http_server(port: int, health: str) -> ServiceEntry:
    return ServiceEntry(
        name="plain",
        command=[sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        port=port,
        health=health,
    )


def test_a_service_without_a_model_list_fails_at_once_and_port_or_a_path_serve_it(tmp_path):
    port = free_port()
    services = Services([_http_server(port, "models")], poll_s=0.1, ready_timeout_s=30)
    started = time.monotonic()
    with pytest.raises(FdbError) as err:
        services.start()
    assert time.monotonic() - started < 10  # not the 30 s of waiting for a list that never comes
    assert err.value.message == (
        f"service 'plain' answers on :{port} but GET /v1/models answered 404: it has no model list"
    )
    assert "services.plain.health (models, port or a path such as /health)" in err.value.hint
    assert services.started[0].process.returncode is not None  # stopped after the failure
    for health in ("port", "/"):
        services = Services([_http_server(port, health)], poll_s=0.1, ready_timeout_s=30)
        services.start()
        try:
            assert answers(port, health=health) and not answers(port)  # ready by its own check only
        finally:
            services.stop()
        assert services.started[0].process.returncode is not None


def test_a_service_that_never_passes_its_check_says_what_the_check_saw():
    port = free_port()
    entry = ServiceEntry(
        name="slow",
        command=[sys.executable, "-c", "import time; time.sleep(30)"],
        port=port,
        health="/health",
    )
    with pytest.raises(FdbError) as err:
        Services([entry], poll_s=0.1, ready_timeout_s=1.0).start()
    assert err.value.message == (
        f"service 'slow' did not answer on :{port} within 1 s (health /health: "
        "GET /health: ConnectError)"
    )
