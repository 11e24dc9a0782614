"""v1.0 interruption relevance (``fdb-official-scoring.md`` §3.3), with the retry bug fixed.

Only takeover samples are rated (the official §3.1 rule on output.json). With an official
checkout the system prompt and the user message come from ``eval_user_interruption.py``
(hash-verified, read with ``ast``); without one, fdb's own rubric (same 0-5 scale, same output
lines) is used and every output says so. The reply is parsed with the official rule: the last
``Analysis: ...`` + newline + ``I would rate the AI's response as <digits>`` of reply + "\\n".

At most three identical requests per sample. A sample that never parses is ``failed`` and fails
the subset (no relevance number); ``retries`` counts the extra requests. The official loop
counts a takeover again on every retry; here each sample's takeover counts once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from fdb.records.judge import RelevanceSample, RelevanceSummary
from fdb.takeover import transcript_takeover
from judges.bodies import chat, decoding
from judges.client import JudgeClient
from judges.config import JudgeSettings
from judges.engine import (
    Parsed,
    Progress,
    TaskSpec,
    judge_pending,
)
from judges.inputs import InterruptInput
from judges.official import OFFICIAL_PARSE_PATTERN, RelevanceSource
from judges.relevance_rubric import FDB_RELEVANCE_PROMPT, fdb_relevance_message
from judges.store import SampleResult, TaskDir

MAX_ATTEMPTS = 3
CUSTOM_MAX_TOKENS = 512  # the official code sets none; SGLang would stop at 128
RATING = re.compile(OFFICIAL_PARSE_PATTERN, re.DOTALL)


def parse_rating(text: str) -> Parsed:
    """The official parse rule; a rating outside 0-5 is invalid rather than averaged in."""
    matches = list(RATING.finditer(text + "\n"))
    if not matches:
        return Parsed(
            "unparsed",
            reason="no 'Analysis: ...' line followed by \"I would rate the AI's response as "
            '<digits>"',
        )
    analysis, digits = matches[-1].group(1).strip(), int(matches[-1].group(2))
    if not 0 <= digits <= 5:
        return Parsed(
            "invalid", {"rating": digits, "analysis": analysis}, f"rating {digits} is outside 0-5"
        )
    return Parsed("ok", {"rating": digits, "analysis": analysis})


@dataclass(frozen=True)
class Rubric:
    source: Literal["official", "fdb"]
    label: str
    system_prompt: str
    seed: int
    official: RelevanceSource | None = None

    def message(self, sample: InterruptInput) -> str:
        ctx, intr = (
            str(sample.interrupt.get("context", "")),
            str(sample.interrupt.get("interrupt", "")),
        )
        text = sample.output.text
        if self.official is not None:
            return self.official.user_message(ctx, intr, text)
        return fdb_relevance_message(ctx, intr, text)

    def describe(self) -> dict[str, Any]:
        src = self.official
        return {
            "source": self.source,
            "label": self.label,
            "path": str(src.path) if src else None,
            "sha256": src.sha256 if src else None,
            "official_model": src.model if src else None,
            "checkout": src.check.dump() if src else None,
        }


def make_rubric(official: RelevanceSource | None, why_not: str | None = None) -> Rubric:
    if official is not None:
        return Rubric(
            "official",
            f"official prompt and message ({official.path.name}, sha256 {official.sha256[:12]}, "
            f"{official.check.label()})",
            official.system_prompt,
            official.seed,
            official,
        )
    note = f" ({why_not})" if why_not else ""
    return Rubric(
        "fdb",
        "fdb's own relevance rubric, not the official prompt: same 0-5 scale and parse rule" + note,
        FDB_RELEVANCE_PROMPT,
        0,
    )


def relevance_requests(
    settings: JudgeSettings, rubric: Rubric, sample: InterruptInput
) -> list[dict[str, Any]]:
    extra = (
        decoding(settings, enable_thinking=False, max_tokens=CUSTOM_MAX_TOKENS)
        if settings.config
        else {}
    )
    body = chat(
        settings.relevance_model, rubric.system_prompt, rubric.message(sample), rubric.seed, extra
    )
    return [body] * MAX_ATTEMPTS


def relevance_params(settings: JudgeSettings, rubric: Rubric) -> dict[str, Any]:
    """What the ratings depend on (the checkout's location is not part of it, its hash is).
    ``official_rating``: the official prompt, sent to the model the official scorer names, on
    OpenAI's own endpoint; anything else is labeled as not the official rating."""
    extra = (
        decoding(settings, enable_thinking=False, max_tokens=CUSTOM_MAX_TOKENS)
        if settings.config
        else {}
    )
    official = (
        rubric.official is not None
        and settings.kind == "openai"
        and settings.base_url is None
        and settings.relevance_model == rubric.official.model
    )
    described = {k: v for k, v in rubric.describe().items() if k not in ("path", "checkout")}
    return {
        "rubric": described,
        "model": settings.relevance_model,
        "seed": rubric.seed,
        "max_attempts": MAX_ATTEMPTS,
        "decoding": extra,
        "official_rating": official,
    }


def _rated(sample: InterruptInput) -> bool:
    return sample.eligible and not sample.missing and transcript_takeover(sample.output) == 1


async def judge_relevance(
    client: JudgeClient,
    tdir: TaskDir,
    settings: JudgeSettings,
    rubric: Rubric,
    samples: list[InterruptInput],
    retry_failed: bool,
    progress: Progress | None = None,
) -> dict[str, SampleResult]:
    spec = TaskSpec(
        "relevance",
        settings.relevance_model,
        parse_rating,
        require_stop=settings.config is not None,
    )
    candidates = (
        (s.sample_id, relevance_requests(settings, rubric, s)) for s in filter(_rated, samples)
    )
    return await judge_pending(client, tdir, spec, candidates, retry_failed, progress)


def _sample_row(sample: InterruptInput, result: SampleResult | None) -> RelevanceSample:
    base = {"sample_id": sample.sample_id}
    if not sample.eligible:
        return RelevanceSample(
            **base, outcome="ineligible", reason="; ".join(sample.reasons) or None
        )
    if sample.missing:
        return RelevanceSample(
            **base,
            outcome="missing_transcript",
            reason="missing or unreadable: " + ", ".join(sample.missing),
        )
    flag = transcript_takeover(sample.output)
    if not flag:
        return RelevanceSample(**base, outcome="no_takeover", takeover=0)
    if result is None:
        return RelevanceSample(**base, outcome="pending", takeover=1)
    rating = result.value.get("rating") if result.outcome == "valid" and result.value else None
    return RelevanceSample(
        **base,
        outcome=result.outcome,
        takeover=1,
        rating=rating,
        attempts=result.attempts,
        reason=result.reason,
    )


def summarize_relevance(
    samples: list[InterruptInput],
    results: dict[str, SampleResult] | None,
    *,
    rubric: Rubric | None,
    judge: dict[str, Any] | None = None,
    params: dict[str, Any] | None = None,
    message: str | None = None,
    status: str | None = None,
) -> RelevanceSummary:
    rows = [_sample_row(s, (results or {}).get(s.sample_id)) for s in samples]
    evaluated = [r for r in rows if r.takeover is not None]
    takeovers = [r for r in evaluated if r.takeover == 1]
    ratings = [r.rating for r in takeovers if r.rating is not None]
    bad = [
        r.sample_id for r in takeovers if r.outcome in ("failed", "invalid_label", "model_mismatch")
    ]
    missing = sum(r.outcome == "missing_transcript" for r in rows)
    status = status or (
        "pending"
        if any(r.outcome == "pending" for r in rows)
        else "failed"
        if bad
        else "incomplete"
        if missing
        else "complete"
    )
    return RelevanceSummary(
        status=status,
        message=message,
        rubric=rubric.describe() if rubric else None,
        judge=judge,
        params=params,
        selected=len(rows),
        eligible=sum(r.outcome != "ineligible" for r in rows),
        evaluated=len(evaluated),
        missing_transcript=missing,
        takeovers=len(takeovers),
        takeover_rate=len(takeovers) / len(evaluated) if evaluated else None,
        rated=len(ratings),
        relevance=sum(ratings) / len(ratings) if ratings and status == "complete" else None,
        requests=sum(r.attempts for r in rows),
        retries=sum(max(r.attempts - 1, 0) for r in rows),
        failed_samples=bad,
        samples=rows,
    )
