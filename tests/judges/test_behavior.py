"""v1.5 behavior labels against the local fake judge: every scripted reply, bounded attempts,
resumption, --retry-failed, stale inputs, the concurrency cap and the pending path."""

from __future__ import annotations

import json

import pytest

from benchmarks.support.trees import REFERENCE, Pair, Repeat, judge_config
from fdb.errors import FdbError
from fdb.io import read_json, read_jsonl
from fdb.stats import WILSON_Z_NORMALDIST, wilson
from judges import JudgeSettings, judge_repeat
from judges.behavior import behavior_message
from judges.official import behavior_prompt
from tests.conftest import needs_behavior_prompt
from tests.judges.conftest import CUSTOM_KEY

PAIRS = [
    Pair("user_interruption", "1"),
    Pair("user_interruption", "2", reply="I will answer that #malformed-once"),
    Pair("user_interruption", "3", reply="I will answer that #malformed"),
    Pair("user_interruption", "10", missing=("output.json",)),
    Pair("user_backchannel", "1", reply="Continuing the story #label=C_RESUME"),
    Pair("user_backchannel", "2", reply="Another model #wrongmodel"),
    Pair("talking_to_other", "1", reply="Slow reply #timeout"),
    Pair("talking_to_other", "2", reply="Server error #500"),
    Pair("background_speech", "1", reply="Strange label #badlabel"),
    Pair("background_speech", "2", reply="Cut reply #length"),
    Pair("background_speech", "3", eligible=False),
]
EXPECTED = {
    "user_interruption/1": ("valid", 1),
    "user_interruption/2": ("valid", 2),
    "user_interruption/3": ("failed", 3),
    "user_interruption/10": ("missing_transcript", 0),
    "user_backchannel/1": ("valid", 1),
    "user_backchannel/2": ("model_mismatch", 1),
    "talking_to_other/1": ("failed", 3),
    "talking_to_other/2": ("failed", 3),
    "background_speech/1": ("invalid_label", 1),
    "background_speech/2": ("invalid_label", 1),
    "background_speech/3": ("ineligible", 0),
}


