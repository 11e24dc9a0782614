"""`python -m fdb score v15` on an export of the runbook's recording (#24): the same timing, the
same v1.5 tables as the run's own `aggregate`, several cohorts in one call, `declared` from the
dataset, report.txt."""

from __future__ import annotations

from pathlib import Path

import pytest

from fdb.datasets.official import list_ids, load_v15
from fdb.io import read_json
from fdb.layout import RunPaths
from fdb.run_manifest import load_manifest
from recorders.export import export_v15
from tests.scorers.test_cli_score import cli


@pytest.fixture
def scored(demo_run, tmp_path, monkeypatch, capsys):
    """The run after aggregate, its recording exported again outside the run layout, and both
    trees scored as two cohorts (`export`, `run`) by timing, judge (none configured), summarize
    and report."""
    demo_run.restore("aggregate")
    for name in ("JUDGE_CONFIG", "JUDGE_URL", "OPENAI_API_KEY", "JUDGE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("FDB_WORK", str(demo_run.work))
    run = RunPaths(demo_run.run)
    rep, use = run.repeat(1), load_manifest(run).datasets["v1.5"]
    pairs = [
        p
        for ps in load_v15(Path(use.root)).values()
        for p in ps
        if f"{p.category}/{p.id}" in use.sample_ids
    ]
    export = tmp_path / "export"
    export_v15([rep.recording / "shard-0"], pairs, export, dataset_revision=use.revision)
    out, trees = (
        tmp_path / "scores",
        ["--tree", f"export={export}", "--tree", f"run={rep.reference_audio}"],
    )
    for verb in (["timing", *trees], ["judge", *trees], ["summarize", *trees]):
        code, _, err = cli(["score", "v15", *verb, "--out", str(out)], capsys)
        assert code == 0, err
    code, text, err = cli(["score", "v15", "report", "--scores", str(out)], capsys)
    assert code == 0, err
    return run, use, out, text


def _table_rows(text: str, start: str) -> list[str]:
    """The Markdown table rows of the section that begins with the line ``start``."""
    lines = text.splitlines()
    begin = lines.index(start) + 1
    end = next((i for i in range(begin, len(lines)) if lines[i].startswith("## ")), len(lines))
    return [line for line in lines[begin:end] if line.startswith("|")]


def test_score_v15_on_an_export_reproduces_the_runs_numbers(scored):
    run, use, out, text = scored
    results = read_json(run.results_json)["v1.5"]["repeat-1"]
    rows = _table_rows(run.results_md.read_text(), "## v1.5")
    assert rows and any("user_interruption" in r for r in rows)
    summary = read_json(out / "summary.json")
    for engine in ("export", "run"):
        assert (
            read_json(out / engine / "timing" / "summary.json")["categories"]
            == results["categories"]
        )
        assert summary["cohorts"][engine]["timing"]["categories"] == results["categories"]
        assert (
            _table_rows(text, f"## {engine}") == rows
        )  # every cell of the v1.5 tables, intervals included
    assert (out / "report.txt").read_text() == text


def test_declared_is_the_datasets_size_and_report_txt_shows_the_coverage(scored):
    run, use, out, text = scored
    cohorts = read_json(out / "summary.json")["cohorts"]
    size = len(list_ids(Path(use.root), "v1.5")["user_interruption"])
    assert cohorts["run"]["populations"]["user_interruption"] == {
        "declared": size,
        "selected": 1,
        "eligible": 1,
        "ineligible": 0,
    }
    assert (
        cohorts["export"]["populations"]["user_interruption"]["declared"] is None
    )  # not a run's tree
    assert "is not a run's repeat-N/reference-audio" in cohorts["export"]["declared_note"]
    assert f"user_interruption declared {size}, selected 1, eligible 1" in text
    assert cohorts["export"]["verdicts"] == {"pass": 1} and cohorts["export"]["not_evaluated"] == {}
    assert "Timing coverage: timed overlap sessions" in text and "ASR coverage" in text
