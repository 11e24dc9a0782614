"""The v1.5 section: timing per category (mean ± sd over repeats) and its per-repeat detail."""

from __future__ import annotations

from fdb.io import read_json
from reports.cells import NA, NOT_MEASURED, count_range, interval, mean_sd, seconds, table
from runs.layout import RepeatPaths

HEADER = ["Category", "Pairs", "Timed overlap sessions", "Stop latency (s)", "Response latency (s)",
          "C_RESPOND", "C_RESUME", "C_UNCERTAIN_HANDLING", "C_UNKNOWN", "Judged pairs"]


def _summaries(repeats: list[RepeatPaths]) -> dict[int, dict]:
    found = {}
    for rep in repeats:
        path = rep.scores / "summary.json"
        if path.exists():
            found[rep.number] = read_json(path)
    return found


def v15_section(repeats: list[RepeatPaths]) -> tuple[list[str], dict]:
    summaries = _summaries(repeats)
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
            NOT_MEASURED, NOT_MEASURED, NOT_MEASURED, NOT_MEASURED, NOT_MEASURED,
        ])
    lines += ["Stop and response latency: pooled means of the official timing intervals over the overlap "
              "sessions (Silero VAD; merge gaps 0.6 s user, 0.5 s model), mean ± sample SD over "
              f"{len(summaries)} repeat(s). Behavior labels need the judge: not measured yet.", ""]
    lines += table(HEADER, rows) + [""]
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
