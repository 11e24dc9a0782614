"""env, serve-judge and serve-model: settings as the runbook lists them."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from fdb.cli.serve_judge import write_config
from fdb.errors import FdbError
from tests.conftest import REPO


def _fdb(args, **env):
    full = {
        k: v
        for k, v in os.environ.items()
        if k
        not in (
            "CUDA_VISIBLE_DEVICES",
            "GPU",
            "SERVER_PORT",
            "JUDGE_PORT",
            "MODEL_PATH",
            "JUDGE_MODEL_PATH",
        )
    }
    full.update(env)
    return subprocess.run(
        [sys.executable, "-m", "fdb", *args],
        cwd=REPO,
        env=full,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_env_prints_evaluable_exports(tmp_path):
    done = _fdb(["env"], FDB_WORK=str(tmp_path), CUDA_VISIBLE_DEVICES="2", MODEL_PATH="/m/a b")
    assert done.returncode == 0, done.stderr
    shell = subprocess.run(
        [
            "bash",
            "-c",
            f'eval "$({sys.executable} -m fdb env)"; echo $SERVER_PORT $JUDGE_PORT '
            '"$MODEL_PATH" $JUDGE_CONFIG',
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, FDB_WORK=str(tmp_path), CUDA_VISIBLE_DEVICES="2", MODEL_PATH="/m/a b"),
    )
    assert shell.stdout.split() == [
        "8117",
        "30020",
        "/m/a",
        "b",
        f"{tmp_path}/judge/port-30020/judge-config.json",
    ]
    assert "export GPU=2" in done.stdout and "export MODEL_PATH='/m/a b'" in done.stdout


def test_serve_judge_explains_and_runs_a_given_command(tmp_path, monkeypatch):
    done = _fdb(["serve-judge"], FDB_WORK=str(tmp_path), JUDGE_MODEL_PATH="/ckpt/qwen")
    assert done.returncode == 1
    assert "fdb cannot start the Qwen judge" in done.stdout and "/ckpt/qwen" in done.stdout
    assert f"{tmp_path}/judge/port-30000/judge-config.json" in done.stdout
    script = "import os; print('port', os.environ['JUDGE_PORT'])"
    monkeypatch.setenv("FDB_WORK", str(tmp_path))
    monkeypatch.delenv("JUDGE_MODEL_PATH", raising=False)
    monkeypatch.delenv("JUDGE_PORT", raising=False)
    for revision, problem in (
        (None, "no --model-revision and no"),
        ("3e799c4", "not a full 40-hex commit"),
    ):
        with pytest.raises(
            FdbError, match=problem
        ):  # refused before anything is written or started
            write_config(
                ["x"],
                model_id="m",
                model_revision=revision,
                tokenizer_id=None,
                tokenizer_revision=None,
                served_model="s",
                precision="bf16",
                runtime=None,
            )
    assert not (tmp_path / "judge").exists()
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "Qwen3.8-27B.revision").write_text("c" * 40 + "\n")
    ran = _fdb(
        [
            "serve-judge",
            "--runtime",
            "sglang 0.5.2",
            "--",
            sys.executable,
            "-c",
            script,
            "--api-key",
            "sk-judge-secret-91c2",
        ],
        FDB_WORK=str(tmp_path),
        CUSTOM_JUDGE_API_KEY="custom-secret-77ab",
    )
    folder = tmp_path / "judge/port-30000"
    assert ran.returncode == 0 and "port 30000" in ran.stderr, ran.stderr
    assert "port 30000" in (folder / "judge-server.log").read_text()
    _check_judge_launch(folder, ran.stderr)


def _check_judge_launch(folder, stderr: str) -> None:
    """serve-judge's judge-config.json pins its launch receipt, which names the command it
    started (secrets redacted); `judge` reads the config from the port's folder."""
    from judges.config import load_judge_config, resolve_judge
    from judges.launch import load_launch_receipt

    config = load_judge_config(folder / "judge-config.json")  # also checks the receipt's sha256
    receipt = load_launch_receipt(folder / "launch-receipt.json")
    assert (config.model_revision, config.tokenizer_revision, config.served_model) == (
        "c" * 40,
        "c" * 40,
        "qwen3.8-27b",
    )
    assert (
        config.seeds == [1, 2, 3]
        and config.decoding.max_tokens == 512
        and config.enable_thinking is False
    )
    assert receipt.command[:2] == [sys.executable, "-c"] and receipt.command[-2:] == [
        "--api-key",
        "<redacted>",
    ]
    assert (receipt.runtime, receipt.port, receipt.precision) == ("sglang 0.5.2", 30000, "bf16")
    for path in folder.iterdir():
        assert (
            "sk-judge-secret-91c2" not in path.read_text()
            and "custom-secret-77ab" not in path.read_text()
        )
    assert "sk-judge-secret-91c2" not in stderr
    choice = resolve_judge(
        work=folder.parent.parent, env={"JUDGE_URL": "http://127.0.0.1:30000/v1"}
    )
    assert choice.settings is not None and choice.settings.config == config


def test_manifest_records_model_settings(monkeypatch):
    from fdb.settings import load_settings

    monkeypatch.setenv("MODEL_PATH", "/models/m")
    monkeypatch.setenv("MODEL_REVISION", "503e754")
    monkeypatch.delenv("JUDGE_MODEL_PATH", raising=False)
    assert load_settings().recorded() == {"MODEL_PATH": "/models/m", "MODEL_REVISION": "503e754"}
