"""The one-screen summary `aggregate` prints: the headline numbers of RESULTS.md."""

from __future__ import annotations

from fdb.layout import RunPaths
from fdb.records.v10 import LatencyQuantiles, Share, UnifiedResult
from fdb.records.v15 import TimingSummary
from reports.cells import interval, mean_sd, percent, seconds, table
from reports.v10 import replies_section

HEADLINE = {
    "pause_handling": [("pause intrusion", "pause_intrusion_rate")],
    "turn_taking": [
        ("response within 2 s", "response_rate_2s"),
        ("median latency", "response_latency_s"),
    ],
    "user_interruption": [
        ("exercised", "exercised_rate"),
        ("response within 2 s", "response_rate_2s"),
        ("median stop latency", "stop_latency_s"),
    ],
}


def _cell(metric: Share | LatencyQuantiles) -> str:
    if isinstance(metric, Share):
        return (
            f"{percent(metric.value)} {interval(metric.wilson95, percent)} "
            f"({metric.count}/{metric.n})"
        )
    return f"{seconds(metric.median_s)} s {interval(metric.median_bootstrap95)}"


def headline(run: RunPaths, data: dict) -> str:
    lines = [f"RESULTS.md: {run.results_md}", ""]
    v15 = [
        TimingSummary.model_validate(dumped)  # the records reports.v15 dumped
        for dumped in (data.get("v1.5") or {}).values()
    ]
    if v15:
        rows = []
        for name in v15[0].categories:
            cells = [s.categories[name] for s in v15 if name in s.categories]
            rows.append(
                [
                    name,
                    cells[0].pairs,
                    cells[0].timed_overlap_sessions,
                    mean_sd([c.stop_latency.mean_s for c in cells]),
                    mean_sd([c.response_latency.mean_s for c in cells]),
                ]
            )
        lines += ["v1.5 timing (labels: see RESULTS.md)", ""]
        lines += table(
            [
                "category",
                "pairs",
                "timed overlap sessions",
                "stop latency (s)",
                "response latency (s)",
            ],
            rows,
        ) + [""]
    unified = data.get("v1.0_unified") or {}
    for repeat, dumped in unified.items():
        result = UnifiedResult.model_validate(dumped)  # the record reports.v10 dumped
        rows = []
        for name, subset in result.subsets.items():
            cells = [
                f"{label} {_cell(getattr(subset.metrics, key))}"
                for label, key in HEADLINE[subset.task]
            ]
            counts = subset.counts
            rows.append([name, f"{counts.eligible}/{counts.selected}", "; ".join(cells)])
        lines += [f"v1.0 unified, {repeat} (95% intervals)", ""]
        lines += table(["subset", "eligible/selected", "headline"], rows) + [""]
    repeats = run.repeats()
    if unified and repeats:
        lines += replies_section(repeats[-1]).lines
    return "\n".join(lines)
