"""Run the semantic judge over a repeat's pairs behind the control gate, and summarize it.

quality = A / (A + F) and coverage = (A + F) / N per category and axis (and the joint axis),
N every selected pair: ineligible pairs, missing transcripts and failed requests count as
unresolved."""

from __future__ import annotations

import asyncio
from typing import Any

from fdb.io import atomic_write_json, sha256_bytes
from fdb.records.judge import AxisCell, SemanticSample, SemanticSummary
from judges.client import JudgeClient
from judges.config import JudgeSettings
from judges.engine import NoProgress, Progress, TaskSpec, judge_sample, request_sha256, run_bounded
from judges.inputs import PairInput
from judges.semantic.gate import (
    Comparison,
    ControlCheckFailed,
    compare,
    controls_sha256,
    load_controls,
)
from judges.semantic.grading import (
    MAX_ATTEMPTS,
    SEMANTIC_MAX_TOKENS,
    SEMANTIC_SEED,
    PairView,
    parse_verdict,
    payload,
    semantic_requests,
)
from judges.semantic.rubric import AXES, SEMANTIC_PROMPT
from judges.store import SampleResult, TaskDir, utc_now

Item = tuple[PairView, list[dict[str, Any]]]


def semantic_params(settings: JudgeSettings) -> dict[str, Any]:
    return {
        "prompt_sha256": sha256_bytes(SEMANTIC_PROMPT.encode("utf-8")),
        "controls": controls_sha256(),
        "model": settings.model,
        "seed": SEMANTIC_SEED,
        "max_attempts": MAX_ATTEMPTS,
        "thinking": True,
        "temperature": 0.0,
        "max_tokens": SEMANTIC_MAX_TOKENS,
    }


def view(pair: PairInput) -> PairView:
    return PairView(
        sample_id=pair.sample_id,
        category=pair.category,
        transcripts=pair.transcripts,
        metadata=pair.metadata,
    )


class _Grader:
    def __init__(
        self, client: JudgeClient, tdir: TaskDir, settings: JudgeSettings, progress: Progress
    ):
        self.client, self.tdir, self.settings, self.progress = client, tdir, settings, progress

    def tick(self) -> None:
        self.progress.advance("semantic")

    async def grade(self, item: Item, task: str = "semantic") -> SampleResult:
        pair, requests = item
        shown = payload(pair)
        spec = TaskSpec(task, self.settings.model, lambda text: parse_verdict(text, shown))
        return await judge_sample(self.client, self.tdir.ledger, spec, pair.sample_id, requests)

    async def batch(self, items: list[Item], task: str = "semantic") -> list[SampleResult]:
        return await run_bounded(items, lambda item: self.grade(item, task), self.tick)


async def judge_semantic(
    client: JudgeClient,
    tdir: TaskDir,
    settings: JudgeSettings,
    pairs: list[PairInput],
    retry_failed: bool,
    progress: Progress | None = None,
    limit: int | None = None,
) -> tuple[dict[str, SampleResult], Comparison | None]:
    """Grade every ready pair not finished before (at most ``limit`` in this call). The controls
    go out with the first batch; a mismatch discards that batch and raises
    ``ControlCheckFailed``."""
    done = tdir.results()
    todo: list[Item] = []
    for pair in (view(p) for p in pairs if p.ready):
        requests = semantic_requests(settings, pair)
        if tdir.needs_judging(done.get(pair.sample_id), request_sha256(requests), retry_failed):
            todo.append((pair, requests))
    todo = todo[:limit]
    if not todo:
        return done, None
    progress = progress or NoProgress()
    controls, expected = load_controls()
    progress.start("semantic", len(todo) + len(controls))
    grader = _Grader(client, tdir, settings, progress)
    first, rest = todo[: settings.concurrency], todo[settings.concurrency :]
    control_results, first_results = await asyncio.gather(
        grader.batch([(c, semantic_requests(settings, c)) for c in controls], "semantic-control"),
        grader.batch(first),
    )
    comparison = compare({r.sample_id: r for r in control_results}, expected, utc_now())
    atomic_write_json(
        tdir.root / "controls" / "comparison.json",
        comparison.model_dump(mode="json", by_alias=True),
    )
    if not comparison.passed:
        raise ControlCheckFailed(comparison, tdir.root / "controls" / "comparison.json")
    for result in first_results:
        tdir.record(result)
        done[result.sample_id] = result

    async def keep(item: Item) -> SampleResult:
        result = await grader.grade(item)
        tdir.record(result)
        return result

    for result in await run_bounded(rest, keep, grader.tick):
        done[result.sample_id] = result
    return done, comparison


def _sample(pair: PairInput, result: SampleResult | None) -> SemanticSample:
    unresolved = dict.fromkeys((*AXES, "joint"), "unresolved")
    base = {"sample_id": pair.sample_id, "category": pair.category}
    if not pair.eligible:
        return SemanticSample(
            **base, outcome="ineligible", axes=unresolved, reason="; ".join(pair.reasons) or None
        )
    if pair.missing:
        return SemanticSample(
            **base,
            outcome="missing_transcript",
            axes=unresolved,
            reason="missing or unreadable: " + ", ".join(pair.missing),
        )
    if result is None:
        return SemanticSample(**base, outcome="pending", axes=unresolved)
    if result.outcome != "valid" or not result.value:
        return SemanticSample(**base, outcome=result.outcome, axes=unresolved, reason=result.reason)
    axes = {a: v["status"] for a, v in result.value["axes"].items()}
    return SemanticSample(**base, outcome="valid", axes={**axes, "joint": result.value["joint"]})


def _cells(rows: list[SemanticSample]) -> dict[str, AxisCell]:
    out = {}
    for axis in (*AXES, "joint"):
        a = sum(r.axes[axis] == "accept" for r in rows)
        f = sum(r.axes[axis] == "fail" for r in rows)
        n = len(rows)
        out[axis] = AxisCell(
            selected=n,
            accepted=a,
            failed=f,
            unresolved=n - a - f,
            quality=a / (a + f) if a + f else None,
            coverage=(a + f) / n if n else None,
        )
    return out


def summarize_semantic(
    pairs: list[PairInput],
    results: dict[str, SampleResult] | None,
    *,
    status: str | None = None,
    message: str | None = None,
    judge: dict[str, Any] | None = None,
    params: dict[str, Any] | None = None,
    comparison: Comparison | None = None,
) -> SemanticSummary:
    rows = [_sample(p, (results or {}).get(p.sample_id)) for p in pairs]
    groups: dict[str, list[SemanticSample]] = {}
    for row in rows:
        groups.setdefault(row.category, []).append(row)
    if status is None:
        status = "has_failures" if any(r.outcome == "failed" for r in rows) else "complete"
    controls = None
    if comparison is not None:
        controls = {
            "passed": comparison.passed,
            "matched": comparison.matched,
            "total": comparison.total,
            "mismatches": [m.model_dump() for m in comparison.mismatches],
        }
    return SemanticSummary(
        status=status,
        message=message,
        judge=judge,
        params=params,
        controls=controls,
        categories={c: _cells(r) for c, r in groups.items()},
        all=_cells(rows),
        samples=rows,
    )
