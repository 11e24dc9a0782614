"""`python -m fdb score v15 judge` on an exported tree: the judge machinery and configuration of
`fdb judge` against the local fake judge, --limit leaves the rest pending and a rerun finishes
them, and the labels equal those `fdb judge` gives the same pairs in a run."""

from __future__ import annotations

from benchmarks.support.trees import REFERENCE, Pair, Repeat, judge_config
from fdb.io import read_json
from tests.conftest import needs_behavior_prompt
from tests.scorers.test_cli_score import cli

PAIRS = [Pair("user_interruption", "1"), Pair("user_backchannel", "1"), Pair("talking_to_other", "2", eligible=False)]


@needs_behavior_prompt
def test_score_v15_judge_is_fdb_judge_on_an_export(tmp_path, fake, monkeypatch, capsys):
    monkeypatch.setenv("FDB_WORK", str(tmp_path / "work"))
    export = Repeat(tmp_path / "copy", pairs=PAIRS).write() / "reference-audio"
    run = Repeat(tmp_path / "work" / "runs" / "r1" / "repeat-1", pairs=PAIRS).write()
    judge = ("--judge-config", str(judge_config(tmp_path / "judge")), "--base-url", fake.base_url,
             "--reference-source", str(REFERENCE), "--concurrency", "4")
    args = ["score", "v15", "judge", "--tree", f"e={export}", "--out", str(tmp_path / "scores"), *judge]
    code, _, err = cli([*args, "--limit", "1"], capsys)
    assert code == 0, err
    partial = read_json(tmp_path / "scores" / "e" / "judge.json")
    assert partial["behavior"]["all"]["outcomes"]["valid"] == 1 and partial["behavior"]["all"]["outcomes"]["pending"] == 1
    assert partial["relevance"] is None and partial["dirs"]["behavior"].startswith("judge-")
    code, _, err = cli(args, capsys)
    assert code == 0, err
    assert cli(["judge", "--run-name", "r1", *judge], capsys)[0] == 0
    scored, judged = read_json(tmp_path / "scores" / "e" / "judge.json"), read_json(run / "judge.json")
    assert scored["judge"] == judged["judge"]  # the same judge identity, configured the same way
    for task in ("behavior", "semantic"):
        assert scored[task]["all"] == judged[task]["all"] and scored[task]["samples"] == judged[task]["samples"]
    assert scored["behavior"]["all"]["outcomes"]["valid"] == 2
