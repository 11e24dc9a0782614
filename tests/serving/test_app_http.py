"""HTTP surface and launcher: /health, /v1/models, capabilities, ports, launch files, extras."""

from __future__ import annotations

import gc
import logging
import socket
import time

import httpx
import pytest
from fastapi.testclient import TestClient

from fdb.errors import FdbError, MissingExtraError
from serving import models as serving_models
from serving.app import create_app
from serving.launcher import GcPauses, freeze_loaded_objects, open_port, serve
from serving.systems import SystemConfig, get_system, load_config_file, resolve_system
from tests.conftest import free_port


def test_health_models_and_capabilities(server):
    health = httpx.get(f"{server.base_url}/health")
    assert health.status_code == 200
    body = health.json()
    assert body["status"] == "healthy"
    assert body["model"] == "fdb/embedded-cascade"
    assert set(body["backends"]) == {"vad", "asr", "llm", "tts", "turn"}
    assert server.saw_starting, "health should answer 503 starting while the models load"
    assert "fdb server ready on http://127.0.0.1:" in server.log()
    assert "objects of loading frozen" in server.log()  # out of the collector's reach

    listed = httpx.get(f"{server.base_url}/v1/models").json()
    assert listed["object"] == "list"
    assert [m["id"] for m in listed["data"]] == ["fdb/embedded-cascade"]

    caps = httpx.get(f"{server.base_url}/v1/realtime/capabilities").json()
    assert caps["interaction"] == "turn_based"
    assert caps["native_full_duplex"] is False
    assert caps["turn_control"] == ["server_vad", "semantic_vad", None]
    assert caps["client_commit"] is True
    assert caps["input_audio_format"] == {"type": "audio/pcm", "rate": 16000}
    assert caps["output_audio_format"] == {"type": "audio/pcm", "rate": 24000}
    assert caps["native_unit_ms"] == 200 and caps["tail_policy"] == "flush"
    assert caps["supports_cancel"] is True and caps["supports_truncate"] is True
    assert caps["sampling_parameters"] == ["temperature", "max_new_tokens_per_unit"]
    assert caps["max_sessions"] == 2  # from launch.yaml
    assert caps["limits"]["session_update_timeout_s"] == 1.0
    assert {"max_input_bytes", "max_output_bytes", "idle_timeout_s"} <= set(caps["limits"])


def test_not_ready_before_models_load():
    """Without its startup (no models loaded) the app answers 503 and refuses sessions."""
    client = TestClient(create_app(SystemConfig()))  # no `with`: the lifespan never runs
    health = client.get("/health")
    assert health.status_code == 503 and health.json()["status"] == "starting"
    caps = client.get("/v1/realtime/capabilities")
    assert caps.status_code == 503 and caps.json()["error"]["message"] == "instance is not ready"
    assert client.get("/v1/models").status_code == 200


def test_busy_port_fails_before_loading(server):
    with pytest.raises(FdbError) as caught:
        serve(port=server.port)
    assert caught.value.message == f"port {server.port} on 127.0.0.1 is already in use"
    assert caught.value.hint == "stop the other server or pass --port"


def test_next_free_port(server, caplog):
    caplog.set_level(logging.INFO, logger="fdb.serving")
    sock = open_port("127.0.0.1", server.port, next_free_port=True)
    try:
        chosen = sock.getsockname()[1]
        assert chosen > server.port
        assert f"Using port {chosen} instead" in caplog.text
    finally:
        sock.close()


def test_missing_package_is_a_missing_extra_error(monkeypatch):
    real_find_spec = serving_models.importlib.util.find_spec

    def find_spec(name, *args):
        return None if name == "llama_cpp" else real_find_spec(name, *args)

    monkeypatch.setattr(serving_models.importlib.util, "find_spec", find_spec)
    port = free_port()
    with pytest.raises(MissingExtraError) as caught:
        serve(port=port)
    assert caught.value.one_line() == (
        "the reply LLM of embedded-cascade needs the Python package 'llama-cpp-python', which is "
        "not installed (install it with: pip install 'fdb[embedded]' (or run `make demo`, "
        "which installs it))"
    )
    with socket.socket() as probe:  # the port was released again
        probe.bind(("127.0.0.1", port))


def test_launch_file_overrides_and_errors(tmp_path):
    good = tmp_path / "launch.yaml"
    good.write_text("system: embedded-cascade\nmax_sessions: 3\nvad: {silence_duration_ms: 800}\n")
    config = load_config_file(good)
    assert config.max_sessions == 3
    assert config.vad.silence_duration_ms == 800 and config.vad.threshold == 0.5
    assert resolve_system("embedded-cascade", good) == config
    assert resolve_system() == get_system("embedded-cascade")

    bad = tmp_path / "bad.yaml"
    bad.write_text("max_sesions: 3\n")
    with pytest.raises(FdbError, match="max_sesions"):
        load_config_file(bad)
    with pytest.raises(FdbError, match="unknown system 'nope'"):
        resolve_system("nope")
    with pytest.raises(FdbError, match="does not exist"):
        load_config_file(tmp_path / "missing.yaml")


def test_a_long_garbage_collection_is_logged_and_loading_is_frozen(caplog, monkeypatch):
    pauses = GcPauses(threshold_ms=20)
    with caplog.at_level(logging.WARNING, logger="fdb.serving"):
        pauses("start", {"generation": 0})
        pauses("stop", {"generation": 0, "collected": 3})  # short: not logged
        pauses("start", {"generation": 2})
        time.sleep(0.03)
        pauses("stop", {"generation": 2, "collected": 7})
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and lines[0].startswith("garbage collection (generation 2) held")
    assert lines[0].endswith("(7 objects collected)") and pauses.longest_ms >= 30
    monkeypatch.setenv("FDB_GC_FREEZE", "0")
    before = gc.get_freeze_count()
    assert freeze_loaded_objects() == 0 and gc.get_freeze_count() == before
    monkeypatch.delenv("FDB_GC_FREEZE")
    try:
        frozen = freeze_loaded_objects()
        # a frozen object freed since (its last reference dropped, by a thread an earlier test
        # left ending) leaves the permanent generation: the count may fall a little, never rise
        assert frozen > 1000 and frozen - 1000 < gc.get_freeze_count() <= frozen
    finally:
        gc.unfreeze()
