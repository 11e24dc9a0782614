"""48 pairs with a concurrency of 16 against an endpoint that answers in 1 s: well under a
minute (three waves of requests; benchmarks/judge_throughput.py prints the figures)."""

from __future__ import annotations

import time

from benchmarks.support.fake_openai import FakeJudge
from benchmarks.support.trees import REFERENCE, Pair, Repeat
from judges import JudgeSettings, judge_repeat
from tests.conftest import needs_behavior_prompt

CATEGORIES = ("user_interruption", "user_backchannel", "talking_to_other", "background_speech")


@needs_behavior_prompt
def test_48_pairs_at_concurrency_16_take_seconds(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "placeholder-key-for-the-fake")
    repeat = Repeat(
        tmp_path / "repeat-1", pairs=[Pair(CATEGORIES[i % 4], str(i // 4 + 1)) for i in range(48)]
    ).write()
    with FakeJudge(delay_s=1.0) as fake:
        settings = JudgeSettings.openai(
            "judge-model", fake.base_url, reference_source=REFERENCE, timeout_s=30
        )
        start = time.perf_counter()
        summary = judge_repeat(repeat, settings)
        wall = time.perf_counter() - start
    assert summary.behavior.all.judged == 48 and fake.max_in_flight == 16
    assert 3.0 <= wall < 15.0, wall
