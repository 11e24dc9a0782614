"""The v1.5 section: timing per category (mean ± sd over repeats) and its per-repeat detail."""

from __future__ import annotations

from functools import partial

from fdb.io import read_json
from fdb.layout import RepeatPaths
from fdb.tables import Column, Table
from reports.cells import NA, NOT_MEASURED, count_range, interval, mean_sd, seconds
from reports.exports import Section, results_table

LABELS = ("C_RESPOND", "C_RESUME", "C_UNCERTAIN_HANDLING", "C_UNKNOWN")
UNMEASURED = (None, "pending", "blocked", "not_run")  # a judge status with no labels to show
AXES = ("interaction_handling", "relevance", "grounding", "joint")
SHARE = partial(mean_sd, fmt="{:.1f}", scale=100.0, suffix="%")  # per-repeat shares -> "50.0 ± 5.0%"


def _measured(fmt):
    """A cell of per-repeat values, ``not measured`` where no judge produced them (None)."""
    return lambda values: NOT_MEASURED if values is None else fmt(values)


# Each cell holds the per-repeat values; the column's formatter shows them as a range or mean ± sd.
COLUMNS = [Column("category", "Category"), Column("pairs", "Pairs", count_range),
           Column("timed_overlap_sessions", "Timed overlap sessions", count_range),
           Column("stop_latency_s", "Stop latency (s)", mean_sd),
           Column("response_latency_s", "Response latency (s)", mean_sd),
           *(Column(label, label, _measured(SHARE)) for label in LABELS),
           Column("judged_pairs", "Judged pairs", _measured(count_range))]
SEMANTIC_COLUMNS = [Column("category", "Category"),
                    *(Column(f"{a}_{k}", f"{a} {k}", SHARE) for a in AXES for k in ("quality", "coverage"))]
DETAIL_COLUMNS = [Column("category", "Category"), Column("eligible_pairs", "Eligible pairs"),
                  Column("stop_mean", "Stop mean [95%]"), Column("stop_median", "Stop median [95%]"),
                  Column("stop_intervals", "Stop intervals"), Column("response_mean", "Response mean [95%]"),
                  Column("response_median", "Response median [95%]"),
                  Column("response_intervals", "Response intervals"), Column("failed_sessions", "Failed sessions")]


def _summaries(repeats: list[RepeatPaths]) -> dict[int, dict]:
    found = {}
    for rep in repeats:
        path = rep.scores / "summary.json"
        if path.exists():
            found[rep.number] = read_json(path)
    return found


def _judges(repeats: list[RepeatPaths]) -> dict[int, dict]:
    found = {}
    for rep in repeats:
        path = rep.root / "judge.json"
        if path.exists():
            found[rep.number] = read_json(path)
    return found


def _behavior_cell(name: str, judged: list[dict]) -> dict | None:
    cells = []
    for summary in judged:
        behavior = summary.get("behavior") or {}
        if behavior.get("status") in UNMEASURED:
            continue
        cell = behavior["all"] if name == "all" else behavior.get("categories", {}).get(name)
        if cell:
            cells.append(cell)
    return cells or None


def _label_values(name: str, judged: list[dict]) -> dict:
    """Per label, the share of judged pairs in each judged repeat; None (not measured) without a judge."""
    cells = _behavior_cell(name, judged)
    if not cells:
        return dict.fromkeys((*LABELS, "judged_pairs"))
    values = {label: [(c["labels"].get(label) or {}).get("share") if c["judged"] else None for c in cells]
              for label in LABELS}
    return values | {"judged_pairs": [c["judged"] for c in cells]}


def semantic_table(categories: list[str], judged: list[dict]) -> Table | None:
    runs = [j["semantic"] for j in judged if (j.get("semantic") or {}).get("status") in ("complete", "has_failures")]
    if not runs:
        return None
    table = results_table("v1.5", "", SEMANTIC_COLUMNS)
    for name in categories:
        row = {"category": name}
        for axis in AXES:
            cells = [(r["all"] if name == "all" else r["categories"].get(name, {})).get(axis) for r in runs]
            cells = [c for c in cells if c]
            row[f"{axis}_quality"] = [c["quality"] for c in cells]
            row[f"{axis}_coverage"] = [c["coverage"] for c in cells]
        table.add(**row)
    return table


