"""The semantic judge: quote verification, the joint axis, quality/coverage, and the control gate
(controls sent with the first batch; a mismatch discards that batch and stops)."""

from __future__ import annotations

from benchmarks.support.trees import REFERENCE, Pair, Repeat, judge_config, transcript
from fdb.io import read_json, read_jsonl
from judges import JudgeSettings, judge_repeat
from judges.semantic.gate import CONTROL_FAILED, load_controls
from judges.semantic.grading import PairView, joint, parse_verdict, payload, quote_found
from tests.conftest import needs_behavior_prompt
from tests.judges.conftest import OPENAI_KEY

PAIRS = [
    Pair("user_interruption", "1"),
    Pair("user_interruption", "2", reply="Poems are lovely #badquote"),
    Pair("user_backchannel", "1"),
    Pair("user_backchannel", "2", missing=("input.json",)),
    Pair("talking_to_other", "1", eligible=False),
]


def _settings(tmp_path, fake, **kw):
    return JudgeSettings.custom(
        judge_config(tmp_path / "judge"), fake.base_url, reference_source=REFERENCE, **kw
    )


def test_controls_are_six_with_18_expected_statuses():
    pairs, expected = load_controls()
    assert len(pairs) == 6 and sum(len(v) for v in expected.values()) == 18
    assert {p.category for p in pairs} == {
        "user_interruption",
        "user_backchannel",
        "talking_to_other",
        "background_speech",
    }
    assert {s for v in expected.values() for s in v.values()} == {"accept", "fail"}


def test_quotes_and_joint():
    assert quote_found("it is ABOUT 330", ["Oh, it is about 330 meters tall."])
    assert quote_found("World’s Fair", ["the 1889 World's Fair"])
    assert (
        not quote_found("it is abou", ["it is about"])
        and not quote_found("", ["x"])
        and not quote_found(None, ["x"])
    )
    assert joint(["accept"] * 3) == "accept" and joint(["accept", "unresolved", "fail"]) == "fail"
    assert joint(["accept", "unresolved", "accept"]) == "unresolved"


def test_parse_verdict_checks_quotes_and_statuses():
    pair = PairView(
        sample_id="x/1",
        category="user_interruption",
        metadata={"timestamps": [4.0, 5.0]},
        transcripts={
            "clean_input": transcript("tell me"),
            "input": transcript("tell me stop"),
            "clean_output": transcript("sure"),
            "output": transcript("early part late part", 3.0, 0.6),
        },
    )
    shown = payload(pair)
    assert shown["reply_from_overlap_on"] == "late part" and shown["overlap_window_s"] == [4.0, 5.0]
    good = (
        '<think>{"interaction_handling": 1}</think>{"interaction_handling": {"status": "accept", '
        '"quote": "late part"}, "relevance": {"status": "fail", "quote": "nothing like this"}, '
        '"grounding": {"status": "unresolved"}}'
    )
    parsed = parse_verdict(good, shown)
    axes = parsed.value["axes"]
    assert [axes[a]["status"] for a in ("interaction_handling", "relevance", "grounding")] == [
        "accept",
        "unresolved",
        "unresolved",
    ]
    assert axes["relevance"]["judge_status"] == "fail" and not axes["relevance"]["quote_found"]
    assert parsed.value["joint"] == "unresolved"
    bad = '{"interaction_handling": {"status": "yes"}, "relevance": {}, "grounding": {}}'
    assert (
        parse_verdict(bad, shown).kind == "invalid"
        and parse_verdict("no json", shown).kind == "unparsed"
    )


