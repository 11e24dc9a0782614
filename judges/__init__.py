"""LLM judging through any OpenAI-compatible endpoint: v1.5 behavior labels, the semantic judge
with its control gate, and v1.0 interruption relevance. Pinned, bounded, auditable, resumable;
never a silent fallback to another judge.

Entry points: ``judge_repeat(repeat_dir, judge)`` (its ``fdb.records.judge.JudgeSummary``),
``resolve_judge`` (the judge from options and environment), ``JudgeSettings`` and
``load_judge_config``.
"""

from judges.config import JudgeChoice, JudgeConfig, JudgeSettings, load_judge_config, resolve_judge
from judges.repeat import judge_repeat, judge_repeat_async

__all__ = [
    "JudgeChoice",
    "JudgeConfig",
    "JudgeSettings",
    "judge_repeat",
    "judge_repeat_async",
    "load_judge_config",
    "resolve_judge",
]
