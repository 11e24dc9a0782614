"""Run store rules: layout, repeat refusal, selection compatibility, server port checks."""

from __future__ import annotations

import socket

import pytest

from fdb.errors import FdbError
from fdb.layout import RunPaths, check_run_name
from fdb.run_manifest import DatasetUse, RunManifest, ServerUse, check_compatible
from runs.options import parse_turn_detection
from runs.server import ManagedServer, port_is_served


def _manifest(ids: list[str], shards: int = 1) -> RunManifest:
    use = DatasetUse(
        dataset="v1.0", root="/d", source="synthetic", revision="r1", selection={}, sample_ids=ids
    )
    return RunManifest(
        run_name="x",
        datasets={"v1.0": use},
        server=ServerUse(url=None, system="embedded-cascade", model=None, turn_detection={}),
        num_shards=shards,
    )


def test_layout_and_repeat_detection(tmp_path):
    run = RunPaths.of(tmp_path, "demo")
    rep = run.repeat(2)
    assert rep.root == tmp_path / "demo" / "repeat-2"
    assert rep.v10_reference == rep.root / "v10" / "reference"
    assert not rep.holds_recording()
    (rep.v10_recording / "shard-0" / "candor_turn_taking" / "1" / "main").mkdir(parents=True)
    (
        rep.v10_recording / "shard-0" / "candor_turn_taking" / "1" / "main" / "session.json"
    ).write_text("{}")
    assert rep.holds_recording()
    assert [r.number for r in run.repeats()] == [2]
    with pytest.raises(FdbError):
        run.repeat(0)
    with pytest.raises(FdbError):
        check_run_name("../escape")


def test_repeats_must_share_selection_and_shards(tmp_path):
    rep = RunPaths.of(tmp_path, "x").repeat(2)
    check_compatible(_manifest(["a/1"]), _manifest(["a/1"]), rep)
    with pytest.raises(FdbError, match="selects different"):
        check_compatible(_manifest(["a/1"]), _manifest(["a/2"]), rep)
    with pytest.raises(FdbError, match="num-shards"):
        check_compatible(_manifest(["a/1"]), _manifest(["a/1"], shards=2), rep)


def test_turn_detection_option():
    assert parse_turn_detection(None)["type"] == "server_vad"
    assert (
        parse_turn_detection('{"type": "semantic_vad", "eagerness": "high"}')["eagerness"] == "high"
    )
    with pytest.raises(FdbError):
        parse_turn_detection('{"type": "near_field"}')
    with pytest.raises(FdbError):
        parse_turn_detection('{"type": "server_vad"}', "minicpmo-native-pr2377")
    assert parse_turn_detection(None, "minicpmo-native-pr2377") is None
    with pytest.raises(FdbError, match="not JSON"):
        parse_turn_detection("{bad")


def test_busy_port_is_refused_before_starting(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        port = sock.getsockname()[1]
        assert port_is_served("127.0.0.1", port)
        server = ManagedServer(
            system="embedded-cascade", host="127.0.0.1", port=port, log_path=tmp_path / "s.log"
        )
        with pytest.raises(FdbError, match="already serves"):
            server.start()
        assert server.proc is None
