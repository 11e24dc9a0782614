"""v1.0 interruption relevance: takeover samples only, at most three identical requests, a
never-parsing sample fails the subset with its retries reported, takeovers never inflated; the
official prompt from a checkout or fdb's own rubric, labeled."""

from __future__ import annotations

from benchmarks.support.trees import Interrupt, Pair, Repeat, judge_config
from fdb.io import read_json, read_jsonl, sha256_file
from fdb.official_source import RELEVANCE_SCORER
from judges import JudgeSettings, judge_repeat
from judges.relevance_rubric import FDB_RELEVANCE_PROMPT
from tests.conftest import needs_behavior_prompt
from tests.judges.conftest import OPENAI_KEY
from tests.judges.test_official import fake_checkout

SAMPLES = [
    Interrupt("1", reply="Fiction is great, try a novel #rating=5"),
    Interrupt("2", reply="ok"),
    Interrupt("3", reply="I cannot format my rating #unparsable"),
    Interrupt("4", missing=("output.json",)),
    Interrupt("5", eligible=False),
    Interrupt("6", reply="Answer from another model #wrongmodel"),
    Interrupt("7", reply="Sure, fiction it is then #rating=3"),
]


def _ledger(repeat, settings):
    return read_jsonl(repeat / "v10" / "reference" / "judge" / settings.name / "ledger.jsonl")


def test_a_sample_that_never_parses_fails_the_subset(tmp_path, fake):
    repeat = Repeat(tmp_path / "repeat-1", interrupts=SAMPLES).write()
    settings = JudgeSettings.custom(judge_config(tmp_path / "judge"), fake.base_url)
    rel = judge_repeat(repeat, settings).relevance
    got = {s.sample_id.split("/")[1]: (s.outcome, s.attempts, s.rating) for s in rel.samples}
    assert got == {
        "1": ("valid", 1, 5),
        "2": ("no_takeover", 0, None),
        "3": ("failed", 3, None),
        "4": ("missing_transcript", 0, None),
        "5": ("ineligible", 0, None),
        "6": ("model_mismatch", 1, None),
        "7": ("valid", 1, 3),
    }
    assert rel.status == "failed" and rel.relevance is None and rel.rated == 2
    assert rel.failed_samples == ["synthetic_user_interruption/3", "synthetic_user_interruption/6"]
    assert (rel.selected, rel.evaluated, rel.takeovers, rel.retries, rel.requests) == (
        7,
        5,
        4,
        2,
        6,
    )
    assert rel.takeover_rate == 4 / 5  # each takeover counted once, whatever its retries
    rows = [r for r in _ledger(repeat, settings) if r["sample_id"].endswith("/3")]
    assert len(rows) == 3 and rows[0]["request"] == rows[1]["request"] == rows[2]["request"]
    assert rows[0]["request"]["seed"] == 0 and rows[0]["request"]["max_tokens"] == 512
    assert rows[0]["request"]["chat_template_kwargs"] == {"enable_thinking": False}
    assert rows[0]["request"]["messages"][0]["content"] == FDB_RELEVANCE_PROMPT
    assert rel.rubric["source"] == "fdb" and "not the official prompt" in rel.rubric["label"]
    on_disk = read_json(repeat / "v10" / "reference" / "judge" / settings.name / "relevance.json")
    assert on_disk["schema"] == "fdb-v1.0-relevance-1" and on_disk["retries"] == 2


def test_all_rated_gives_the_mean(tmp_path, fake):
    repeat = Repeat(tmp_path / "repeat-1", interrupts=[SAMPLES[0], SAMPLES[1], SAMPLES[6]]).write()
    rel = judge_repeat(
        repeat, JudgeSettings.custom(judge_config(tmp_path / "judge"), fake.base_url)
    ).relevance
    assert (
        rel.status == "complete"
        and rel.relevance == 4.0
        and rel.retries == 0
        and rel.takeovers == 2
    )


@needs_behavior_prompt
def test_official_prompt_and_message_from_a_checkout(tmp_path, fake):
    checkout, head = fake_checkout(tmp_path)
    repeat = Repeat(
        tmp_path / "repeat-1", pairs=[Pair("user_interruption", "1")], interrupts=SAMPLES[:1]
    ).write()
    settings = JudgeSettings.custom(
        judge_config(tmp_path / "judge"),
        fake.base_url,
        reference_source=checkout,
        accept_revision=head,
    )
    summary = judge_repeat(repeat, settings)
    assert summary.behavior.all.judged == 1 and summary.relevance.status == "complete"
    rubric = summary.relevance.rubric
    assert rubric["source"] == "official" and rubric["sha256"] == sha256_file(
        checkout / RELEVANCE_SCORER
    )
    assert (
        rubric["checkout"]["accepted_revision"] == head
        and f"Full-Duplex-Bench {head[:7]} (accepted" in rubric["label"]
    )
    assert summary.behavior.source["checkout"]["differences"] == []  # behavior.txt matches its pin
    request = _ledger(repeat, settings)[0]["request"]
    assert request["messages"][0]["content"] == "\n   TEST PROMPT: rate 0-5.\n   "
    assert (
        request["messages"][1]["content"].splitlines()[1].strip()
        == "- Contextual user turn: Suggest some books on personal development."
    )


def test_gpt_judge_asks_gpt_4_turbo_exactly_like_the_official_call(tmp_path, fake):
    fake.reset(api_key=OPENAI_KEY, model="gpt-4-turbo-2024-04-09")
    repeat = Repeat(tmp_path / "repeat-1", interrupts=SAMPLES[:1]).write()
    settings = JudgeSettings.openai(base_url=fake.base_url)
    rel = judge_repeat(repeat, settings).relevance
    assert rel.status == "complete" and rel.relevance == 5.0
    assert set(fake.requests[0]["body"]) == {"model", "messages", "seed"}
    assert (
        fake.requests[0]["body"]["model"] == "gpt-4-turbo" and fake.requests[0]["body"]["seed"] == 0
    )


def test_a_wrong_scorer_hash_blocks_relevance(tmp_path, fake):
    checkout, _ = fake_checkout(tmp_path)
    repeat = Repeat(tmp_path / "repeat-1", interrupts=SAMPLES[:1]).write()
    settings = JudgeSettings.custom(
        judge_config(tmp_path / "judge"), fake.base_url, reference_source=checkout
    )
    summary = judge_repeat(repeat, settings)
    assert summary.relevance.status == "blocked" and "not the pinned" in summary.relevance.message
    assert f"{RELEVANCE_SCORER} has sha256" in summary.relevance.message
    assert fake.requests == [] and not summary.ok
