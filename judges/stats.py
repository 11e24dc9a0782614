"""Wilson 95% intervals for label shares (the same definition as ``scorers.stats.wilson``:
z = Phi^-1(0.975), endpoints exactly 0 at a count of 0 and exactly 1 at a count of n)."""

from __future__ import annotations

import math
from statistics import NormalDist

from fdb.records.judge import Share

WILSON_Z = NormalDist().inv_cdf(0.975)


def wilson(count: int, n: int, z: float = WILSON_Z) -> tuple[float, float] | None:
    """95% Wilson score interval for count/n; None when n is 0."""
    if n <= 0:
        return None
    if not 0 <= count <= n:
        raise ValueError(f"count {count} outside [0, {n}]")
    p = count / n
    z2 = z * z
    denom = 1.0 + z2 / n
    center = (p + z2 / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denom
    low = 0.0 if count == 0 else max(0.0, center - half)
    high = 1.0 if count == n else min(1.0, center + half)
    return (low, high)


def share(count: int, n: int) -> Share:
    return Share(count=count, share=count / n if n else None, ci95=wilson(count, n))