def v15_section(repeats: list[RepeatPaths]) -> Section:
    """RESULTS.md's v1.5 section: one column value per repeat (mean ± SD over repeats)."""
    summaries = {f"repeat-{n}": s for n, s in _summaries(repeats).items()}
    return timing_section(summaries, list(_judges(repeats).values()), "## v1.5",
                          "No v1.5 timing yet (no scores/summary.json); run `python -m fdb asr`.")


def timing_section(summaries: dict[str, dict], judged: list[dict], heading: str, missing: str) -> Section:
    """The v1.5 tables of timing summaries (``summaries``: label -> scores/summary.json, e.g.
    "repeat-1"; one value per label in each cell) and judge.json files (``judged``); the same
    section for a run's repeats (RESULTS.md) and for one exported cohort (``score v15 report``)."""
    section = Section([heading, ""], {})
    if not summaries:
        section.lines += [missing, ""]
        return section
    categories: list[str] = []
    for summary in summaries.values():
        categories += [c for c in summary["categories"] if c not in categories]
    table = results_table("v1.5", "", COLUMNS)
    for name in categories:
        cells = [s["categories"][name] for s in summaries.values() if name in s["categories"]]
        table.add(category=name, pairs=[c["pairs"] for c in cells],
                  timed_overlap_sessions=[c["timed_overlap_sessions"] for c in cells],
                  stop_latency_s=[c["stop_latency"]["mean_s"] for c in cells],
                  response_latency_s=[c["response_latency"]["mean_s"] for c in cells],
                  **_label_values(name, judged))
    judge_note = _judge_note(judged)
    section.lines += ["Stop and response latency: pooled means of the official timing intervals over the overlap "
                      "sessions (Silero VAD; merge gaps 0.6 s user, 0.5 s model), mean ± sample SD over "
                      f"{len(summaries)} repeat(s). {judge_note}", ""]
    section.show(table)
    semantic = semantic_table(categories, judged)
    if semantic is not None:
        section.lines += ["Semantic judge (fdb's rubric, control-gated): quality = A/(A+F), coverage = (A+F)/N.", ""]
        section.show(semantic)
    for label, summary in summaries.items():
        _detail(section, label, summary)
    section.data = dict(summaries)
    return section


def _stats(prefix: str, stats: dict) -> dict:
    return {f"{prefix}_mean": f"{seconds(stats['mean_s'])} {interval(stats['mean_bootstrap95'])}",
            f"{prefix}_median": f"{seconds(stats['median_s'])} {interval(stats['median_bootstrap95'])}",
            f"{prefix}_intervals": stats["intervals"]}


def _detail(section: Section, label: str, summary: dict) -> None:
    heading = f"v1.5 timing detail, {label}"
    table = results_table(heading, "", DETAIL_COLUMNS)
    for name, c in summary["categories"].items():
        table.add(category=name, eligible_pairs=c["eligible_pairs"], **_stats("stop", c["stop_latency"]),
                  **_stats("response", c["response_latency"]), failed_sessions=c["failed_sessions"])
    note = f"{label}: sample-cluster bootstrap intervals (2000 resamples, seed 0); {NA} = empty set."
    section.lines += [f"### {heading}", "", note, ""]
    section.show(table)


def _judge_note(judged: list[dict]) -> str:
    statuses = [(j.get("behavior") or {}).get("status") for j in judged]
    if not judged or all(s in UNMEASURED for s in statuses):
        reasons = {(j.get("behavior") or {}).get("message") for j in judged} - {None}
        what = next((w for s, w in (("blocked", "blocked"), ("not_run", "not run")) if s in statuses), "no judge ran")
        why = f" ({'; '.join(sorted(reasons))})" if reasons else ""
        return f"Behavior labels: not measured — {what}{why}."
    models = sorted({str((j.get("judge") or {}).get("model")) for j in judged})
    sources = sorted({str(((j.get("behavior") or {}).get("source") or {}).get("label")) for j in judged
                      if (j.get("behavior") or {}).get("source")})
    prompt = f" with the {', '.join(sources)}" if sources else ""
    return (f"Behavior labels by {', '.join(models)}{prompt}: shares over judged pairs (Judged pairs), "
            "mean ± SD over repeats.")
