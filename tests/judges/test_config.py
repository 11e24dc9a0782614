"""Judge identity: the config file's checks, its hash naming the output directory, and how the
judge is resolved from options and environment."""

from __future__ import annotations

import json

import pytest

from benchmarks.support.trees import judge_config
from fdb.errors import FdbError
from judges.client import model_matches, redact
from judges.config import (
    GPT_BEHAVIOR_MODEL,
    GPT_RELEVANCE_MODEL,
    JudgeSettings,
    load_judge_config,
    resolve_judge,
)


def test_valid_config_names_the_directory_by_its_hash(tmp_path):
    path = judge_config(tmp_path / "a")
    config = load_judge_config(path)
    assert config.served_model == "judge-model" and config.seeds == [1, 2, 3]
    one = JudgeSettings.custom(path, "http://127.0.0.1:1/v1")
    other = JudgeSettings.custom(
        judge_config(tmp_path / "b", precision="fp8"), "http://127.0.0.1:1/v1"
    )
    assert one.name.startswith("judge-model-") and one.name[-12:] == one.identity_sha256[:12]
    assert one.name != other.name
    # concurrency, timeouts and the URL are not part of the identity
    again = JudgeSettings.custom(path, "http://127.0.0.1:2/v1", concurrency=3, timeout_s=5)
    assert again.name == one.name


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"model_revision": "abc1234"},
            "model_revision: Value error, 'abc1234' is not a full 40-hex commit hash",
        ),
        ({"tokenizer_revision": "B" * 40}, "tokenizer_revision"),
        ({"server_launch_receipt_sha256": "0" * 64}, "launch receipt"),
        ({"decoding": {"temperature": 0.0, "top_p": 1.0}}, "decoding.max_tokens"),
        ({"extra_field": 1}, "extra_field"),
        ({"seeds": [1, 2, 3, 4]}, "seeds"),
    ],
)
def test_bad_config_is_refused_with_the_reason(tmp_path, change, message):
    path = judge_config(tmp_path, **change)
    with pytest.raises(FdbError, match="judge config") as err:
        load_judge_config(path)
    assert message in err.value.one_line()


def test_missing_receipt_and_missing_file(tmp_path):
    path = judge_config(tmp_path)
    (tmp_path / "launch-receipt.json").unlink()
    with pytest.raises(FdbError, match="does not exist"):
        load_judge_config(path)
    with pytest.raises(FdbError, match="does not exist"):
        load_judge_config(tmp_path / "nope.json")


def test_resolve_without_anything_is_pending(tmp_path):
    choice = resolve_judge(env={}, work=tmp_path)
    assert (
        choice.settings is None
        and "--judge-config" in choice.reason
        and "OPENAI_API_KEY" in choice.reason
    )
    gpt = resolve_judge(env={"JUDGE": "gpt"}, work=tmp_path)
    assert gpt.settings is None and "OPENAI_API_KEY is not set" in gpt.reason


def test_resolve_gpt_and_custom(tmp_path):
    gpt = resolve_judge(env={"JUDGE": "gpt", "OPENAI_API_KEY": "sk-x"}, work=tmp_path).settings
    assert (
        gpt.kind == "openai"
        and gpt.model == GPT_BEHAVIOR_MODEL
        and gpt.relevance_model == GPT_RELEVANCE_MODEL
    )
    assert gpt.api_key_env == "OPENAI_API_KEY" and "sk-x" not in json.dumps(gpt.public())
    other = resolve_judge(
        judge_model="local", base_url="http://h/v1", env={"OPENAI_API_KEY": "k"}
    ).settings
    assert other.relevance_model == "local" and other.base_url == "http://h/v1"
    path = judge_config(tmp_path / "judge" / "port-30000")
    with pytest.raises(FdbError, match="needs the judge server's URL"):
        resolve_judge(env={}, work=tmp_path)
    custom = resolve_judge(env={"JUDGE_URL": "http://127.0.0.1:30000/v1"}, work=tmp_path).settings
    assert (
        custom.kind == "custom"
        and custom.config_path == str(path)
        and custom.api_key_env == "CUSTOM_JUDGE_API_KEY"
    )
    with pytest.raises(FdbError, match="differs from the config's served_model"):
        resolve_judge(judge_config=path, base_url="http://x/v1", judge_model="gpt-4o", env={})


def test_keys_come_from_the_environment_only(tmp_path, monkeypatch):
    monkeypatch.delenv("CUSTOM_JUDGE_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    custom = JudgeSettings.custom(judge_config(tmp_path), "http://x/v1")
    assert custom.api_key() == "EMPTY"
    with pytest.raises(FdbError, match="OPENAI_API_KEY is not set"):
        JudgeSettings.openai().api_key()
    assert "api_key" not in JudgeSettings.model_fields


def test_model_match_and_redaction():
    assert model_matches("gpt-4o-2024-08-06", "gpt-4o-2024-08-06")
    assert not model_matches("gpt-4o-2024-08-06", "gpt-4o-2024-11-20")
    assert model_matches("gpt-4-turbo", "gpt-4-turbo-2024-04-09")
    assert not model_matches("gpt-4-turbo", "gpt-4-turbo-preview")
    assert not model_matches("qwen3.8-27b", "qwen3.8-27b-instruct") and not model_matches("m", None)
    assert (
        redact("key sk-abcdef123456 and s3cr3tvalue!", ["s3cr3tvalue!"], keylike=True)
        == "key <redacted> and <redacted>"
    )


def test_a_judge_config_that_does_not_exist_says_so(tmp_path):
    """#25: --judge-config /typo.json said 'needs the judge server's URL' (true,
    but not the problem)."""
    for env in ({}, {"JUDGE_URL": "http://127.0.0.1:30000/v1"}):
        with pytest.raises(FdbError, match="judge config .*typo.json does not exist"):
            resolve_judge(judge_config=tmp_path / "typo.json", env=env, work=tmp_path)
