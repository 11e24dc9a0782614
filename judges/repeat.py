"""Judge one repeat: v1.5 behavior labels, the semantic judge, v1.0 interruption relevance.

Outputs (docs/formats.md, "Judges"):

- ``repeat-N/judge-<name>/``: behavior labels (identity.json, ledger.jsonl, results.jsonl,
  summary.json);
- ``repeat-N/semantic-<name>/``: semantic grades (the same files plus controls/comparison.json);
- ``repeat-N/v10/reference/judge/<name>/``: relevance ratings (the same files, relevance.json);
- ``repeat-N/judge.json``: this call's ``JudgeSummary`` (every task's summary, also when no
  judge is configured and everything is ``pending``).

``<name>`` is the judge's model slug plus the first 12 hex digits of its identity hash. Each task
stands alone: a task that cannot run (no checkout for the behavior prompt, a failed control
check) is reported and the others still run.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from fdb.errors import FdbError
from fdb.io import atomic_write_json, read_json
from fdb.provenance import current
from fdb.records.judge import BehaviorSummary, JudgeSummary, RelevanceSummary, SemanticSummary
from judges.behavior import behavior_params, judge_behavior, summarize_behavior
from judges.client import JudgeClient
from judges.config import JudgeSettings
from judges.engine import NoProgress, Progress
from judges.inputs import (
    InterruptInput,
    PairInput,
    load_interruptions,
    load_v15_pairs,
    load_v15_tree_pairs,
)
from judges.official import behavior_prompt, relevance_source
from judges.relevance import judge_relevance, make_rubric, relevance_params, summarize_relevance
from judges.semantic.gate import Comparison, ControlCheckFailed
from judges.semantic.run import judge_semantic, semantic_params, summarize_semantic
from judges.store import TaskDir

NO_CHECKOUT = (
    "not run without a Full-Duplex-Bench checkout: fdb never bundles the official behavior "
    "prompt; put the checkout at $FDB_WORK/Full-Duplex-Bench or pass --reference-source (the "
    "checkout, or its v1_v1.5/evaluation directory)"
)
SEMANTIC_GPT = "the semantic judge runs only with a self-hosted judge config (JUDGE=qwen); not run"
BAD = {"has_failures", "control_failed", "blocked", "failed", "incomplete"}


def _write(tdir: TaskDir, name: str, summary: BaseModel) -> None:
    atomic_write_json(tdir.root / name, summary.model_dump(mode="json", by_alias=True))


async def _behavior(
    client: JudgeClient,
    judge: JudgeSettings,
    root: Path,
    pairs: list[PairInput],
    retry_failed: bool,
    progress: Progress,
    limit: int | None,
) -> tuple[BehaviorSummary, Path | None]:
    if judge.reference_source is None:
        return summarize_behavior(
            pairs, None, judge=judge.public(), status="not_run", message=NO_CHECKOUT
        ), None
    try:
        prompt = behavior_prompt(judge.reference_source, judge.accept_revision)
    except FdbError as exc:
        return summarize_behavior(
            pairs, None, judge=judge.public(), status="blocked", message=exc.one_line()
        ), None
    params = behavior_params(judge, prompt)
    with TaskDir(root / f"judge-{judge.name}", "behavior", judge.identity(), params) as tdir:
        results = await judge_behavior(
            client, tdir, judge, prompt, pairs, retry_failed, progress, limit
        )
        summary = summarize_behavior(
            pairs,
            results,
            judge=judge.public(),
            params=params,
            source={
                "label": f"official prompt of {prompt.check.label()}",
                "checkout": prompt.check.dump(),
            },
        )
        _write(tdir, "summary.json", summary)
    return summary, tdir.root


def _rubric(judge: JudgeSettings):
    if judge.reference_source is None:
        return make_rubric(None, "no --reference-source given")
    official = relevance_source(judge.reference_source, judge.accept_revision)
    return make_rubric(
        official, None if official else f"{judge.reference_source} has no eval_user_interruption.py"
    )


async def _relevance(
    client: JudgeClient,
    judge: JudgeSettings,
    root: Path,
    samples: list[InterruptInput],
    retry_failed: bool,
    progress: Progress,
) -> tuple[RelevanceSummary, Path | None]:
    try:
        rubric = _rubric(judge)
    except FdbError as exc:
        return summarize_relevance(
            samples,
            None,
            rubric=None,
            judge=judge.public(),
            status="blocked",
            message=exc.one_line(),
        ), None
    params = relevance_params(judge, rubric)
    with TaskDir(
        root / "v10" / "reference" / "judge" / judge.name, "relevance", judge.identity(), params
    ) as tdir:
        results = await judge_relevance(
            client, tdir, judge, rubric, samples, retry_failed, progress
        )
        summary = summarize_relevance(
            samples,
            results,
            rubric=rubric,
            judge=judge.public(),
            params=params,
            message=rubric.label,
        )
        _write(tdir, "relevance.json", summary)
    return summary, tdir.root


async def _semantic(
    client: JudgeClient,
    judge: JudgeSettings,
    root: Path,
    pairs: list[PairInput],
    retry_failed: bool,
    progress: Progress,
    limit: int | None,
) -> tuple[SemanticSummary, Path | None]:
    if judge.kind != "custom":
        return summarize_semantic(
            pairs, None, status="not_run", message=SEMANTIC_GPT, judge=judge.public()
        ), None
    params = semantic_params(judge)
    with TaskDir(root / f"semantic-{judge.name}", "semantic", judge.identity(), params) as tdir:
        status, message = None, None
        try:
            results, comparison = await judge_semantic(
                client, tdir, judge, pairs, retry_failed, progress, limit
            )
        except ControlCheckFailed as exc:
            results, comparison = tdir.results(), exc.comparison
            status, message = "control_failed", exc.one_line()
        if comparison is None and (tdir.root / "controls" / "comparison.json").exists():
            comparison = Comparison.model_validate(
                read_json(tdir.root / "controls" / "comparison.json")
            )
        summary = summarize_semantic(
            pairs,
            results,
            status=status,
            message=message,
            judge=judge.public(),
            params=params,
            comparison=comparison,
        )
        _write(tdir, "summary.json", summary)
    return summary, tdir.root


def _pending(
    pairs: list[PairInput] | None, interrupts: list[InterruptInput] | None, reason: str
) -> dict[str, Any]:
    return {
        "behavior": summarize_behavior(pairs, None, status="pending", message=reason)
        if pairs is not None
        else None,
        "semantic": summarize_semantic(pairs, None, status="pending", message=reason)
        if pairs is not None
        else None,
        "relevance": summarize_relevance(interrupts, None, rubric=None, message=reason)
        if interrupts is not None
        else None,
    }


def _inputs(
    root: Path, v15_tree: Path | None, only: list[str] | None
) -> tuple[list[PairInput] | None, list[InterruptInput] | None]:
    """The repeat's v1.5 pairs and v1.0 interruptions, or an export tree's pairs (no v1.0)."""
    if v15_tree is not None:
        return load_v15_tree_pairs(v15_tree, only), None
    return load_v15_pairs(root), load_interruptions(root)


async def judge_repeat_async(
    repeat_dir: Path,
    judge: JudgeSettings | None,
    *,
    retry_failed: bool = False,
    progress: Progress | None = None,
    pending_reason: str | None = None,
    v15_tree: Path | None = None,
    only: list[str] | None = None,
    limit: int | None = None,
) -> JudgeSummary:
    """``judge_repeat`` for callers that already run an event loop."""
    root = Path(repeat_dir)
    progress = progress or NoProgress()
    pairs, interrupts = _inputs(root, v15_tree, only)
    dirs: dict[str, Path | None] = {"behavior": None, "semantic": None, "relevance": None}
    if judge is None:
        tasks = _pending(pairs, interrupts, pending_reason or "no judge is configured")
        info: dict[str, Any] = {
            "configured": False,
            "reason": pending_reason or "no judge is configured",
        }
    else:
        tasks = {"behavior": None, "semantic": None, "relevance": None}
        info = {"configured": True, **judge.public()}
        client = JudgeClient(judge)
        try:
            if pairs is not None:
                tasks["behavior"], dirs["behavior"] = await _behavior(
                    client, judge, root, pairs, retry_failed, progress, limit
                )
            if interrupts is not None:
                tasks["relevance"], dirs["relevance"] = await _relevance(
                    client, judge, root, interrupts, retry_failed, progress
                )
            if pairs is not None:
                tasks["semantic"], dirs["semantic"] = await _semantic(
                    client, judge, root, pairs, retry_failed, progress, limit
                )
        finally:
            await client.close()
    summary = JudgeSummary(
        repeat_dir=str(root),
        judge=info,
        **tasks,
        dirs={k: str(v.relative_to(root)) if v else None for k, v in dirs.items()},
        ok=not any(t is not None and t.status in BAD for t in tasks.values()),
        provenance=current(("openai", "pydantic")).model_dump(mode="json"),
    )
    atomic_write_json(root / "judge.json", summary.dump())
    return summary


def judge_repeat(
    repeat_dir: Path,
    judge: JudgeSettings | None,
    *,
    retry_failed: bool = False,
    progress: Progress | None = None,
    pending_reason: str | None = None,
    v15_tree: Path | None = None,
    only: list[str] | None = None,
    limit: int | None = None,
) -> JudgeSummary:
    """Judge every selected sample of ``repeat_dir`` (``$FDB_WORK/runs/RUN/repeat-N``) with
    ``judge``; with ``judge=None`` every label and rating is ``pending`` and the counts are still
    written. Finished samples are skipped; ``retry_failed`` sends transport and parse failures
    again; ``limit`` caps the samples each task sends in this call. Returns the summary also
    written to ``repeat-N/judge.json``.

    With ``v15_tree`` (an exported reference-audio tree, ``score v15 judge``) the pairs come
    from that tree (``only``: just these "category/id"), v1.0 is left out, and ``repeat_dir`` is
    where the task directories and judge.json are written."""
    return asyncio.run(
        judge_repeat_async(
            repeat_dir,
            judge,
            retry_failed=retry_failed,
            progress=progress,
            pending_reason=pending_reason,
            v15_tree=v15_tree,
            only=only,
            limit=limit,
        )
    )
