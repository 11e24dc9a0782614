"""The v1.5 section: timing per category (mean ± sd over repeats) and its per-repeat detail."""

from __future__ import annotations

from functools import partial

from fdb.layout import RepeatPaths
from fdb.records.judge import LABELS, AxisCell, BehaviorCell, JudgeSummary, SemanticSummary
from fdb.records.v15 import LatencyStats, TimingSummary
from fdb.tables import Column, Table
from reports.cells import NA, NOT_MEASURED, count_range, interval, mean_sd, seconds
from reports.exports import Section, results_table

UNMEASURED = (None, "pending", "blocked", "not_run")  # a judge status with no labels to show
AXES = ("interaction_handling", "relevance", "grounding", "joint")
SHARE = partial(
    mean_sd, fmt="{:.1f}", scale=100.0, suffix="%"
)  # per-repeat shares -> "50.0 ± 5.0%"


def _measured(fmt):
    """A cell of per-repeat values, ``not measured`` where no judge produced them (None)."""
    return lambda values: NOT_MEASURED if values is None else fmt(values)


# Each cell holds the per-repeat values; the column's formatter shows them as a range or mean ± sd.
COLUMNS = [
    Column("category", "Category"),
    Column("pairs", "Pairs", count_range),
    Column("timed_overlap_sessions", "Timed overlap sessions", count_range),
    Column("stop_latency_s", "Stop latency (s)", mean_sd),
    Column("response_latency_s", "Response latency (s)", mean_sd),
    *(Column(label, label, _measured(SHARE)) for label in LABELS),
    Column("judged_pairs", "Judged pairs", _measured(count_range)),
]
SEMANTIC_COLUMNS = [
    Column("category", "Category"),
    *(Column(f"{a}_{k}", f"{a} {k}", SHARE) for a in AXES for k in ("quality", "coverage")),
]
DETAIL_COLUMNS = [
    Column("category", "Category"),
    Column("eligible_pairs", "Eligible pairs"),
    Column("stop_mean", "Stop mean [95%]"),
    Column("stop_median", "Stop median [95%]"),
    Column("stop_intervals", "Stop intervals"),
    Column("response_mean", "Response mean [95%]"),
    Column("response_median", "Response median [95%]"),
    Column("response_intervals", "Response intervals"),
    Column("failed_sessions", "Failed sessions"),
]


def _summaries(repeats: list[RepeatPaths]) -> dict[int, TimingSummary]:
    found = {}
    for rep in repeats:
        summary = TimingSummary.load(rep.scores / "summary.json")
        if summary is not None:
            found[rep.number] = summary
    return found


def _judges(repeats: list[RepeatPaths]) -> dict[int, JudgeSummary]:
    found = {}
    for rep in repeats:
        judge = JudgeSummary.load(rep.root / "judge.json")
        if judge is not None:
            found[rep.number] = judge
    return found


def _behavior_cells(name: str, judged: list[JudgeSummary]) -> list[BehaviorCell]:
    cells = []
    for summary in judged:
        behavior = summary.behavior
        if behavior is None or behavior.status in UNMEASURED:
            continue
        cell = behavior.all if name == "all" else behavior.categories.get(name)
        if cell:
            cells.append(cell)
    return cells


def _label_values(name: str, judged: list[JudgeSummary]) -> dict:
    """Per label, the share of judged pairs in each judged repeat;
    None (not measured) without a judge."""
    cells = _behavior_cells(name, judged)
    if not cells:
        return dict.fromkeys((*LABELS, "judged_pairs"))
    values = {label: [_share(c, label) if c.judged else None for c in cells] for label in LABELS}
    return values | {"judged_pairs": [c.judged for c in cells]}


def _share(cell: BehaviorCell, label: str) -> float | None:
    share = cell.labels.get(label)
    return share.share if share else None


def semantic_table(categories: list[str], runs: list[SemanticSummary | None]) -> Table | None:
    """The semantic grades per category, over the graded ``runs`` (None: no semantic judge)."""
    runs = [r for r in runs if r is not None and r.status in ("complete", "has_failures")]
    if not runs:
        return None
    table = results_table("v1.5", "", SEMANTIC_COLUMNS)
    for name in categories:
        row = {"category": name}
        for axis in AXES:
            cells = [_axis(r, name, axis) for r in runs]
            cells = [c for c in cells if c]
            row[f"{axis}_quality"] = [c.quality for c in cells]
            row[f"{axis}_coverage"] = [c.coverage for c in cells]
        table.add(**row)
    return table


