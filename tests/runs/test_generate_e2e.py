"""The runbook end to end on the embedded default: generate against the bundled server, then
asr, judge and aggregate (tests/runs/conftest.py), then the refusals."""

from __future__ import annotations

import json

from tests.runs.conftest import SELECT
from tests.runs.conftest import fdb as _fdb


def test_generate_then_each_step_writes_results_from_recorded_audio(demo_run):
    demo_run.restore("aggregate")
    run, done = demo_run.run, demo_run.outputs["generate"]
    rep = run / "repeat-1"
    assert (rep / "sample-ids.txt").read_text() == "user_interruption/1\n"
    assert (rep / "v10" / "sample-ids.txt").read_text() == "candor_turn_taking/1\n"
    summary = "\n".join(
        line for line in done.stderr.splitlines() if not line.startswith(("recording", "starting"))
    )
    assert 'v1.5: {"pass": 2} {"eligible_pairs": 1' in done.stderr, (
        summary
    )  # the lines that say why
    assert 'v1.0: {"pass": 1} {"eligible_samples": 1' in done.stderr, summary
    assert "record-shard-0.log" in {p.name for p in (rep / "logs").iterdir()}
    assert 'v1.5 ASR: {"ok": 4}' in demo_run.outputs["asr"].stderr
    transcript = json.loads((rep / "v10/reference/candor_turn_taking/1/output.json").read_text())
    assert transcript["chunks"], "the cascade's spoken reply should be transcribed into words"
    unified = json.loads((rep / "v10/reference/unified.json").read_text())
    assert unified["subsets"]["candor_turn_taking"]["counts"]["eligible"] == 1
    timing = json.loads((rep / "scores/summary.json").read_text())
    assert timing["categories"]["user_interruption"]["pairs"] == 1
    text = (run / "RESULTS.md").read_text()
    for heading in (
        "## v1.5",
        "## v1.0 unified metrics",
        "## v1.0 official-rule reference",
        "## v1.0 replies as transcribed",
    ):
        assert heading in text
    assert transcript["chunks"][0]["text"].strip() in text
    assert json.loads((run / "run.json").read_text())["datasets"]["v1.0"]["source"] == "synthetic"


def test_aggregate_is_deterministic(demo_run):
    demo_run.restore("aggregate")
    run, env = demo_run.run, demo_run.env
    first = (run / "RESULTS.md").read_bytes()
    again = _fdb(["aggregate", "--run-name", "e2e", "--quiet"], env, timeout=60)
    assert again.returncode == 0, again.stderr
    assert (run / "RESULTS.md").read_bytes() == first


def test_refusals_are_one_line_with_the_fix(demo_run):
    demo_run.restore("aggregate")
    env = demo_run.env
    again = _fdb(["generate", "--run-name", "e2e", *SELECT], env, timeout=120)
    assert again.returncode == 2
    assert "already holds a recording" in again.stderr and "--repeat" in again.stderr
    other = _fdb(
        [
            "generate",
            "--run-name",
            "e2e",
            "--repeat",
            "2",
            *SELECT[:4],
            "--v10-per-subset",
            "0",
            "--v10-subset-count",
            "synthetic_pause_handling=1",
        ],
        env,
        timeout=120,
    )
    assert other.returncode == 2 and "selects different v1.0 samples" in other.stderr
    v15_only = _fdb(
        ["generate", "--run-name", "e2e", "--repeat", "2", *SELECT[:4], "--v10-per-subset", "0"],
        env,
        timeout=120,
    )
    assert v15_only.returncode == 2 and "v1.0 left out" in v15_only.stderr
    shards = _fdb(
        ["generate", "--run-name", "z", *SELECT, "--num-shards", "1", "--gpus", "0,1"],
        env,
        timeout=120,
    )
    assert shards.returncode == 2 and "leaves model servers idle" in shards.stderr
    none = _fdb(
        ["generate", "--run-name", "x", "--v15-per-subset", "0", "--v10-per-subset", "0"],
        env,
        timeout=120,
    )
    assert none.returncode == 2 and "leaves both v1.0 and v1.5 out" in none.stderr
    missing = _fdb(
        [
            "generate",
            "--run-name",
            "y",
            "--v10-dataset-root",
            "/nonexistent/v1.0",
            "--v15-per-subset",
            "0",
        ],
        env,
        timeout=120,
    )
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    assert len([line for line in missing.stderr.splitlines() if line.strip()]) == 1
