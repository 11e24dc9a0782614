"""The v1.5 section: timing per category (mean ± sd over repeats) and its per-repeat detail."""

from __future__ import annotations

from fdb.io import read_json
from fdb.layout import RepeatPaths
from reports.cells import NA, NOT_MEASURED, count_range, interval, mean_sd, seconds, table

HEADER = ["Category", "Pairs", "Timed overlap sessions", "Stop latency (s)", "Response latency (s)",
          "C_RESPOND", "C_RESUME", "C_UNCERTAIN_HANDLING", "C_UNKNOWN", "Judged pairs"]


def _summaries(repeats: list[RepeatPaths]) -> dict[int, dict]:
    found = {}
    for rep in repeats:
        path = rep.scores / "summary.json"
        if path.exists():
            found[rep.number] = read_json(path)
    return found


LABELS = ("C_RESPOND", "C_RESUME", "C_UNCERTAIN_HANDLING", "C_UNKNOWN")
AXES = ("interaction_handling", "relevance", "grounding", "joint")


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
        if behavior.get("status") in (None, "pending", "blocked"):
            continue
        cell = behavior["all"] if name == "all" else behavior.get("categories", {}).get(name)
        if cell:
            cells.append(cell)
    return cells or None


def _label_cells(name: str, judged: list[dict]) -> list[str]:
    cells = _behavior_cell(name, judged)
    if not cells:
        return [NOT_MEASURED] * (len(LABELS) + 1)
    out = [mean_sd([(c["labels"].get(label) or {}).get("share") if c["judged"] else None for c in cells],
                   fmt="{:.1f}", scale=100.0, suffix="%") for label in LABELS]
    return out + [count_range([c["judged"] for c in cells])]


def semantic_table(categories: list[str], judged: list[dict]) -> list[str]:
    runs = [j["semantic"] for j in judged if (j.get("semantic") or {}).get("status") in ("complete", "has_failures")]
    if not runs:
        return []
    rows = []
    for name in categories:
        row = [name]
        for axis in AXES:
            cells = [(r["all"] if name == "all" else r["categories"].get(name, {})).get(axis) for r in runs]
            cells = [c for c in cells if c]
            row += [mean_sd([c["quality"] for c in cells], "{:.1f}", 100.0, "%"),
                    mean_sd([c["coverage"] for c in cells], "{:.1f}", 100.0, "%")]
        rows.append(row)
    header = ["Category"] + [f"{a} {k}" for a in AXES for k in ("quality", "coverage")]
    return ["Semantic judge (fdb's rubric, control-gated): quality = A/(A+F), coverage = (A+F)/N.", ""] + \
        table(header, rows) + [""]


def v15_section(repeats: list[RepeatPaths]) -> tuple[list[str], dict]:
    summaries = _summaries(repeats)
    judged = list(_judges(repeats).values())
    lines = ["## v1.5", ""]
    if not summaries:
        return lines + ["No v1.5 timing yet (no scores/summary.json); run `python -m fdb asr`.", ""], {}
    categories: list[str] = []
    for summary in summaries.values():
        categories += [c for c in summary["categories"] if c not in categories]
    rows = []
    for name in categories:
        cells = [s["categories"][name] for s in summaries.values() if name in s["categories"]]
        rows.append([
            name, count_range([c["pairs"] for c in cells]), count_range([c["timed_overlap_sessions"] for c in cells]),
            mean_sd([c["stop_latency"]["mean_s"] for c in cells]),
            mean_sd([c["response_latency"]["mean_s"] for c in cells]),
            *_label_cells(name, judged),
        ])
    judge_note = _judge_note(judged)
    lines += ["Stop and response latency: pooled means of the official timing intervals over the overlap "
              "sessions (Silero VAD; merge gaps 0.6 s user, 0.5 s model), mean ± sample SD over "
              f"{len(summaries)} repeat(s). {judge_note}", ""]
    lines += table(HEADER, rows) + [""]
    lines += semantic_table(categories, judged)
    for number, summary in summaries.items():
        lines += _detail(number, summary)
    return lines, {f"repeat-{n}": s for n, s in summaries.items()}


def _stats(stats: dict) -> list[str]:
    return [f"{seconds(stats['mean_s'])} {interval(stats['mean_bootstrap95'])}",
            f"{seconds(stats['median_s'])} {interval(stats['median_bootstrap95'])}", str(stats["intervals"])]


def _detail(number: int, summary: dict) -> list[str]:
    rows = []
    for name, c in summary["categories"].items():
        rows.append([name, c["eligible_pairs"], *_stats(c["stop_latency"]), *_stats(c["response_latency"]),
                     c["failed_sessions"]])
    header = ["Category", "Eligible pairs", "Stop mean [95%]", "Stop median [95%]", "Stop intervals",
              "Response mean [95%]", "Response median [95%]", "Response intervals", "Failed sessions"]
    note = f"repeat-{number}: sample-cluster bootstrap intervals (2000 resamples, seed 0); {NA} = empty set."
    return [f"### v1.5 timing detail, repeat-{number}", "", note, ""] + table(header, rows) + [""]


def _judge_note(judged: list[dict]) -> str:
    statuses = [(j.get("behavior") or {}).get("status") for j in judged]
    if not judged or all(s in (None, "pending", "blocked") for s in statuses):
        reasons = {(j.get("behavior") or {}).get("message") for j in judged} - {None}
        why = f" ({'; '.join(sorted(reasons))})" if reasons else ""
        return f"Behavior labels: not measured — no judge ran{why}."
    models = sorted({str((j.get("judge") or {}).get("model")) for j in judged})
    return (f"Behavior labels by {', '.join(models)}: shares over judged pairs (Judged pairs), "
            "mean ± SD over repeats.")
