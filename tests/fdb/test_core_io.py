"""fdb core: atomic writes, deterministic JSON, WAV I/O errors, settings, provenance."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fdb.audio import read_wav, resample, wav_bytes, write_wav
from fdb.errors import FdbError, SampleError
from fdb.io import atomic_write_json, dumps_json, sha256_file
from fdb.provenance import redact_command
from fdb.settings import load_settings


def test_atomic_json_is_deterministic_and_leaves_no_temp(tmp_path):
    target = tmp_path / "a" / "x.json"
    atomic_write_json(target, {"b": 1, "a": None})
    first = target.read_bytes()
    atomic_write_json(target, {"a": None, "b": 1})
    assert target.read_bytes() == first
    assert json.loads(first) == {"a": None, "b": 1}
    assert [p.name for p in target.parent.iterdir()] == ["x.json"]


def test_dumps_refuses_nan():
    with pytest.raises(ValueError):
        dumps_json({"x": float("nan")})


def test_wav_roundtrip_and_determinism(tmp_path):
    tone = 0.25 * np.sin(np.linspace(0, 200 * np.pi, 16000)).astype(np.float32)
    path = write_wav(tmp_path / "t.wav", tone, 16000)
    assert wav_bytes(tone, 16000) == path.read_bytes()
    audio = read_wav(path)
    assert audio.rate == 16000 and len(audio.samples) == 16000
    assert np.max(np.abs(audio.samples - tone)) < 1e-4
    up = resample(tone, 16000, 24000)
    assert len(up) == 24000


def test_corrupt_wav_names_sample_and_file(tmp_path):
    bad = tmp_path / "7" / "input.wav"
    bad.parent.mkdir()
    bad.write_bytes(b"RIFF\x00\x00not a wav")
    with pytest.raises(SampleError) as err:
        read_wav(bad, sample="candor_turn_taking/7")
    assert "candor_turn_taking/7" in str(err.value) and "input.wav" in str(err.value)
    with pytest.raises(SampleError):
        read_wav(tmp_path / "missing.wav", sample="x/1")


def test_settings_ports_follow_gpu(monkeypatch, tmp_path):
    monkeypatch.setenv("FDB_WORK", str(tmp_path))
    monkeypatch.delenv("SERVER_PORT", raising=False)
    monkeypatch.delenv("JUDGE_PORT", raising=False)
    monkeypatch.delenv("GPU", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
    s = load_settings()
    assert (s.gpu, s.server_port, s.judge_port) == (1, 8107, 30010)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-abc")
    with pytest.raises(FdbError, match="distinct numeric"):
        load_settings()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setenv("SESSION_TIMEOUT_S", "999")
    with pytest.raises(FdbError, match="230"):
        load_settings()


def test_secrets_are_redacted_from_commands():
    cmd = redact_command(["fdb", "judge", "--api-key", "sk-123", "--token=abc", "--run-name", "x"])
    assert "sk-123" not in cmd and "abc" not in " ".join(cmd)
    assert cmd[-2:] == ["--run-name", "x"]


def test_urls_lose_their_credentials_and_secret_query_values():
    from fdb.io import redact_url

    assert (
        redact_url("ws://me:pw@h:1/v1/realtime?api_key=abc&x=1")
        == "ws://<redacted>@h:1/v1/realtime?api_key=%3Credacted%3E&x=1"
    )
    assert redact_url("http://127.0.0.1:8000") == "http://127.0.0.1:8000"
    assert redact_url("wss://[::1") == "<redacted>"  # cannot be parsed: nothing of it is shown
    cmd = redact_command(
        ["fdb", "generate", "--url", "ws://u:pw@h/v1/realtime?token=t", "--run-name", "x"]
    )
    assert cmd == [
        "fdb",
        "generate",
        "--url",
        "ws://<redacted>@h/v1/realtime?token=%3Credacted%3E",
        "--run-name",
        "x",
    ]


def test_sha256_file(tmp_path):
    p = tmp_path / "f"
    p.write_bytes(b"abc")
    assert sha256_file(p) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


def test_a_killed_writers_temp_file_is_removed_by_the_next_write(tmp_path):
    """#25: a SIGKILL between the temp file and its rename leaves .NAME.PID.RANDOM.tmp; the next
    write of NAME removes it once that writer is gone, and never a live writer's."""
    import os
    import subprocess
    import sys

    from fdb.io import is_write_leftover

    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead_pid = int(dead.stdout)
    stale = tmp_path / f".x.json.{dead_pid}.abc123_x.tmp"
    live = (
        tmp_path / f".x.json.{os.getppid()}.def456_y.tmp"
    )  # the process that runs pytest is alive
    other = (
        tmp_path / f".y.json.{dead_pid}.ghi789_z.tmp"
    )  # another file's leftover: not this write's
    for path in (stale, live, other):
        path.write_text("half")
        assert is_write_leftover(path.name)
    atomic_write_json(tmp_path / "x.json", {"a": 1})
    assert not stale.exists() and live.exists() and other.exists()
    assert sorted(p.name for p in tmp_path.iterdir() if not is_write_leftover(p.name)) == ["x.json"]
    assert not is_write_leftover("x.json") and not is_write_leftover(".pause.json.tmp")
