"""Terminal output of the judge phase: a rich progress bar per task and a one-screen summary."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from fdb.records.judge import LABELS, JudgeSummary
from judges.semantic.rubric import AXES


class RichProgress:
    """``judges.engine.Progress`` on a rich progress bar (one row per task)."""

    def __init__(self, console: Console):
        self.bar = Progress(
            TextColumn("{task.description:<10}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        )
        self.rows: dict[str, Any] = {}

    def __enter__(self) -> RichProgress:
        self.bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.stop()

    def start(self, task: str, total: int) -> None:
        self.rows[task] = self.bar.add_task(task, total=total)

    def advance(self, task: str) -> None:
        self.bar.advance(self.rows[task])


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def _behavior(console: Console, summary: JudgeSummary) -> None:
    b = summary.behavior
    if b is None:
        return
    table = Table(title=f"v1.5 behavior labels: {b.status}", title_justify="left")
    for col in ("category", "pairs", "judged", *LABELS, "other outcomes"):
        table.add_column(col)
    for name, cell in [*b.categories.items(), ("all", b.all)]:
        other = ", ".join(f"{k} {v}" for k, v in cell.outcomes.items() if v and k != "valid") or "-"
        table.add_row(
            name,
            str(cell.selected),
            str(cell.judged),
            *(_pct(cell.labels[lab].share) for lab in LABELS),
            other,
        )
    console.print(table)
    counts = {"valid": b.all.outcomes["valid"]} | {
        k: v for k, v in b.all.outcomes.items() if v and k != "valid"
    }
    console.print(json.dumps(counts), markup=False, highlight=False)


def _semantic(console: Console, summary: JudgeSummary) -> None:
    s = summary.semantic
    if s is None:
        return
    if s.controls:
        c = s.controls
        console.print(f"controls: {c['matched']}/{c['total']} axis statuses match")
    if s.status in ("not_run", "pending"):
        console.print(f"v1.5 semantic judge: {s.status}")
        return
    table = Table(
        title=f"v1.5 semantic judge: {s.status} (quality A/(A+F), coverage (A+F)/N)",
        title_justify="left",
    )
    table.add_column("category")
    for axis in (*AXES, "joint"):
        table.add_column(f"{axis} q / cov")
    for name, cells in [*s.categories.items(), ("all", s.all)]:
        table.add_row(
            name,
            *(f"{_pct(cells[a].quality)} / {_pct(cells[a].coverage)}" for a in (*AXES, "joint")),
        )
    console.print(table)


def _relevance(console: Console, summary: JudgeSummary) -> None:
    r = summary.relevance
    if r is None:
        return
    value = "n/a" if r.relevance is None else f"{r.relevance:.3f}"
    console.print(
        f"v1.0 interruption relevance: {r.status}; relevance {value} over {r.rated}/{r.takeovers} "
        f"takeover samples; retries {r.retries}; takeovers {r.takeovers}/{r.evaluated} (counted "
        "once each)"
    )
    if r.rubric:
        console.print(f"  rubric: {r.rubric['label']}")
    if r.failed_samples:
        console.print(f"  [red]no valid rating[/] for {', '.join(r.failed_samples)}")


def print_summary(console: Console, summary: JudgeSummary) -> None:
    judge = summary.judge
    if judge.get("configured"):
        console.print(
            f"judge: {judge['name']} ({judge['kind']}, model {judge['model']}, relevance model "
            f"{judge['relevance_model']}, concurrency {judge['concurrency']})"
        )
    else:
        console.print(f"[yellow]judge: pending[/] ({judge.get('reason')})")
    _behavior(console, summary)
    _semantic(console, summary)
    _relevance(console, summary)
    for name, task in (
        ("behavior", summary.behavior),
        ("semantic", summary.semantic),
        ("relevance", summary.relevance),
    ):
        if (
            task is not None
            and task.message
            and task.status in ("blocked", "control_failed", "has_failures", "failed")
        ):
            console.print(f"[red]{name}[/]: {task.message}")
        elif task is not None and task.message and task.status == "not_run" and name == "behavior":
            console.print(f"[yellow]{name}[/]: {task.message}")
    console.print(
        f"written: {summary.repeat_dir}/judge.json"
        + "".join(f", {d}/" for d in summary.dirs.values() if d)
    )
