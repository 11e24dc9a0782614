"""env, serve-judge and serve-model: settings as the runbook lists them."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import REPO


def _fdb(args, **env):
    full = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "GPU", "SERVER_PORT",
                                                             "JUDGE_PORT", "MODEL_PATH", "JUDGE_MODEL_PATH")}
    full.update(env)
    return subprocess.run([sys.executable, "-m", "fdb", *args], cwd=REPO, env=full, capture_output=True,
                          text=True, timeout=60)


def test_env_prints_evaluable_exports(tmp_path):
    done = _fdb(["env"], FDB_WORK=str(tmp_path), CUDA_VISIBLE_DEVICES="2", MODEL_PATH="/m/a b")
    assert done.returncode == 0, done.stderr
    shell = subprocess.run(["bash", "-c", f'eval "$({sys.executable} -m fdb env)"; echo $SERVER_PORT $JUDGE_PORT '
                            '"$MODEL_PATH" $JUDGE_CONFIG'], cwd=REPO, capture_output=True, text=True, timeout=60,
                           env=dict(os.environ, FDB_WORK=str(tmp_path), CUDA_VISIBLE_DEVICES="2", MODEL_PATH="/m/a b"))
    assert shell.stdout.split() == ["8117", "30020", "/m/a", "b", f"{tmp_path}/judge/port-30020/judge-config.json"]
    assert "export GPU=2" in done.stdout and "export MODEL_PATH='/m/a b'" in done.stdout


def test_serve_judge_explains_and_runs_a_given_command(tmp_path):
    done = _fdb(["serve-judge"], FDB_WORK=str(tmp_path), JUDGE_MODEL_PATH="/ckpt/qwen")
    assert done.returncode == 1
    assert "fdb cannot start the Qwen judge" in done.stdout and "/ckpt/qwen" in done.stdout
    assert f"{tmp_path}/judge/port-30000/judge-config.json" in done.stdout
    ran = _fdb(["serve-judge", "--", sys.executable, "-c", "import os; print('port', os.environ['JUDGE_PORT'])"],
               FDB_WORK=str(tmp_path))
    assert ran.returncode == 0 and "port 30000" in ran.stderr
    assert "port 30000" in (tmp_path / "judge/port-30000/judge-server.log").read_text()


def test_manifest_records_model_settings(monkeypatch):
    from fdb.settings import load_settings

    monkeypatch.setenv("MODEL_PATH", "/models/m")
    monkeypatch.setenv("MODEL_REVISION", "503e754")
    monkeypatch.delenv("JUDGE_MODEL_PATH", raising=False)
    assert load_settings().recorded() == {"MODEL_PATH": "/models/m", "MODEL_REVISION": "503e754"}
