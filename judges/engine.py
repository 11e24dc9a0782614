"""The bounded attempt loop shared by every judge task.

A sample gets at most ``len(requests)`` attempts (three for every fdb task). Per attempt:

- a transport failure (connection, timeout, HTTP error) or an unparsable reply moves on to the
  next attempt; when the attempts run out the sample is ``failed`` (retried by --retry-failed);
- a reply from another model is ``model_mismatch`` at once, a finish other than ``stop`` or a
  parsed but invalid answer is ``invalid_label`` at once: retrying cannot fix either, and they
  are never retried;
- a parsed, valid answer is ``valid``.
Every attempt is appended to the ledger before the next one starts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeVar

from judges.client import JudgeClient, Reply, TransportFailure, model_matches
from judges.config import canonical_sha256
from judges.store import Ledger, SampleResult, TaskDir, utc_now

T = TypeVar("T")
R = TypeVar("R")


class Progress(Protocol):
    """Where a phase reports progress: ``start`` once per task with its request count, then
    ``advance`` per finished sample."""

    def start(self, task: str, total: int) -> None: ...

    def advance(self, task: str) -> None: ...


class NoProgress:
    def start(self, task: str, total: int) -> None:
        pass

    def advance(self, task: str) -> None:
        pass


@dataclass(frozen=True)
class Parsed:
    kind: Literal["ok", "invalid", "unparsed"]
    value: dict[str, Any] | None = None
    reason: str | None = None


@dataclass(frozen=True)
class TaskSpec:
    task: str
    expected_model: str
    parse: Callable[[str], Parsed]
    require_stop: bool = True


def request_sha256(requests: Sequence[dict[str, Any]]) -> str:
    return canonical_sha256(list(requests))


def _classify(spec: TaskSpec, reply: Reply) -> tuple[str, Parsed | None, str | None]:
    """(attempt outcome, parse result, reason) for one reply."""
    if not model_matches(spec.expected_model, reply.model):
        return (
            "model_mismatch",
            None,
            f"the reply names model {reply.model!r}, not {spec.expected_model!r}",
        )
    if spec.require_stop and reply.finish_reason != "stop":
        return "non_stop_finish", None, f"finish_reason {reply.finish_reason!r}, not 'stop'"
    parsed = spec.parse(reply.content or "")
    outcome = {"ok": "valid", "invalid": "invalid_label", "unparsed": "unparsed"}[parsed.kind]
    return outcome, parsed, parsed.reason


def _final(
    sample_id: str,
    outcome: str,
    attempt: int,
    sha: str,
    reason: str | None,
    reply: Reply | None,
    parsed: Parsed | None,
) -> SampleResult:
    mapped = {
        "valid": "valid",
        "invalid_label": "invalid_label",
        "non_stop_finish": "invalid_label",
        "model_mismatch": "model_mismatch",
    }.get(outcome, "failed")
    if mapped == "failed":
        reason = f"{'transport' if outcome == 'transport_error' else 'parse'}: {reason}"
    return SampleResult(
        sample_id=sample_id,
        outcome=mapped,
        reason=reason,
        value=parsed.value if parsed and parsed.kind != "unparsed" else None,
        attempts=attempt,
        retries=attempt - 1,
        request_sha256=sha,
        reply_model=reply.model if reply else None,
        finished_utc=utc_now(),
    )


async def judge_sample(
    client: JudgeClient,
    ledger: Ledger,
    spec: TaskSpec,
    sample_id: str,
    requests: Sequence[dict[str, Any]],
) -> SampleResult:
    """Send up to ``len(requests)`` attempts for one sample and return its final result."""
    sha = request_sha256(requests)
    outcome, reason, reply, parsed = "transport_error", "not sent", None, None
    for attempt, body in enumerate(requests, start=1):
        row: dict[str, Any] = {
            "t_utc": utc_now(),
            "task": spec.task,
            "sample_id": sample_id,
            "attempt": attempt,
            "max_attempts": len(requests),
            "request": body,
        }
        try:
            reply = await client.complete(body)
        except TransportFailure as exc:
            outcome, reason, reply, parsed = "transport_error", exc.message, None, None
            ledger.append(
                {
                    **row,
                    "reply": None,
                    "error": exc.message,
                    "outcome": outcome,
                    "reason": reason,
                    "elapsed_s": round(exc.elapsed_s, 4),
                }
            )
            continue
        outcome, parsed, reason = _classify(spec, reply)
        ledger.append(
            {
                **row,
                "reply": reply.raw,
                "error": None,
                "outcome": outcome,
                "reason": reason,
                "elapsed_s": round(reply.elapsed_s, 4),
            }
        )
        if outcome != "unparsed":
            return _final(sample_id, outcome, attempt, sha, reason, reply, parsed)
    return _final(sample_id, outcome, len(requests), sha, reason, reply, parsed)


async def run_bounded(
    items: Sequence[T], fn: Callable[[T], Awaitable[R]], tick: Callable[[], None] | None = None
) -> list[R]:
    """Run ``fn`` over every item at once (the client caps requests in flight); results keep
    the items' order. An unexpected error cancels the rest."""
    results: list[Any] = [None] * len(items)

    async def one(i: int, item: T) -> None:
        results[i] = await fn(item)
        if tick is not None:
            tick()

    async with asyncio.TaskGroup() as group:
        for i, item in enumerate(items):
            group.create_task(one(i, item))
    return results


async def judge_pending(
    client: JudgeClient,
    tdir: TaskDir,
    spec: TaskSpec,
    candidates: Iterable[tuple[str, list[dict[str, Any]]]],
    retry_failed: bool,
    progress: Progress | None = None,
    limit: int | None = None,
) -> dict[str, SampleResult]:
    """Judge the candidates (sample id, requests) a rerun has not finished yet (at most
    ``limit`` of them in this call), record each result in the task directory, and return every
    result, earlier ones included."""
    done = tdir.results()
    todo = [
        (sample_id, requests)
        for sample_id, requests in candidates
        if tdir.needs_judging(done.get(sample_id), request_sha256(requests), retry_failed)
    ][:limit]

    async def one(item: tuple[str, list[dict[str, Any]]]) -> SampleResult:
        result = await judge_sample(client, tdir.ledger, spec, *item)
        tdir.record(result)
        return result

    progress = progress or NoProgress()
    progress.start(spec.task, len(todo))
    for result in await run_bounded(todo, one, lambda: progress.advance(spec.task)):
        done[result.sample_id] = result
    return done
