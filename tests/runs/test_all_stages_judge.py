"""--all-stages after the recording: the judge step (original evaluator, behavior labels,
relevance) and aggregate against a local fake judge and a stand-in Full-Duplex-Bench checkout,
configured the way a user does it (serve-judge's judge config, $FDB_WORK/Full-Duplex-Bench,
--accept-revision); and without a checkout, the documented fallback, labeled. The recording and
ASR are the demo run's business (tests/runs/conftest.py): here the transcribed repeat is built
directly and asr is a no-op."""

from __future__ import annotations

import json
import sys

import pytest
from rich.console import Console

from benchmarks.support.fake_openai import FakeJudge
from benchmarks.support.treebuild import V10Tree, turn_json
from benchmarks.support.trees import Pair, Repeat
from fdb.io import atomic_write_json, read_json
from fdb.official_source import BEHAVIOR_PROMPT, PINNED_FILES, RELEVANCE_SCORER
from tests.conftest import git_commit_all
from tests.judges.test_official import SCORER
from tests.reports.test_results_tables import _summary
from tests.scorers.test_v10_evaluator import FAKE_EVALUATE

REPLY = {
    "text": "Sure, here is a much shorter story for you #rating=4",
    "chunks": [
        {"text": w, "timestamp": [6.0 + 0.4 * i, 6.3 + 0.4 * i]}
        for i, w in enumerate("Sure here is a story".split())
    ],
}


@pytest.fixture(scope="module")
def judge_server():
    with FakeJudge() as server:
        yield server


def _repeat(work) -> None:
    """A transcribed repeat: one v1.5 pair with timing, v1.0 turn taking and interruption."""
    rep = work / "runs" / "jp" / "repeat-1"
    Repeat(
        rep, pairs=[Pair("user_interruption", "1", reply="Poems, then. #label=C_RESPOND")]
    ).write()
    atomic_write_json(rep / "scores" / "summary.json", _summary(1.0, 2.0))
    tree = V10Tree(rep / "v10" / "reference")
    tree.add(
        "candor_turn_taking", "1", 5.0, annotation=turn_json(2.0), words=[(3.35, 4.0), (4.1, 4.6)]
    )
    tree.add(
        "synthetic_user_interruption",
        "1",
        9.0,
        transcript_obj=REPLY,
        annotation=[
            {
                "context": "Tell me a story.",
                "interrupt": "A shorter one, please.",
                "timestamp": [3.0, 5.0],
            }
        ],
    )
    tree.finish()
    (rep / "v10" / "sample-ids.txt").write_text(
        "candor_turn_taking/1\nsynthetic_user_interruption/1\n"
    )
    from scorers.v10_official import score_official

    score_official(tree.root)  # asr writes it (official rules, clean-room)


def _checkout(work) -> str:
    """$FDB_WORK/Full-Duplex-Bench laid out like the real one, committed; its HEAD (to accept)."""
    root = work / "Full-Duplex-Bench"
    texts = {
        f"{'v1_v1.5/evaluation'}/evaluate.py": FAKE_EVALUATE,
        RELEVANCE_SCORER: SCORER,
        BEHAVIOR_PROMPT: "Stand-in behaviour prompt: answer with one C label as JSON.\n",
    }
    for rel in PINNED_FILES:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(texts.get(rel, f"# stand-in for {rel}\n"))
    return git_commit_all(root)