def test_grades_are_kept_when_every_control_matches(tmp_path, fake):
    repeat = Repeat(tmp_path / "repeat-1", pairs=PAIRS).write()
    settings = _settings(tmp_path, fake, concurrency=1)
    summary = judge_repeat(repeat, settings)
    sem = summary.semantic
    assert sem.status == "complete" and sem.controls == {
        "passed": True,
        "matched": 18,
        "total": 18,
        "mismatches": [],
    }
    by_id = {s.sample_id: s for s in sem.samples}
    assert by_id["user_interruption/1"].axes == dict.fromkeys(
        ("interaction_handling", "relevance", "grounding", "joint"), "accept"
    )
    assert (
        set(by_id["user_interruption/2"].axes.values()) == {"unresolved"}
        and by_id["user_interruption/2"].outcome == "valid"
    )
    assert (
        by_id["user_backchannel/2"].outcome == "missing_transcript"
        and by_id["talking_to_other/1"].outcome == "ineligible"
    )
    ui = sem.categories["user_interruption"]["joint"]
    assert (ui.selected, ui.accepted, ui.failed, ui.unresolved, ui.quality, ui.coverage) == (
        2,
        1,
        0,
        1,
        1.0,
        0.5,
    )
    assert (
        sem.all["grounding"].coverage == 2 / 5
        and sem.categories["talking_to_other"]["joint"].quality is None
    )
    folder = repeat / f"semantic-{settings.name}"
    comparison = read_json(folder / "controls" / "comparison.json")
    rows = read_jsonl(folder / "ledger.jsonl")
    controls = [r for r in rows if r["task"] == "semantic-control"]
    assert len(controls) == 6 and all(r["sample_id"].startswith("control/") for r in controls)
    request = controls[0]["request"]
    assert (
        request["seed"] == 1
        and request["temperature"] == 0.0
        and request["chat_template_kwargs"] == {"enable_thinking": True}
    )
    # the first batch (concurrency 1: one pair) went out with the controls,
    # the rest after the comparison
    pairs = [r for r in rows if r["task"] == "semantic"]
    assert sum(r["t_utc"] < comparison["compared_utc"] for r in pairs) == 1 and len(pairs) == 3
    assert read_json(folder / "summary.json")["schema"] == "fdb-v1.5-semantic-1"


@needs_behavior_prompt
def test_a_control_mismatch_discards_the_batch_and_stops(tmp_path, fake):
    fake.reset(api_key=fake.api_key, control_mismatch=True)
    repeat = Repeat(tmp_path / "repeat-1", pairs=PAIRS).write()
    settings = _settings(tmp_path, fake)
    summary = judge_repeat(repeat, settings)
    sem = summary.semantic
    assert (
        sem.status == "control_failed" and not summary.ok and summary.behavior.status == "complete"
    )
    assert (
        sem.message.startswith(CONTROL_FAILED)
        and "control-6 grounding: expected fail, got accept" in sem.message
    )
    assert sem.controls["matched"] == 17 and sem.controls["mismatches"] == [
        {"control": "control-6", "axis": "grounding", "expected": "fail", "got": "accept"}
    ]
    folder = repeat / f"semantic-{settings.name}"
    assert (
        read_jsonl(folder / "results.jsonl", partial=True) == []
    )  # nothing graded alongside the controls was kept
    assert all(s.outcome in ("pending", "missing_transcript", "ineligible") for s in sem.samples)
    assert read_json(folder / "controls" / "comparison.json")["passed"] is False
    fake.control_mismatch = False
    again = judge_repeat(repeat, settings)
    assert again.semantic.status == "complete" and again.semantic.all["joint"].accepted == 2


@needs_behavior_prompt
def test_an_openai_judge_runs_no_semantic_grading(tmp_path, fake):
    fake.reset(api_key=OPENAI_KEY)
    repeat = Repeat(tmp_path / "repeat-1", pairs=PAIRS[:1]).write()
    settings = JudgeSettings.openai("judge-model", fake.base_url, reference_source=REFERENCE)
    summary = judge_repeat(repeat, settings)
    assert summary.semantic.status == "not_run" and summary.behavior.all.judged == 1
    assert all("seed" in r["body"] and "temperature" not in r["body"] for r in fake.requests)
    assert summary.dirs["semantic"] is None
