"""`python -m fdb score v15 judge` on an exported tree: the judge machinery and configuration of
`fdb judge` against the local fake judge, --limit leaves the rest pending and a rerun finishes
them, and the labels equal those `fdb judge` gives the same pairs in a run."""

from __future__ import annotations

from benchmarks.support.treebuild import FixedSegments
from benchmarks.support.trees import REFERENCE, Pair, Repeat, judge_config
from fdb.io import read_json
from tests.conftest import needs_behavior_prompt
from tests.scorers.test_cli_score import cli

PAIRS = [
    Pair("user_interruption", "1"),
    Pair("user_backchannel", "1"),
    Pair("talking_to_other", "2", eligible=False),
]


@needs_behavior_prompt
def test_score_v15_judge_is_fdb_judge_on_an_export(tmp_path, fake, monkeypatch, capsys):
    monkeypatch.setenv("FDB_WORK", str(tmp_path / "work"))
    export = Repeat(tmp_path / "copy", pairs=PAIRS).write() / "reference-audio"
    run = Repeat(tmp_path / "work" / "runs" / "r1" / "repeat-1", pairs=PAIRS).write()
    judge = (
        "--judge-config",
        str(judge_config(tmp_path / "judge")),
        "--base-url",
        fake.base_url,
        "--reference-source",
        str(REFERENCE),
        "--concurrency",
        "4",
    )
    args = [
        "score",
        "v15",
        "judge",
        "--tree",
        f"e={export}",
        "--out",
        str(tmp_path / "scores"),
        *judge,
    ]
    code, _, err = cli([*args, "--limit", "1"], capsys)
    assert code == 0 and "e: 1 pair(s) still pending after --limit 1: rerun to continue" in err, err
    partial = read_json(tmp_path / "scores" / "e" / "judge.json")
    assert (
        partial["behavior"]["all"]["outcomes"]["valid"] == 1
        and partial["behavior"]["all"]["outcomes"]["pending"] == 1
    )
    assert partial["relevance"] is None and partial["dirs"]["behavior"].startswith("judge-")
    code, _, err = cli(args, capsys)
    assert code == 0, err
    assert cli(["judge", "--run-name", "r1", *judge], capsys)[0] == 0
    scored, judged = (
        read_json(tmp_path / "scores" / "e" / "judge.json"),
        read_json(run / "judge.json"),
    )
    assert scored["judge"] == judged["judge"]  # the same judge identity, configured the same way
    for task in ("behavior", "semantic"):
        assert (
            scored[task]["all"] == judged[task]["all"]
            and scored[task]["samples"] == judged[task]["samples"]
        )
    assert scored["behavior"]["all"]["outcomes"]["valid"] == 2


@needs_behavior_prompt
def test_report_shows_the_label_distribution_semantic_summary_and_replay(
    tmp_path, fake, monkeypatch, capsys
):
    monkeypatch.setenv("FDB_WORK", str(tmp_path / "work"))
    monkeypatch.setattr(
        "fdb.models.vad.SileroVad", FixedSegments
    )  # no audio to read: no model to load
    export = (
        Repeat(tmp_path / "copy", pairs=PAIRS).write() / "reference-audio"
    )  # transcripts, no audio
    out = str(tmp_path / "scores")
    judge = (
        "--judge-config",
        str(judge_config(tmp_path / "judge")),
        "--base-url",
        fake.base_url,
        "--reference-source",
        str(REFERENCE),
    )
    assert (
        cli(["score", "v15", "judge", "--tree", f"e={export}", "--out", out, *judge], capsys)[0]
        == 0
    )
    assert (
        cli(["score", "v15", "timing", "--tree", f"e={export}", "--out", out], capsys)[0] == 1
    )  # no audio
    only = ["--only", "user_interruption/1"]
    code, _, err = cli(
        ["score", "v15", "summarize", "--tree", f"e={export}", "--out", out, *only], capsys
    )
    assert (
        code != 0 and "judged 3 pair(s), the selection has 1" in err
    )  # timing holds 3 too: judge is checked first
    assert cli(["score", "v15", "summarize", "--tree", f"e={export}", "--out", out], capsys)[0] == 0
    semantic = next((tmp_path / "scores" / "e").glob("semantic-*")) / "summary.json"
    replay = tmp_path / "replay.json"
    replay.write_text(
        '{"selected": 4, "replayed": 4, "samples": [{"sample": "user_interruption/1", "variant": '
        '"overlap", "recorded_status": "pass", "status": "mismatch"}]}'
    )
    code, text, err = cli(
        [
            "score",
            "v15",
            "report",
            "--scores",
            out,
            "--semantic-summary",
            str(semantic),
            "--replay",
            str(replay),
        ],
        capsys,
    )
    assert code == 0, err
    assert "Offline replay agreement: 4 of 4 selected sessions replayed; mismatch 1" in text
    assert "user_interruption/1 [overlap]: mismatch (recorded pass)" in text
    assert "Behavior label distribution (judge-model; status complete)" in text
    assert (
        "| all | ineligible 1, valid 2 | 2 | 2 (100.0% [34.2, 100.0]) | 0 (0.0% [0.0, 65.8]) |"
        in text
    )
    assert f"Semantic judge ({semantic})" in text and "| interaction_handling quality |" in text
    assert "Not evaluated: talking_to_other/2: ineligible: protocol verdict fail" in text
    assert (
        "Not evaluated: user_interruption/1: overlap session failed:" in text
    )  # no audio: named, not dropped