@pytest.fixture
def work(tmp_path, monkeypatch, judge_server):
    """FDB_WORK with a judge config written by serve-judge's writer and JUDGE_URL at the fake."""
    import runs.phases as phases
    from fdb.cli.serve_judge import write_config

    for name in (
        "JUDGE",
        "JUDGE_CONFIG",
        "JUDGE_PORT",
        "JUDGE_MODEL_PATH",
        "OPENAI_API_KEY",
        "SCORING_VENV",
        "CUDA_VISIBLE_DEVICES",
        "GPU",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("FDB_WORK", str(tmp_path))
    monkeypatch.setenv("JUDGE_URL", judge_server.base_url)
    monkeypatch.setattr(
        phases, "run_asr", lambda *a, **k: True
    )  # the repeat is transcribed already
    judge_server.reset()
    write_config(
        [sys.executable, "-m", "sglang.launch_server"],
        model_id="Qwen/Qwen3.8-27B",
        model_revision="a" * 40,
        tokenizer_id=None,
        tokenizer_revision=None,
        served_model="judge-model",
        precision="bf16",
        runtime="fake",
    )
    _repeat(tmp_path)
    return tmp_path


def _all_stages(accept_revision=None) -> tuple[bool, str]:
    from runs.phases import run_all_stages

    console = Console(record=True, width=300)
    ok = run_all_stages("jp", 1, console, accept_revision=accept_revision)
    return ok, console.export_text()


def _row(text: str, first: str) -> list[str]:
    line = next(line for line in text.splitlines() if line.startswith(f"| {first} |"))
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_all_stages_with_a_checkout_gives_labels_relevance_and_the_evaluator_column(work):
    head = _checkout(work)
    ok, out = (
        _all_stages()
    )  # not the pinned files, not accepted: the step stops and says how to accept
    assert not ok and f"--accept-revision {head}" in out and "eval_backchannel.py has sha256" in out
    ok, out = _all_stages(accept_revision=head)
    assert ok, out
    rep = work / "runs" / "jp" / "repeat-1"
    judged = read_json(rep / "judge.json")
    behavior, relevance = judged["behavior"], judged["relevance"]
    assert (
        behavior["status"] == "complete" and behavior["all"]["labels"]["C_RESPOND"]["share"] == 1.0
    )
    assert behavior["source"]["checkout"]["accepted_revision"] == head
    assert relevance["status"] == "complete" and relevance["relevance"] == 4.0
    assert (
        relevance["rubric"]["source"] == "official"
        and relevance["rubric"]["checkout"]["accepted_revision"] == head
    )
    evaluator = read_json(rep / "v10" / "reference" / "evaluator.json")
    assert evaluator["subsets"]["candor_turn_taking"]["result"]["Average latency"] == pytest.approx(
        1.35
    )
    assert {d["path"] for d in evaluator["checkout_check"]["differences"]} >= {
        "v1_v1.5/evaluation/eval_backchannel.py"
    }
    text = (work / "runs" / "jp" / "RESULTS.md").read_text()
    assert f"Full-Duplex-Bench {head[:7]} (accepted with --accept-revision" in text
    header = _row(text, "Subset")
    turn = dict(zip(header, _row(text, "candor_turn_taking"), strict=True))
    assert (
        turn["Latency (s) (original evaluator)"] == "1.350 ± 0.000"
    )  # what the stand-in evaluate.py printed
    assert turn["Takeover rate"] == "1.000 ± 0.000" == turn["Takeover rate (original evaluator)"]
    interrupt = dict(zip(header, _row(text, "synthetic_user_interruption"), strict=True))
    assert (
        interrupt["Relevance (0-5)"] == "4.000 ± 0.000"
        and interrupt["Takeover rate (original evaluator)"] == "not run"
    )
    assert (
        interrupt["Backchannel JSD (original evaluator)"] == "n/a"
    )  # as the clean-room column: not its task
    labels = dict(zip(_row(text, "Category"), _row(text, "user_interruption"), strict=True))
    assert labels["C_RESPOND"] == "100.0 ± 0.0%" and labels["Judged pairs"] == "1"
    assert "official prompt of Full-Duplex-Bench" in text
    before = (rep / "v10" / "reference" / "evaluator.json").read_bytes()
    ok, out = _all_stages(
        accept_revision=head[:12]
    )  # a rerun resumes: nothing is evaluated or judged again
    assert ok and "v1.0 evaluator: already evaluated with Full-Duplex-Bench" in out
    assert (rep / "v10" / "reference" / "evaluator.json").read_bytes() == before
    assert (work / "runs" / "jp" / "RESULTS.md").read_text() == text


def test_all_stages_without_a_checkout_runs_the_fallback_and_says_so(work, judge_server):
    ok, out = _all_stages()
    assert ok, out
    judged = read_json(work / "runs" / "jp" / "repeat-1" / "judge.json")
    assert (
        judged["behavior"]["status"] == "not_run"
        and judged["relevance"]["rubric"]["source"] == "fdb"
    )
    assert not (work / "runs" / "jp" / "repeat-1" / "v10" / "reference" / "evaluator.json").exists()
    text = (work / "runs" / "jp" / "RESULTS.md").read_text()
    assert (
        "Behavior labels: not measured — not run (not run without a Full-Duplex-Bench checkout"
        in text
    )
    assert (
        "fdb's own relevance rubric, not the official prompt" in text
        and "(original evaluator)" not in text
    )
    labels = dict(zip(_row(text, "Category"), _row(text, "user_interruption"), strict=True))
    assert labels["C_RESPOND"] == "not measured"
    assert json.loads(json.dumps(judged))["ok"] is True
