"""Cell formatting for the published tables. Missing is `n/a`, never 0."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

NA = "n/a"
NOT_MEASURED = "not measured"


def seconds(value) -> str:
    if value is None:
        return NA
    if value == "not_reached":
        return "not reached"
    return f"{float(value):.3f}"


def percent(value: float | None) -> str:
    return NA if value is None else f"{100 * value:.1f}%"


def interval(pair, fmt=seconds) -> str:
    if not pair:
        return NA
    return f"[{fmt(pair[0])}, {fmt(pair[1])}]"


def mean_sd(
    values: Sequence[float | None], fmt: str = "{:.3f}", scale: float = 1.0, suffix: str = ""
) -> str:
    """Mean ± sample standard deviation over the repeats that have a value."""
    present = [v * scale for v in values if v is not None]
    if not present:
        return NA
    mean = statistics.fmean(present)
    sd = statistics.stdev(present) if len(present) > 1 else 0.0
    return f"{fmt.format(mean)} ± {fmt.format(sd)}{suffix}"


def count_range(values: Sequence[int | None]) -> str:
    present = [v for v in values if v is not None]
    if not present:
        return NA
    low, high = min(present), max(present)
    return str(low) if low == high else f"{low}-{high}"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return lines
