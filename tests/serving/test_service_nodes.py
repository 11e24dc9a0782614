"""Service nodes (openai_transcription, openai_chat, openai_speech) and launch-file services.

The user's own services are stood in for by :mod:`tests.serving.openai_services` (real
faster-whisper and Piper behind OpenAI-compatible routes, a scripted chat stream), in a thread
of the test process or started by the server as a ``services`` entry."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
import websockets
from yaml import safe_dump as yaml_dump

from benchmarks.support.realtime_client import Client
from fdb.errors import FdbError
from serving.launcher import serve
from serving.models import probe_nodes
from serving.service_nodes import OpenAiChat, OpenAiSpeech, language_name, probe, sentences
from serving.services import ServiceEntry, Services, answers
from serving.spoken_numbers import spoken_numbers
from serving.systems import apply_overrides, get_system
from tests.conftest import REPO, free_port, launched_server
from tests.serving.openai_services import start_in_thread

SECRET = "sk-node-test-not-a-real-key-91c2"
KEY_ENV = "FDB_TEST_NODE_KEY"
SERVICE = [sys.executable, "-m", "tests.serving.openai_services"]


def _nodes(base_url: str, **extra) -> dict:
    common = {"base_url": base_url, "api_key_env": KEY_ENV}
    return {
        "backends": {
            "asr": {
                "kind": "openai_transcription",
                "model": "whisper-tiny",
                "response_format": "json",
                **common,
            },
            "llm": {
                "kind": "openai_chat",
                "model": "scripted-chat",
                "max_tokens": 64,
                **common,
                **extra.get("llm", {}),
            },
            "tts": {"kind": "openai_speech", "model": "piper-joe", **common},
        }
    }


def _system(base_url: str, **extra):
    return apply_overrides(get_system("embedded-cascade"), _nodes(base_url, **extra), "launch.yaml")


@pytest.fixture(scope="module")
def fake():
    server = start_in_thread(tone=True)
    yield server
    server.stop()


# ------------------------------------------------------------------------------ the launch file


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            {
                "backends": {
                    "llm": {"kind": "openai_chat", "base_url": "localhost:1/v1", "model": "m"}
                }
            },
            "backends: llm.base_url: String should match pattern",
        ),
        (
            {
                "backends": {
                    "tts": {
                        "kind": "openai_speech",
                        "base_url": "http://h/v1",
                        "model": "m",
                        "voise": "x",
                    }
                }
            },
            "backends: tts.voise: Extra inputs are not permitted",
        ),
        (
            {
                "backends": {
                    "llm": {"kind": "openai_speech", "base_url": "http://h/v1", "model": "m"}
                }
            },
            "llm.kind: 'openai_speech' is not a service node kind for llm",
        ),
        (
            {"backends": {"llm": {"kind": "openai_chat", "base_url": "http://h/v1"}}},
            "llm.model: Field required",
        ),
        (
            {
                "backends": {
                    "llm": {
                        "kind": "openai_chat",
                        "base_url": "http://h/v1",
                        "model": "m",
                        "extra_body": {"stream": False},
                    }
                }
            },
            "extra_body cannot set ['stream']",
        ),
        (
            {
                "services": [
                    {"name": "a", "command": ["x"], "port": 9001},
                    {"name": "a", "command": ["y"], "port": 9002},
                ]
            },
            "services must have distinct names and ports",
        ),
        ({"services": [{"name": "a", "command": ["x"], "port": 70000}]}, "services.0.port"),
    ],
)
def test_launch_file_errors_name_the_field(override, message):
    with pytest.raises(FdbError) as err:
        apply_overrides(get_system("embedded-cascade"), override, "launch.yaml")
    assert message in err.value.message


def test_chat_node_sets_session_defaults():
    system = _system("http://127.0.0.1:1/v1", llm={"temperature": 0.7})
    assert (system.max_tokens, system.temperature) == (64, 0.7)
    assert system.backends.llm.kind == "openai_chat" and system.backends.vad == "silero"


# ------------------------------------------------------------------------------ the clients


def test_chat_streams_pieces_with_key_and_extra_body(fake, monkeypatch):
    monkeypatch.setenv(KEY_ENV, SECRET)
    system = _system(
        fake.base_url, llm={"extra_body": {"chat_template_kwargs": {"enable_thinking": False}}}
    )
    chat = OpenAiChat(system.backends.llm)
    fake.state.requests.clear()
    pieces = list(chat.stream_reply([{"role": "user", "content": "And France?"}], 64, None))
    assert len(pieces) > 3 and "".join(pieces) == "The capital of France is Paris. 😀"
    request = fake.state.requests[-1]
    assert request["auth"] == f"Bearer {SECRET}"
    assert request["body"]["stream"] is True and request["body"]["max_tokens"] == 64
    assert "temperature" not in request["body"]  # null: left out
    assert request["body"]["chat_template_kwargs"] == {"enable_thinking": False}
    assert chat.reply([{"role": "user", "content": "Hm"}], 3, 0.2) == "Sorry, I did"
    assert fake.state.requests[-1]["body"]["temperature"] == 0.2
    assert (
        SECRET not in chat.identity.model_dump_json() and KEY_ENV in chat.identity.model_dump_json()
    )


def test_speech_sends_one_clean_request_per_sentence(fake, monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    speech = OpenAiSpeech(_system(fake.base_url).backends.tts)
    fake.state.requests.clear()
    chunks = list(
        speech.stream("Hello **there**. 😀 🎉. Read [the `docs`](https://x.example/d) now!\nBye")
    )
    bodies = [r["body"] for r in fake.state.requests]
    assert [b["input"] for b in bodies] == ["Hello there.", "Read the docs now!", "Bye"]
    assert all(
        b["response_format"] == "pcm"
        and b["stream"] is True
        and b["voice"] == "default"
        and b["model"] == "piper-joe"
        and "language" not in b
        for b in bodies
    )
    assert all(r["auth"] is None for r in fake.state.requests)  # key variable unset: no header
    assert speech.rate == 24000 and len(chunks) == 3
    assert all(abs(len(c) - 0.3 * 24000) < 50 for c in chunks)  # 22,050 Hz tone resampled


def test_a_bundled_fdb_server_is_an_openai_speech_target(server):
    node = apply_overrides(
        get_system("embedded-cascade"),
        {
            "backends": {
                "tts": {
                    "kind": "openai_speech",
                    "base_url": f"{server.base_url}/v1",
                    "model": "fdb/embedded-cascade",
                }
            }
        },
        "launch.yaml",
    ).backends.tts
    speech = OpenAiSpeech(node)
    probe("tts", node, speech)
    samples = speech.synthesize("Hello there. How are you today?")
    assert speech.rate == 24000 and 1.0 < len(samples) / 24000 < 6.0  # 22,050 Hz Piper, resampled
    assert float(abs(samples).max()) > 0.05


def test_speech_language_tags_and_spoken_numbers(fake):
    node = _system(fake.base_url).backends.tts.model_copy(update={"language": "auto"})
    speech = OpenAiSpeech(node)
    fake.state.requests.clear()
    list(
        speech.stream("In 1999 I paid 3.50 dollars. 你好。我是21号。Call 555 010 4477 on the 21st!")
    )
    sent = [(r["body"]["input"], r["body"]["language"]) for r in fake.state.requests]
    assert sent == [
        ("In nineteen ninety nine I paid three point five zero dollars.", "English"),
        ("你好。", "Chinese"),
        ("我是21号。", "Chinese"),
        ("Call five five five zero one zero four four seven seven on the twenty first!", "English"),
    ]


def test_speech_language_auto_follows_the_recognizers_language(fake):
    node = _system(fake.base_url).backends.tts.model_copy(update={"language": "auto"})
    speech = OpenAiSpeech(node)
    fake.state.requests.clear()
    list(speech.stream("Guten Tag. 你好。", heard_language="german"))
    list(speech.stream("In 1999.", heard_language="en"))
    sent = [(r["body"]["input"], r["body"]["language"]) for r in fake.state.requests]
    assert sent == [
        ("Guten Tag.", "German"),
        ("你好。", "German"),
        ("In nineteen ninety nine.", "English"),
    ]
    fixed = OpenAiSpeech(node.model_copy(update={"language": "French"}))
    fake.state.requests.clear()
    list(fixed.stream("Bonjour.", heard_language="german"))  # a fixed name is kept
    assert [r["body"]["language"] for r in fake.state.requests] == ["French"]
    assert [language_name(x) for x in ("zh", "english", "Swahili", "x-klingon")] == [
        "Chinese",
        "English",
        "Swahili",
        "x-klingon",
    ]


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("2024", "twenty twenty four"),
        ("1900", "nineteen hundred"),
        ("2007", "two thousand seven"),
        ("1905", "nineteen oh five"),
        ("1,500 and 42", "one thousand five hundred and forty two"),
        ("3rd 12th 40th 101st", "third twelfth fortieth one hundred first"),
        ("no digits", "no digits"),
    ],
)
def test_spoken_numbers(text, words):
    assert spoken_numbers(text) == words


def test_sentences_cut_long_ones_at_a_comma():
    words = " ".join(f"w{k}" for k in range(30))
    assert sentences(f"“Yes.” Then {words}", 24)[0] == "“Yes.”"
    cut = sentences("one two three four five six, seven eight nine ten", 8)
    assert cut == ["one two three four five six,", "seven eight nine ten"]


# ------------------------------------------------------------------------------ probes


def test_probes_fail_with_the_node_and_url(fake, monkeypatch):
    monkeypatch.setenv(KEY_ENV, SECRET)
    system = _system(fake.base_url)
    clients = probe_nodes(system)  # all answer: one chat token streamed
    assert set(clients) == {"asr", "llm", "tts"}
    chat_probe = [r for r in fake.state.requests if r["path"] == "/v1/chat/completions"][-1]
    assert chat_probe["body"]["max_tokens"] == 1
    url = f"{fake.base_url}/models"
    try:
        fake.state.models_status = 500
        with pytest.raises(FdbError, match=rf"asr node \(openai_transcription.*{url} answered 500"):
            probe_nodes(system)
        fake.state.models_status = 200
        fake.state.models = ["whisper-tiny", "piper-joe"]
        with pytest.raises(
            FdbError, match=r"llm node \(openai_chat.* does not list model 'scripted-chat'"
        ):
            probe_nodes(system)
        fake.state.models = ["whisper-tiny", "scripted-chat", "piper-joe"]
        fake.state.chat_status = 500
        with pytest.raises(
            FdbError, match=r"first token failed: llm node.*chat/completions answered 500"
        ) as err:
            probe_nodes(system)
        assert (
            "key provided: <redacted>" in err.value.message and SECRET not in err.value.one_line()
        )
    finally:
        fake.state.models_status, fake.state.chat_status = 200, 200
        fake.state.models = ["whisper-tiny", "scripted-chat", "piper-joe"]


def test_server_stops_when_a_node_cannot_be_reached(tmp_path):
    dead = f"http://127.0.0.1:{free_port()}/v1"
    config = tmp_path / "launch.yaml"
    config.write_text(f"backends:\n  llm: {{kind: openai_chat, base_url: '{dead}', model: m}}\n")
    started = time.monotonic()
    expected = (
        r"llm node \(openai_chat, model 'm'\): health check 'models' failed: "
        rf"cannot reach {dead}/models"
    )
    with pytest.raises(FdbError, match=expected):
        serve(port=free_port(), config=config, log_level="warning")
    assert time.monotonic() - started < 15


# ------------------------------------------------------------------------------ services


def _entry(name: str, port: int, *args: str) -> ServiceEntry:
    return ServiceEntry(
        name=name,
        command=[*SERVICE, "--port", str(port), *args],
        port=port,
        env={"PYTHONPATH": str(REPO)},
    )


def test_running_service_is_reused_and_left_running(fake):
    never_run = ServiceEntry(
        name="tts", command=[sys.executable, "-c", "raise SystemExit(9)"], port=fake.port
    )
    services = Services([never_run], poll_s=0.2)
    services.start()
    assert services.started == []
    services.stop()
    assert answers(fake.port)


def test_service_exiting_or_silent_fails_the_start():
    port = free_port()
    quits = ServiceEntry(
        name="asr", command=[sys.executable, "-c", "raise SystemExit(3)"], port=port
    )
    with pytest.raises(
        FdbError, match=rf"^service 'asr' exited with code 3 before :{port} answered$"
    ):
        Services([quits], poll_s=0.2).start()
    silent = ServiceEntry(
        name="llm", command=[sys.executable, "-c", "import time; time.sleep(60)"], port=port
    )
    services = Services([silent], poll_s=0.2, ready_timeout_s=1.0)
    with pytest.raises(FdbError, match=rf"service 'llm' did not answer on :{port} within 1 s"):
        services.start()
    assert services.started[0].process.returncode is not None  # stopped after the failure


def test_serve_reports_a_service_that_exits_before_ready(tmp_path):
    port = free_port()
    config = tmp_path / "launch.yaml"
    config.write_text(
        f"services:\n  - name: tts\n    command: ['{sys.executable}', -c, 'raise SystemExit(4)']\n"
        f"    port: {port}\n"
    )
    with pytest.raises(
        FdbError, match=rf"service 'tts' exited with code 4 before :{port} answered"
    ):
        serve(port=free_port(), config=config, log_level="warning")


def test_stop_escalates_to_sigkill_and_watch_sees_an_exit():
    port, other = free_port(), free_port()
    stubborn = _entry("stubborn", port, "--ignore-sigterm")
    quitter = _entry(
        "quitter", other, "--ignore-sigterm", "--exit-after", "2.5", "--exit-code", "5"
    )
    services = Services([stubborn, quitter], poll_s=0.1, stop_grace_s=1.0)
    services.start()
    exited: list[BaseException] = []
    seen = threading.Event()
    services.watch(lambda error: (exited.append(error), seen.set()), poll_s=0.1)
    assert seen.wait(10)
    assert str(exited[0]) == "service 'quitter' exited with code 5"
    started = time.monotonic()
    services.stop()
    assert services.started[0].process.returncode == -signal.SIGKILL
    assert time.monotonic() - started >= 0.9 and not answers(port)


def test_a_service_exiting_while_serving_stops_the_server(tmp_path, fake):
    port = free_port()
    config = tmp_path / "launch.yaml"
    entry = _entry("flaky", port, "--ignore-sigterm", "--exit-after", "3", "--exit-code", "6")
    config.write_text(
        yaml_dump({"services": [entry.model_dump()], **_nodes(fake.base_url)}), encoding="utf-8"
    )
    code = (
        f"from pathlib import Path; from serving.launcher import serve; serve(port={free_port()}, "
        f"config=Path({str(config)!r}))"
    )
    run = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode != 0
    assert "service 'flaky' exited with code 6" in run.stderr


def _healthy(base_url: str) -> bool:
    try:
        return httpx.get(f"{base_url}/health", timeout=0.5).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.mark.slow
@pytest.mark.parametrize(
    "sig",
    [signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGKILL],
    ids=["sigterm", "sigint", "sighup", "sigkill"],
)
def test_a_stopped_or_killed_server_takes_its_services_along(tmp_path, sig):
    """#23/#25: `fdb serve --config` with services: on SIGTERM uvicorn raised the signal again
    before the `finally` that stops them, and after kill -9 nothing could; either way the service
    kept running and held its port. Now SIGTERM and SIGHUP stop them as Ctrl-C (SIGINT) does, and
    the services of a server killed with -9 get SIGTERM from the kernel (the parent-death
    signal)."""
    port = free_port()
    config = tmp_path / "launch.yaml"
    config.write_text(
        yaml_dump(
            {
                "services": [_entry("voice-stack", port).model_dump()],
                **_nodes(f"http://127.0.0.1:{port}/v1"),
            }
        ),
        encoding="utf-8",
    )
    server_port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "fdb", "serve", "--config", str(config), "--port", str(server_port)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while not (answers(port, timeout_s=0.5) and _healthy(f"http://127.0.0.1:{server_port}")):
            assert proc.poll() is None and time.monotonic() < deadline, (
                "the server or its service never came up"
            )
            time.sleep(0.2)
        os.kill(
            proc.pid, sig
        )  # the server's pid only: its services run in process groups of their own
        proc.wait(timeout=60)
        if (
            sig != signal.SIGKILL
        ):  # stopped by the server itself (its whole process group), not the kernel
            assert proc.returncode == 0, f"fdb serve ended with {proc.returncode} on {sig.name}"
        deadline = time.monotonic() + 20
        while answers(port, timeout_s=0.5) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not answers(port, timeout_s=0.5), "the service outlived the server that started it"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        subprocess.run(
            ["pkill", "-9", "-f", f"openai_services --port {port}"], check=False
        )  # only if it failed


# ------------------------------------------------------------------------------ end to end


def _launch_yaml(port: int) -> str:
    services = [
        {
            "name": "voice-stack",
            "command": [*SERVICE, "--port", str(port)],
            "port": port,
            "env": {"PYTHONPATH": str(REPO)},
        }
    ]
    return yaml_dump(
        {
            "system": "embedded-cascade",
            "max_sessions": 1,
            "services": services,
            **_nodes(f"http://127.0.0.1:{port}/v1"),
        }
    )


async def _one_turn(ws_url: str, pcm: bytes) -> Client:
    client = await Client.connect(ws_url)
    await client.open_session()
    await client.send_audio(pcm, interval_s=0.02)
    await client.until("response.done", 40)
    await client.close()
    return client


def test_spoken_question_through_three_service_nodes(tmp_path, question_pcm):
    """The server starts the services entry, probes the three nodes, answers a spoken question
    over /v1/realtime with the services' words and voice, and stops the service on shutdown;
    the key reaches every Authorization header and no file or log."""
    port = free_port()
    with launched_server(tmp_path, _launch_yaml(port), {KEY_ENV: SECRET}) as server:
        health = httpx.get(f"{server.base_url}/health").text
        caps = httpx.get(f"{server.base_url}/v1/realtime/capabilities").json()
        client = asyncio.run(_one_turn(server.ws_url, question_pcm))
        seen = httpx.get(f"http://127.0.0.1:{port}/test/requests").json()
    log_path = server.log_path
    heard = client.of_type("conversation.item.input_audio_transcription.completed")[0]["transcript"]
    assert "france" in heard.lower()
    said = client.of_type("response.output_audio_transcript.done")[0]["transcript"]
    assert "Paris" in said
    audio = sum(
        len(base64.b64decode(e["delta"])) for e in client.of_type("response.output_audio.delta")
    )
    assert audio / 2 / 24000 > 1.0  # Piper's "The capital of France is Paris." at 24 kHz
    assert caps["service_nodes"]["llm"] == {"kind": "openai_chat", "model": "scripted-chat"}
    assert caps["voices"] == ["default"] and caps["speech"]["backend"] == "openai_speech"
    assert caps["speech"]["sample_rate"] == 24000
    paths = {r["path"] for r in seen["requests"]}
    assert {"/v1/audio/transcriptions", "/v1/chat/completions", "/v1/audio/speech"} <= paths
    # The node leaves temperature null: granted as null, and no chat request carries the field.
    granted = client.of_type("session.updated")[0]["session"]["sglang"]["sampling"]
    assert granted["temperature"] is None
    chats = [r["body"] for r in seen["requests"] if r["path"] == "/v1/chat/completions"]
    assert chats and all("temperature" not in body for body in chats)
    assert all(
        r["auth"] == f"Bearer {SECRET}"
        for r in seen["requests"]
        if r["path"] != "/v1/models" or r["auth"] is not None
    )
    text = log_path.read_text(errors="replace")
    assert "service 'voice-stack' ready" in text and "stopping service 'voice-stack'" in text
    assert not answers(port), "the started service must stop with the server"
    with pytest.raises(ProcessLookupError):
        os.kill(seen["pid"], 0)
    assert SECRET not in health and KEY_ENV in health
    for path in Path(tmp_path).rglob("*"):
        if path.is_file():
            assert SECRET not in path.read_text(errors="replace"), path


def test_a_chat_service_failing_mid_session_fails_that_session_only(tmp_path, question_pcm):
    """The chat endpoint starts answering 500 while two sessions are open: the session whose
    turn needs it gets a fatal error event naming the node and closes 1011; the other session
    carries on (a turn once the service is back); the server stays healthy and the key stays out."""
    fake = start_in_thread(tone=True)
    try:
        launch = yaml_dump(
            {"system": "embedded-cascade", "max_sessions": 2, **_nodes(fake.base_url)}
        )
        with launched_server(tmp_path, launch, {KEY_ENV: SECRET}) as server:

            async def scenario() -> tuple[Client, Client, int]:
                failing, other = (
                    await Client.connect(server.ws_url),
                    await Client.connect(server.ws_url),
                )
                await failing.open_session()
                await other.open_session()
                fake.state.chat_status = 500
                with contextlib.suppress(
                    websockets.ConnectionClosed
                ):  # it may close before the last packet
                    await failing.send_audio(question_pcm)
                await asyncio.wait(
                    {failing._reader}, timeout=40
                )  # its reader ends on the 1011 close
                code = (failing.ws.close_code, failing.ws.close_reason)
                fake.state.chat_status = 200
                await other.send_audio(question_pcm)
                await other.until("response.done", 40)
                await other.send("session.close")
                await other.until("session.closed", 10)
                assert await other.wait_closed(10) == (1000, "client_closed")
                return failing, other, code

            failing, other, (code, reason) = asyncio.run(scenario())
            health = httpx.get(f"{server.base_url}/health")
        errors = failing.of_type("error")
        assert code == 1011 and errors and errors[-1]["sglang"]["fatal"], (code, reason, errors)
        assert "chat/completions answered 500" in errors[-1]["error"]["message"]
        assert SECRET not in str(errors)
        assert not other.of_type("error")
        assert "Paris" in other.of_type("response.output_audio_transcript.done")[0]["transcript"]
        assert health.status_code == 200 and health.json()["sessions"] == 0
        assert SECRET not in server.log_path.read_text(errors="replace")
    finally:
        fake.stop()
