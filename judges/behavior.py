"""v1.5 behavior labels (``fdb-official-scoring.md`` §3.6), bounded and auditable.

- System prompt: the official ``behavior.txt`` from the user's checkout, sha256-verified.
- User message: built exactly like the official f-string from the four transcripts (each the
  whole ASR object, compact JSON): input_clean = clean_input.json, input_noisy = input.json,
  output_clean = clean_output.json, output_noisy = output.json.
- Seeds 1, 2, 3 (the official loop's seed += 1), at most three attempts; no fallback judge.
- Parse: the first JSON object (scanning every ``{``) with the key ``behaviour``; valid when it
  holds exactly one of the four C labels, ``invalid_label`` otherwise.
- Shares per category are over judged (valid) pairs, with Wilson 95% intervals; every selected
  pair is counted with its outcome (ineligible, missing_transcript, pending, ...).
"""

from __future__ import annotations

import json
from typing import Any

from fdb.io import dumps_json
from fdb.records import OfficialTranscript
from fdb.records.judge import LABELS, BehaviorCell, BehaviorSample, BehaviorSummary
from judges.bodies import chat, decoding
from judges.client import JudgeClient
from judges.config import GPT_BEHAVIOR_MODEL, JudgeSettings
from judges.engine import (
    Parsed,
    Progress,
    TaskSpec,
    judge_pending,
)
from judges.inputs import TRANSCRIPTS, PairInput
from judges.official import OfficialText
from judges.stats import share
from judges.store import SampleResult, TaskDir

GPT_SEEDS = (1, 2, 3)


def compact(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def as_written(transcript: OfficialTranscript) -> dict[str, Any]:
    """The transcript as its file holds it: the asr phases write it with sorted keys
    (``dumps_json``), so the message quotes ``{"chunks": ..., "text": ...}`` as the file reads."""
    return json.loads(dumps_json(transcript.dump()))


def behavior_message(
    clean_input: Any, noisy_input: Any, clean_output: Any, noisy_output: Any
) -> str:
    """The official user message: newline, 8 spaces, '{', four 12-space-indented fields, 8 spaces
    '}', newline, 8 spaces."""
    i8, i12 = " " * 8, " " * 12
    return (
        f"\n{i8}{{\n"
        f'{i12}"input_clean": {compact(clean_input)},\n'
        f'{i12}"input_noisy": {compact(noisy_input)},\n'
        f'{i12}"output_clean": {compact(clean_output)},\n'
        f'{i12}"output_noisy": {compact(noisy_output)}\n'
        f"{i8}}}\n{i8}"
    )


def parse_behavior(text: str) -> Parsed:
    """The official parse: the first decodable object with the key ``behaviour``."""
    decoder = json.JSONDecoder()
    start = text.find("{")
    while start != -1:
        try:
            obj, _ = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            obj = None
        if isinstance(obj, dict) and "behaviour" in obj:
            tags = obj["behaviour"]
            if isinstance(tags, list) and len(tags) == 1 and tags[0] in LABELS:
                return Parsed("ok", {"label": tags[0]})
            return Parsed(
                "invalid",
                {"behaviour": tags},
                f"behaviour {tags!r} is not exactly one of {', '.join(LABELS)}",
            )
        start = text.find("{", start + 1)
    return Parsed("unparsed", reason="no JSON object with the key 'behaviour'")


def behavior_requests(
    settings: JudgeSettings, prompt: OfficialText, pair: PairInput
) -> list[dict[str, Any]]:
    t = pair.transcripts
    user = behavior_message(*(as_written(t[name]) for name in TRANSCRIPTS))
    seeds = settings.config.seeds if settings.config else list(GPT_SEEDS)
    extra = decoding(settings)
    return [chat(settings.model, prompt.text, user, seed, extra) for seed in seeds[:3]]


def behavior_params(settings: JudgeSettings, prompt: OfficialText) -> dict[str, Any]:
    seeds = settings.config.seeds if settings.config else list(GPT_SEEDS)
    return {
        "prompt": str(prompt.path.name),
        "prompt_sha256": prompt.sha256,
        "model": settings.model,
        "seeds": list(seeds[:3]),
        "decoding": decoding(settings),
        "official_judge": settings.kind == "openai"
        and settings.model == GPT_BEHAVIOR_MODEL
        and settings.base_url is None,
    }


async def judge_behavior(
    client: JudgeClient,
    tdir: TaskDir,
    settings: JudgeSettings,
    prompt: OfficialText,
    pairs: list[PairInput],
    retry_failed: bool,
    progress: Progress | None = None,
    limit: int | None = None,
) -> dict[str, SampleResult]:
    """Label every ready pair not finished before (at most ``limit`` in this call); return the
    latest result of every pair."""
    spec = TaskSpec(
        "behavior", settings.model, parse_behavior, require_stop=settings.config is not None
    )
    candidates = (
        (pair.sample_id, behavior_requests(settings, prompt, pair)) for pair in pairs if pair.ready
    )
    return await judge_pending(client, tdir, spec, candidates, retry_failed, progress, limit)


def _row(pair: PairInput, result: SampleResult | None) -> BehaviorSample:
    base = {"sample_id": pair.sample_id, "category": pair.category}
    if not pair.eligible:
        return BehaviorSample(**base, outcome="ineligible", reason="; ".join(pair.reasons) or None)
    if pair.missing:
        return BehaviorSample(
            **base,
            outcome="missing_transcript",
            reason="missing or unreadable: " + ", ".join(pair.missing),
        )
    if result is None:
        return BehaviorSample(**base, outcome="pending")
    label = result.value.get("label") if result.outcome == "valid" and result.value else None
    return BehaviorSample(
        **base, outcome=result.outcome, label=label, attempts=result.attempts, reason=result.reason
    )


def _cell(rows: list[BehaviorSample]) -> BehaviorCell:
    cell = BehaviorCell(selected=len(rows))
    for row in rows:
        cell.eligible += row.outcome != "ineligible"
        cell.outcomes[row.outcome] += 1
    cell.judged = cell.outcomes["valid"]
    cell.labels = {
        label: share(sum(r.label == label for r in rows), cell.judged) for label in LABELS
    }
    return cell


def summarize_behavior(
    pairs: list[PairInput],
    results: dict[str, SampleResult] | None,
    *,
    judge: dict[str, Any] | None = None,
    params: dict[str, Any] | None = None,
    status: str | None = None,
    message: str | None = None,
    source: dict[str, Any] | None = None,
) -> BehaviorSummary:
    """Pure: per-category outcome counts and label shares over judged pairs."""
    rows = [_row(p, (results or {}).get(p.sample_id)) for p in pairs]
    categories: dict[str, list[BehaviorSample]] = {}
    for row in rows:
        categories.setdefault(row.category, []).append(row)
    if status is None:
        status = "has_failures" if any(r.outcome == "failed" for r in rows) else "complete"
    used = [results[p.sample_id] for p in pairs if results and p.sample_id in results]
    return BehaviorSummary(
        status=status,
        message=message,
        judge=judge,
        params=params,
        source=source,
        categories={c: _cell(r) for c, r in categories.items()},
        all=_cell(rows),
        attempts=sum(r.attempts for r in used),
        retries=sum(r.retries for r in used),
        samples=rows,
    )
