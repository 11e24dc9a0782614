"""The files aggregate writes next to RESULTS.md: one CSV per table and PNG latency plots.

CSV: every table of RESULTS.md, in `tables/NN-<section>.csv` (fdb.tables.write_tables), rendered
from the same Table object as its Markdown, cells exactly as shown (`n/a` stays `n/a`); `<section>`
is the slug of the table's heading and bold caption (:func:`results_table`). PNG: histograms of
the per-session latencies (v1.5 stop and response, over the overlap sessions, from
scores/intervals.jsonl) and the per-sample v1.0 latencies (unified-samples.jsonl), pooled over
the repeats, in `plots/`. Files left from an earlier
aggregate that this one does not write are removed. Every file is written atomically.
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from fdb.io import atomic_write_bytes
from fdb.layout import RepeatPaths, RunPaths
from fdb.records import load_rows
from fdb.records.v10 import InterruptRow, TurnRow, read_sample_rows
from fdb.records.v15 import RESCORE as TIMING_RESCORE
from fdb.records.v15 import SessionIntervals
from fdb.tables import Column, Table


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:60] or "table"


def results_table(heading: str, caption: str, columns: Sequence[Column]) -> Table:
    """A RESULTS.md table, titled by its section heading and bold caption;
    its CSV name is their slug."""
    title = f"{heading} {caption}".strip()
    return Table(_slug(title), title, columns)


@dataclass
class Section:
    """One part of RESULTS.md: its Markdown lines, the tables they show (in order),
    the data behind them."""

    lines: list[str]
    data: dict | None = None
    tables: list[Table] = field(default_factory=list)

    def show(self, table: Table) -> None:
        """Render ``table`` here (just the table and a blank line:
        headings and captions are the caller's)."""
        self.lines += table.markdown(None)
        self.tables.append(table)


def _prune(folder: Path, pattern: str, keep: list[Path]) -> None:
    if folder.is_dir():
        for stale in set(folder.glob(pattern)) - set(keep):
            stale.unlink()


def latency_samples(repeats: list[RepeatPaths]) -> dict[str, list[float]]:
    """Latency values per plot, pooled over repeats, in a fixed order."""
    series: dict[str, list[float]] = {}
    for rep in repeats:
        for row in load_rows(SessionIntervals, rep.scores / "intervals.jsonl", TIMING_RESCORE):
            if row.variant == "overlap" and row.status == "ok":
                series.setdefault("v15-stop-latency", []).extend(row.stop_latencies_s)
                series.setdefault("v15-response-latency", []).extend(row.response_latencies_s)
        samples = rep.v10_reference / "unified-samples.jsonl"
        for sample in read_sample_rows(samples) if samples.exists() else []:
            if isinstance(sample, TurnRow | InterruptRow) and sample.latency_s is not None:
                series.setdefault(f"v10-{sample.subset}-response-latency", []).append(
                    sample.latency_s
                )
    return {name: values for name, values in sorted(series.items()) if values}


def _plot(name: str, values: list[float]) -> bytes:
    # lazy: matplotlib is slow to import; only the plots need it
    import matplotlib

    matplotlib.use("Agg")
    # lazy: matplotlib is slow to import; only the plots need it
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6, 3.5), dpi=100)
    axes = figure.add_subplot()
    axes.hist(values, bins=min(30, max(5, len(values))), color="#4c72b0", edgecolor="white")
    axes.set_title(f"{name} (n = {len(values)})")
    axes.set_xlabel("seconds")
    axes.set_ylabel("count")
    return figure_png(figure)


def figure_png(figure) -> bytes:
    """A matplotlib Figure as PNG bytes, byte-stable for the same figure (no version stamp)."""
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", metadata={"Software": None})
    return buffer.getvalue()


def write_plots(run: RunPaths, repeats: list[RepeatPaths]) -> list[Path]:
    out = run.root / "plots"
    written = [
        atomic_write_bytes(out / f"{name}.png", _plot(name, values))
        for name, values in latency_samples(repeats).items()
    ]
    _prune(out, "*.png", written)
    return written
