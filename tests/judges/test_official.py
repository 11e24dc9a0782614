"""Official texts from a checkout (hash-verified, never copied), the official message formats and
parse rules."""

from __future__ import annotations

import json
import textwrap

import pytest

from benchmarks.support.trees import REFERENCE, transcript
from fdb.errors import FdbError
from fdb.io import atomic_write_json, sha256_file
from fdb.official_source import BEHAVIOR_PROMPT, PINNED_FILES, RELEVANCE_SCORER
from fdb.records import OfficialTranscript
from fdb.takeover import official_takeover, transcript_takeover
from judges.behavior import behavior_message, parse_behavior
from judges.inputs import transcript_or_none
from judges.official import behavior_prompt, evaluation_dir, relevance_source
from judges.relevance import parse_rating
from scorers.v10_official import chunk_times
from tests.conftest import git_commit_all, needs_behavior_prompt

# A stand-in for the official scorer: the same structure, with test-only wording.
SCORER = textwrap.dedent('''\
    import re


    def parse_output(data):
        example_pattern = re.compile(
            r"Analysis:\\s*(.*?)\\nI would rate the AI's response as (\\d+)", re.DOTALL
        )
        return {}


    def eval_user_interruption(root_dir, client):
        MODEL_NAME = "gpt-4-turbo"
        seed = 0
        system_msg = """
       TEST PROMPT: rate 0-5.
       """
        for _ in []:
            user_msg = f"""
                    - Contextual user turn: {in_before_interrupt_text}
                    - User interrupting turn: {in_interrupt_text}
                    - AI's response: {out_after_interrupt_text}
                    """
    ''')


def fake_checkout(tmp_path, scorer: str = SCORER):
    """A stand-in checkout (a git work tree): the shared behavior prompt, which matches its pin,
    and a stand-in scorer, which does not; returns (the checkout, its HEAD to accept)."""
    evaluation = tmp_path / "checkout" / "v1_v1.5" / "evaluation"
    (evaluation / "instruction").mkdir(parents=True)
    (evaluation / "instruction" / "behavior.txt").symlink_to(
        REFERENCE / "instruction" / "behavior.txt"
    )
    (evaluation / "eval_user_interruption.py").write_text(scorer)
    return tmp_path / "checkout", git_commit_all(tmp_path / "checkout")


@needs_behavior_prompt
def test_behavior_prompt_is_read_and_verified(tmp_path):
    prompt = behavior_prompt(REFERENCE)
    assert prompt.sha256 == PINNED_FILES[BEHAVIOR_PROMPT] and "behaviour" in prompt.text
    assert prompt.check.differences == [] and prompt.check.accepted_revision is None
    (tmp_path / "instruction").mkdir()
    (tmp_path / "instruction" / "behavior.txt").write_text(prompt.text + " ")
    with pytest.raises(FdbError, match="not the pinned"):
        behavior_prompt(tmp_path)
    with pytest.raises(FdbError, match="not a Full-Duplex-Bench checkout"):
        evaluation_dir(tmp_path / "nothing")


@needs_behavior_prompt
def test_relevance_source_extracts_prompt_and_template(tmp_path):
    checkout, head = fake_checkout(tmp_path)
    src = relevance_source(checkout, head)
    assert (
        src.model == "gpt-4-turbo"
        and src.seed == 0
        and src.system_prompt == "\n   TEST PROMPT: rate 0-5.\n   "
    )
    pad = " " * 16
    assert src.user_message("ctx", "intr", "resp") == (
        f"\n{pad}- Contextual user turn: ctx\n{pad}- User interrupting turn: intr\n"
        f"{pad}- AI's response: resp\n{pad}"
    )
    actual = sha256_file(checkout / RELEVANCE_SCORER)
    assert [d.model_dump() for d in src.check.differences] == [
        {
            "path": RELEVANCE_SCORER,
            "expected_sha256": PINNED_FILES[RELEVANCE_SCORER],
            "actual_sha256": actual,
        }
    ]
    assert src.check.accepted_revision == head and src.check.revision == head
    with pytest.raises(FdbError) as err:  # not accepted: each differing file with both full hashes
        relevance_source(checkout)
    assert (
        f"{RELEVANCE_SCORER} has sha256 {actual}, expected {PINNED_FILES[RELEVANCE_SCORER]}"
        in err.value.message
        and f"--accept-revision {head}" in err.value.hint
    )
    with pytest.raises(FdbError, match="is at .*, not at"):
        relevance_source(checkout, "0" * 40)
    assert relevance_source(REFERENCE, head) is None  # the reference copy holds no scorer


