"""The runbook end to end on the embedded default: generate --all-stages against the bundled
server on a free loopback port, on a one-sample synthetic selection, then the refusals."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO, free_port


def _fdb(args: list[str], env: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fdb", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    import os

    from fdb.datasets.synthetic import ensure_synthetic

    root = tmp_path_factory.mktemp("fdbwork")
    ensure_synthetic(root, v10_per_subset=1, v15_per_category=1)
    env = dict(os.environ, FDB_WORK=str(root), SERVER_PORT=str(free_port()))
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env.pop("GPU", None)
    return root, env


SELECT = ["--v15-per-subset", "0", "--v15-subset-count", "user_interruption=1",
          "--v10-per-subset", "0", "--v10-subset-count", "candor_turn_taking=1"]


@pytest.fixture(scope="module")
def demo_run(work):
    root, env = work
    done = _fdb(["generate", "--run-name", "e2e", *SELECT, "--all-stages"], env)
    assert done.returncode == 0, done.stderr[-3000:]
    return root / "runs" / "e2e", done


def test_generate_all_stages_writes_results_from_recorded_audio(demo_run):
    run, done = demo_run
    rep = run / "repeat-1"
    assert (rep / "sample-ids.txt").read_text() == "user_interruption/1\n"
    assert (rep / "v10" / "sample-ids.txt").read_text() == "candor_turn_taking/1\n"
    assert "{'pass': 2}" in done.stderr and "{'pass': 1}" in done.stderr
    transcript = json.loads((rep / "v10/reference/candor_turn_taking/1/output.json").read_text())
    assert transcript["chunks"], "the cascade's spoken reply should be transcribed into words"
    unified = json.loads((rep / "v10/reference/unified.json").read_text())
    assert unified["subsets"]["candor_turn_taking"]["counts"]["eligible"] == 1
    timing = json.loads((rep / "scores/summary.json").read_text())
    assert timing["categories"]["user_interruption"]["pairs"] == 1
    text = (run / "RESULTS.md").read_text()
    for heading in ("## v1.5", "## v1.0 unified metrics", "## v1.0 official-rule reference",
                    "## v1.0 replies as transcribed"):
        assert heading in text
    assert transcript["chunks"][0]["text"].strip() in text
    assert json.loads((run / "run.json").read_text())["datasets"]["v1.0"]["source"] == "synthetic"


def test_aggregate_is_deterministic(demo_run, work):
    run, _ = demo_run
    _, env = work
    first = (run / "RESULTS.md").read_bytes()
    again = _fdb(["aggregate", "--run-name", "e2e", "--quiet"], env, timeout=60)
    assert again.returncode == 0, again.stderr
    assert (run / "RESULTS.md").read_bytes() == first


def test_refusals_are_one_line_with_the_fix(demo_run, work):
    _, env = work
    again = _fdb(["generate", "--run-name", "e2e", *SELECT], env, timeout=120)
    assert again.returncode == 2
    assert "already holds a recording" in again.stderr and "--repeat" in again.stderr
    other = _fdb(["generate", "--run-name", "e2e", "--repeat", "2", *SELECT[:4],
                  "--v10-per-subset", "0", "--v10-subset-count", "synthetic_pause_handling=1"], env, timeout=120)
    assert other.returncode == 2 and "selects different v1.0 samples" in other.stderr
    v15_only = _fdb(["generate", "--run-name", "e2e", "--repeat", "2", *SELECT[:4], "--v10-per-subset", "0"],
                    env, timeout=120)
    assert v15_only.returncode == 2 and "v1.0 left out" in v15_only.stderr
    none = _fdb(["generate", "--run-name", "x", "--v15-per-subset", "0", "--v10-per-subset", "0"], env, timeout=120)
    assert none.returncode == 2 and "leaves both v1.0 and v1.5 out" in none.stderr
    missing = _fdb(["generate", "--run-name", "y", "--v10-dataset-root", "/nonexistent/v1.0",
                    "--v15-per-subset", "0"], env, timeout=120)
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    assert len([line for line in missing.stderr.splitlines() if line.strip()]) == 1