def _axis(run: SemanticSummary, category: str, axis: str) -> AxisCell | None:
    return (run.all if category == "all" else run.categories.get(category, {})).get(axis)


def v15_section(repeats: list[RepeatPaths]) -> Section:
    """RESULTS.md's v1.5 section: one column value per repeat (mean ± SD over repeats)."""
    summaries = {f"repeat-{n}": s for n, s in _summaries(repeats).items()}
    return timing_section(
        summaries,
        list(_judges(repeats).values()),
        "## v1.5",
        "No v1.5 timing yet (no scores/summary.json); run `python -m fdb asr`.",
    )


def timing_section(
    summaries: dict[str, TimingSummary], judged: list[JudgeSummary], heading: str, missing: str
) -> Section:
    """The v1.5 tables of timing summaries (``summaries``: label -> scores/summary.json, e.g.
    "repeat-1"; one value per label in each cell) and judge.json files (``judged``); the same
    section for a run's repeats (RESULTS.md) and for one exported cohort (``score v15 report``)."""
    section = Section([heading, ""], {})
    if not summaries:
        section.lines += [missing, ""]
        return section
    categories: list[str] = []
    for summary in summaries.values():
        categories += [c for c in summary.categories if c not in categories]
    table = results_table("v1.5", "", COLUMNS)
    for name in categories:
        cells = [s.categories[name] for s in summaries.values() if name in s.categories]
        table.add(
            category=name,
            pairs=[c.pairs for c in cells],
            timed_overlap_sessions=[c.timed_overlap_sessions for c in cells],
            stop_latency_s=[c.stop_latency.mean_s for c in cells],
            response_latency_s=[c.response_latency.mean_s for c in cells],
            **_label_values(name, judged),
        )
    judge_note = _judge_note(judged)
    section.lines += [
        "Stop and response latency: pooled means of the official timing intervals over the overlap "
        "sessions (Silero VAD; merge gaps 0.6 s user, 0.5 s model), mean ± sample SD over "
        f"{len(summaries)} repeat(s). {judge_note}",
        "",
    ]
    section.show(table)
    semantic = semantic_table(categories, [j.semantic for j in judged])
    if semantic is not None:
        section.lines += [
            "Semantic judge (fdb's rubric, control-gated): quality = A/(A+F), coverage = (A+F)/N.",
            "",
        ]
        section.show(semantic)
    for label, summary in summaries.items():
        _detail(section, label, summary)
    section.data = {label: summary.dump() for label, summary in summaries.items()}
    return section


def _stats(prefix: str, stats: LatencyStats) -> dict:
    return {
        f"{prefix}_mean": f"{seconds(stats.mean_s)} {interval(stats.mean_bootstrap95)}",
        f"{prefix}_median": f"{seconds(stats.median_s)} {interval(stats.median_bootstrap95)}",
        f"{prefix}_intervals": stats.intervals,
    }


def _detail(section: Section, label: str, summary: TimingSummary) -> None:
    heading = f"v1.5 timing detail, {label}"
    table = results_table(heading, "", DETAIL_COLUMNS)
    for name, c in summary.categories.items():
        table.add(
            category=name,
            eligible_pairs=c.eligible_pairs,
            **_stats("stop", c.stop_latency),
            **_stats("response", c.response_latency),
            failed_sessions=c.failed_sessions,
        )
    note = (
        f"{label}: sample-cluster bootstrap intervals (2000 resamples, seed 0); {NA} = empty set."
    )
    section.lines += [f"### {heading}", "", note, ""]
    section.show(table)


def _judge_note(judged: list[JudgeSummary]) -> str:
    behaviors = [j.behavior for j in judged]
    statuses = [b.status if b else None for b in behaviors]
    if not judged or all(s in UNMEASURED for s in statuses):
        reasons = {b.message for b in behaviors if b} - {None}
        what = next(
            (w for s, w in (("blocked", "blocked"), ("not_run", "not run")) if s in statuses),
            "no judge ran",
        )
        why = f" ({'; '.join(sorted(reasons))})" if reasons else ""
        return f"Behavior labels: not measured — {what}{why}."
    models = sorted({str(j.judge.get("model")) for j in judged})
    sources = sorted({str(b.source.get("label")) for b in behaviors if b and b.source})
    prompt = f" with the {', '.join(sources)}" if sources else ""
    return (
        f"Behavior labels by {', '.join(models)}{prompt}: shares over judged pairs (Judged pairs), "
        "mean ± SD over repeats."
    )