@pytest.fixture(scope="module")
def judged(tmp_path_factory, fake_server):
    """All scripted replies, judged once for the read-only tests of this module."""
    tmp = tmp_path_factory.mktemp("behavior")
    repeat = Repeat(tmp / "repeat-1", pairs=PAIRS).write()
    settings = JudgeSettings.custom(
        judge_config(tmp / "judge"), fake_server.base_url, reference_source=REFERENCE, timeout_s=1.5
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CUSTOM_JUDGE_API_KEY", CUSTOM_KEY)
        fake_server.reset(api_key=CUSTOM_KEY)
        return repeat, settings, judge_repeat(repeat, settings)


@pytest.fixture
def small(tmp_path, fake):
    """Fast failures only (parse, HTTP 500), for the tests that rerun or change the repeat."""
    pairs = [
        Pair("user_interruption", "1"),
        Pair("user_interruption", "2", reply="x #malformed"),
        Pair("user_backchannel", "1", reply="x #500"),
        Pair("user_backchannel", "2", reply="x #wrongmodel"),
    ]
    repeat = Repeat(tmp_path / "repeat-1", pairs=pairs).write()
    settings = JudgeSettings.custom(
        judge_config(tmp_path / "judge"), fake.base_url, reference_source=REFERENCE
    )
    return repeat, settings, judge_repeat(repeat, settings)


def _behavior_ledger(repeat, settings):
    return read_jsonl(repeat / f"judge-{settings.name}" / "ledger.jsonl")


@needs_behavior_prompt
def test_every_scripted_reply_gets_its_outcome(judged):
    repeat, settings, summary = judged
    got = {s.sample_id: (s.outcome, s.attempts) for s in summary.behavior.samples}
    assert got == EXPECTED
    reasons = {s.sample_id: s.reason or "" for s in summary.behavior.samples}
    assert reasons["talking_to_other/1"].startswith("transport: APITimeoutError")
    assert "HTTP 500" in reasons["talking_to_other/2"] and reasons[
        "user_interruption/3"
    ].startswith("parse:")
    assert "finish_reason 'length'" in reasons["background_speech/2"]
    assert summary.behavior.status == "has_failures" and not summary.ok
    on_disk = read_json(repeat / f"judge-{settings.name}" / "summary.json")
    assert (
        on_disk["schema"] == "fdb-v1.5-behavior-1"
        and on_disk == read_json(repeat / "judge.json")["behavior"]
    )


@needs_behavior_prompt
def test_shares_are_over_judged_pairs_with_wilson(judged):
    _, _, summary = judged
    ui = summary.behavior.categories["user_interruption"]
    assert (ui.selected, ui.eligible, ui.judged) == (4, 4, 2)
    assert ui.outcomes["failed"] == 1 and ui.outcomes["missing_transcript"] == 1
    assert ui.labels["C_RESPOND"].share == 1.0 and tuple(ui.labels["C_RESPOND"].ci95) == wilson(
        2, 2, WILSON_Z_NORMALDIST
    )
    bs = summary.behavior.categories["background_speech"]
    assert (
        bs.judged == 0
        and bs.labels["C_UNKNOWN"].share is None
        and bs.labels["C_UNKNOWN"].ci95 is None
    )
    everything = summary.behavior.all
    assert everything.selected == len(PAIRS) and everything.judged == 3
    assert sum(everything.outcomes.values()) == len(PAIRS)


@needs_behavior_prompt
def test_requests_follow_the_official_message_and_the_config(judged):
    repeat, settings, _ = judged
    rows = [
        r for r in _behavior_ledger(repeat, settings) if r["sample_id"] == "user_interruption/2"
    ]
    assert [r["request"]["seed"] for r in rows] == [1, 2] and [r["outcome"] for r in rows] == [
        "unparsed",
        "valid",
    ]
    request = rows[0]["request"]
    folder = repeat / "reference-audio" / "user_interruption" / "2"
    t = {
        n: read_json(folder / f"{n}.json")
        for n in ("clean_input", "input", "clean_output", "output")
    }
    assert request["messages"][0]["content"] == behavior_prompt(REFERENCE).text
    assert request["messages"][1]["content"] == behavior_message(
        t["clean_input"], t["input"], t["clean_output"], t["output"]
    )
    assert (
        request["model"] == "judge-model"
        and request["temperature"] == 0.0
        and request["max_tokens"] == 512
    )
    assert request["top_k"] == -1 and request["chat_template_kwargs"] == {"enable_thinking": False}
    assert rows[1]["reply"]["model"] == "judge-model"


@needs_behavior_prompt
def test_rerun_skips_finished_and_retry_failed_resends_only_failures(small, fake):
    repeat, settings, first = small
    before = len(_behavior_ledger(repeat, settings))
    fake.requests.clear()
    again = judge_repeat(repeat, settings)
    assert fake.requests == [] and len(_behavior_ledger(repeat, settings)) == before
    assert [s.model_dump() for s in again.behavior.samples] == [
        s.model_dump() for s in first.behavior.samples
    ]
    judge_repeat(repeat, settings, retry_failed=True)
    resent = {r["sample_id"] for r in _behavior_ledger(repeat, settings)[before:]}
    assert resent == {"user_interruption/2", "user_backchannel/1"}


def test_changed_transcripts_stop_the_rerun(small):
    repeat, settings, _ = small
    path = repeat / "reference-audio" / "user_interruption" / "1" / "output.json"
    path.write_text(json.dumps({"text": "new words", "chunks": []}))
    with pytest.raises(FdbError, match="inputs changed"):
        judge_repeat(repeat, settings)


@needs_behavior_prompt
def test_concurrency_cap_holds(tmp_path, fake):
    fake.reset(api_key=fake.api_key, delay_s=0.1)
    pairs = [Pair("user_interruption", str(i)) for i in range(1, 9)]
    repeat = Repeat(tmp_path / "repeat-1", pairs=pairs).write()
    settings = JudgeSettings.custom(
        judge_config(tmp_path / "judge"), fake.base_url, reference_source=REFERENCE, concurrency=3
    )
    summary = judge_repeat(repeat, settings)
    assert summary.behavior.all.judged == 8 and summary.behavior.status == "complete"
    assert fake.max_in_flight == 3
    assert read_json(repeat / f"judge-{settings.name}" / "identity.json")["params"]["seeds"] == [
        1,
        2,
        3,
    ]


def test_without_a_judge_everything_is_pending(tmp_path):
    repeat = Repeat(tmp_path / "repeat-1", pairs=PAIRS[:3]).write()
    summary = judge_repeat(repeat, None, pending_reason="no judge is configured: set ...")
    assert summary.statuses() == {"behavior": "pending", "semantic": "pending", "relevance": None}
    assert [s.outcome for s in summary.behavior.samples] == ["pending"] * 3 and summary.ok
    assert summary.judge == {"configured": False, "reason": "no judge is configured: set ..."}
    assert sorted(p.name for p in repeat.iterdir()) == [
        "judge.json",
        "reference-audio",
        "sample-ids.txt",
    ]


def test_without_a_checkout_behavior_is_not_run_and_the_rest_runs(tmp_path, fake):
    repeat = Repeat(tmp_path / "repeat-1", pairs=PAIRS[:1]).write()
    settings = JudgeSettings.custom(judge_config(tmp_path / "judge"), fake.base_url)
    summary = judge_repeat(repeat, settings)
    assert summary.behavior.status == "not_run" and "--reference-source" in summary.behavior.message
    assert (
        summary.behavior.all.judged == 0 and summary.behavior.all.labels["C_RESPOND"].share is None
    )
    assert (
        summary.semantic.status == "complete" and summary.ok
    )  # a missing checkout is no failure of the step
