"""`python -m fdb judge`: --help, the pending path that explains what to set, a full run against
the fake judge with its one-screen summary, and a failed control check."""

from __future__ import annotations

import json
import subprocess
import sys

from benchmarks.support.trees import REFERENCE, Interrupt, Pair, Repeat, judge_config
from fdb.io import read_json
from tests.conftest import REPO, needs_behavior_prompt
from tests.judges.conftest import CUSTOM_KEY


def _fdb(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "fdb", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "COLUMNS": "160", **env},
    )


def _work(tmp_path):
    Repeat(
        tmp_path / "runs" / "r1" / "repeat-1",
        pairs=[Pair("user_interruption", "1"), Pair("user_backchannel", "1")],
        interrupts=[Interrupt("1")],
    ).write()
    return {"FDB_WORK": str(tmp_path)}


def test_help_explains():
    out = _fdb("judge", "--help", env={})
    assert out.returncode == 0 and len(out.stdout) > 400
    assert "CUSTOM_JUDGE_API_KEY" in out.stdout and "--retry-failed" in out.stdout


def test_without_a_judge_it_says_what_to_set(tmp_path):
    out = _fdb("judge", "--run-name", "r1", env=_work(tmp_path))
    assert out.returncode == 0, out.stderr
    assert "no judge is configured" in out.stderr and "--judge-config" in out.stderr
    judged = read_json(tmp_path / "runs" / "r1" / "repeat-1" / "judge.json")
    assert judged["judge"]["configured"] is False and judged["behavior"]["status"] == "pending"
    assert judged["relevance"]["status"] == "pending" and judged["relevance"]["takeovers"] == 1


@needs_behavior_prompt
def test_a_full_run_prints_a_summary(tmp_path, fake):
    env = {**_work(tmp_path), "CUSTOM_JUDGE_API_KEY": CUSTOM_KEY}
    config = judge_config(tmp_path / "judge")
    args = (
        "judge",
        "--run-name",
        "r1",
        "--judge-config",
        str(config),
        "--base-url",
        fake.base_url,
        "--reference-source",
        str(REFERENCE),
        "--concurrency",
        "4",
    )
    out = _fdb(*args, env=env)
    assert out.returncode == 0, out.stderr
    assert '{"valid": 2}' in out.stderr and "controls: 18/18 axis statuses match" in out.stderr
    assert "v1.0 interruption relevance: complete; relevance 4.000" in out.stderr
    assert "fdb's own relevance rubric" in out.stderr and "judge.json" in out.stderr
    fake.requests.clear()
    assert (
        _fdb(*args, env=env).returncode == 0 and fake.requests == []
    )  # a rerun skips finished samples


def test_a_failed_control_check_exits_nonzero(tmp_path, fake):
    fake.reset(api_key=CUSTOM_KEY, control_mismatch=True)
    env = {**_work(tmp_path), "CUSTOM_JUDGE_API_KEY": CUSTOM_KEY}
    out = _fdb(
        "judge",
        "--run-name",
        "r1",
        "--judge-config",
        str(judge_config(tmp_path / "judge")),
        "--base-url",
        fake.base_url,
        "--reference-source",
        str(REFERENCE),
        env=env,
    )
    assert out.returncode == 1
    assert "Control check failed: this judge configuration is not accepted." in out.stderr
    assert "controls: 17/18 axis statuses match" in out.stderr
    judged = json.loads((tmp_path / "runs" / "r1" / "repeat-1" / "judge.json").read_text())
    assert judged["semantic"]["status"] == "control_failed" and judged["ok"] is False