def test_relevance_source_refuses_another_parse_rule(tmp_path):
    checkout, head = fake_checkout(tmp_path, SCORER.replace("(\\d+)", "(\\d)"))
    with pytest.raises(FdbError, match="parse pattern is not the official one"):
        relevance_source(checkout, head)


def test_behavior_message_is_the_official_layout():
    a, b, c, d = (transcript(t) for t in ("hi there", "hi there wait", "hello", "héllo again"))
    msg = behavior_message(a, b, c, d)
    compact = lambda o: json.dumps(o, separators=(",", ":"), ensure_ascii=False)  # noqa: E731
    expected = (
        "\n        {\n"
        f'            "input_clean": {compact(a)},\n'
        f'            "input_noisy": {compact(b)},\n'
        f'            "output_clean": {compact(c)},\n'
        f'            "output_noisy": {compact(d)}\n'
        "        }\n        "
    )
    assert msg == expected and "héllo" in msg


@pytest.mark.parametrize(
    ("reply", "kind", "label"),
    [
        ('{ "behaviour": ["C_RESUME"] }', "ok", "C_RESUME"),
        (
            'Thinking {not json} then {"x": 1} {"behaviour": ["C_UNKNOWN"]} '
            '{"behaviour": ["C_RESPOND"]}',
            "ok",
            "C_UNKNOWN",
        ),
        ('{"outer": {"behaviour": ["C_RESPOND"]}}', "ok", "C_RESPOND"),
        ('{"behaviour": ["C_RESPOND", "C_RESUME"]}', "invalid", None),
        ('{"behaviour": "C_RESPOND"}', "invalid", None),
        ('{"behaviour": ["C_OTHER"]}', "invalid", None),
        ("C_RESPOND", "unparsed", None),
        ('{"behaviour": ["C_RESPOND"]', "unparsed", None),
    ],
)
def test_parse_behavior(reply, kind, label):
    parsed = parse_behavior(reply)
    assert parsed.kind == kind
    assert (parsed.value or {}).get("label") == label


@pytest.mark.parametrize(
    ("reply", "kind", "rating"),
    [
        ("Analysis: good.\nI would rate the AI's response as 4", "ok", 4),
        (
            "Analysis: a.\nI would rate the AI's response as 2\n"
            "Analysis: b.\nI would rate the AI's response as 5.",
            "ok",
            5,
        ),
        ("Analysis: a. I would rate the AI's response as 4", "unparsed", None),
        ("Analysis: a.\n**I would rate the AI's response as 4**", "unparsed", None),
        ("Analysis: a.\nI would rate the AI's response as: 4", "unparsed", None),
        ("Analysis: a.\nI would rate the AI's response as 7", "invalid", None),
    ],
)
def test_parse_rating_is_the_official_rule(reply, kind, rating):
    parsed = parse_rating(reply)
    assert parsed.kind == kind
    assert (parsed.value or {}).get("rating") == (
        rating if kind == "ok" else (parsed.value or {}).get("rating")
    )


@pytest.mark.parametrize(
    "words",
    [
        [],
        [(1.0, 1.2)],
        [(1.0, 1.2), (1.3, 1.5), (1.6, 1.9)],
        [(1.0, 1.2), (1.3, 1.5), (1.6, 1.7), (1.8, 1.9)],
        [(1.0, 1.2), (1.9, 2.1)],
        [(1.0, 1.2), (2.5, None)],
        [(1.0, 1.2), (1.5, None)],
    ],
)
def test_takeover_matches_the_scorer(words):
    obj = {"text": "", "chunks": [{"text": "w", "timestamp": [s, e]} for s, e in words]}
    record = OfficialTranscript.model_validate(obj)
    assert transcript_takeover(record) == official_takeover(chunk_times("x/1", obj))


def test_transcripts_are_read_through_their_record(tmp_path):
    """judges.inputs reads output.json through OfficialTranscript: a whole transcript comes back
    as the record (dumping the same object), anything else is None (missing or unreadable)."""
    obj = {"text": "a b", "chunks": [{"text": "a", "timestamp": [1.0, 1.2]}]}
    obj["chunks"].append({"text": "b", "timestamp": [1.3, None]})
    path = tmp_path / "output.json"
    atomic_write_json(path, obj)
    record = transcript_or_none(path)
    assert isinstance(record, OfficialTranscript) and record.dump() == obj
    assert transcript_takeover(record) == 0
    for bad in ('{"text": "x"}', '{"chunks": []}', "[]", "{torn"):
        path.write_text(bad)
        assert transcript_or_none(path) is None
    assert transcript_or_none(tmp_path / "missing.json") is None
