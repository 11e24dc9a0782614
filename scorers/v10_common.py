"""Metric builders shared by the unified v1.0 subsets (spec "Denominators and intervals").

- ``share``: a sample share with its Wilson interval and selected bounds
  [count / selected, (count + unknown) / selected] (ruling 12: shares only).
- ``pooled_ratio``: sum of numerators over sum of denominators with a percentile bootstrap
  that resamples whole samples; a resample with a zero denominator is skipped (ruling 10).
- ``latency_quantiles``: median (with bootstrap interval) and p90 by the ceil-quantile rule,
  a sample without the event counting as infinite, reported as ``"not_reached"``.
- ``response_rate``: F(k), the share of samples with a latency of at most k seconds.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np

from fdb.records import ExportSample
from fdb.records.v10 import (
    NOT_REACHED,
    Better,
    Counts,
    LatencyQuantiles,
    PooledRatio,
    Quantile,
    Share,
)
from fdb.stats import MEDIAN, P90, bootstrap_quantile, bootstrap_ratio, ceil_quantile, wilson
from scorers.times import US_PER_S, to_s


def share(count: int, n: int, selected: int, unknown: int, better: Better) -> Share:
    """count / n with Wilson 95% and selected bounds; value and interval null when n is 0."""
    bounds = None
    if selected > 0:
        bounds = (count / selected, (count + unknown) / selected)
    return Share(
        value=count / n if n else None,
        count=count,
        n=n,
        wilson95=wilson(count, n),
        selected_bounds=bounds,
        unknown=unknown,
        better=better,
    )


def pooled_ratio(
    numerators: Sequence[int], denominators: Sequence[int], better: Better, scale: int = 1
) -> PooledRatio:
    """sum(num) / sum(den) over units in bootstrap order; ``scale`` converts the reported
    numerator and denominator (1e6 for microseconds to seconds)."""
    num = np.asarray(numerators, dtype=np.int64)
    den = np.asarray(denominators, dtype=np.int64)
    total_num, total_den = int(num.sum()), int(den.sum())
    interval, valid = bootstrap_ratio(num, den)
    return PooledRatio(
        value=total_num / total_den if total_den > 0 else None,
        numerator=total_num / scale,
        denominator=total_den / scale,
        bootstrap95=interval,
        valid_resamples=valid,
        better=better,
    )


def as_quantile(value: float | None) -> Quantile | None:
    """A microsecond quantile as seconds, ``"not_reached"`` for inf, None for no samples."""
    if value is None:
        return None
    if math.isinf(value):
        return NOT_REACHED
    return to_s(value)


def latency_quantiles(values_us: Sequence[float]) -> LatencyQuantiles:
    """Median with its bootstrap interval, and p90, of per-sample latencies (inf = never)."""
    vals = np.asarray(values_us, dtype=np.float64)
    interval, valid = bootstrap_quantile(vals, MEDIAN)
    return LatencyQuantiles(
        n=int(vals.size),
        observed=int(np.isfinite(vals).sum()),
        median_s=as_quantile(ceil_quantile(vals, MEDIAN)),
        median_bootstrap95=None
        if interval is None
        else (as_quantile(interval[0]), as_quantile(interval[1])),
        valid_resamples=valid,
        p90_s=as_quantile(ceil_quantile(vals, P90)),
    )


def response_rate(latencies_us: Sequence[float], k_s: int, selected: int, unknown: int) -> Share:
    """response_rate_ks = F(k): samples with a latency of at most k s (exact microseconds)."""
    limit = k_s * US_PER_S
    count = sum(1 for v in latencies_us if v <= limit)
    return share(count, len(latencies_us), selected, unknown, "higher")


def counts(samples: Iterable[ExportSample], declared: int | None) -> Counts:
    """declared / selected / eligible / ineligible and the reasons, each counted once per sample.
    ``declared`` is the dataset's subset size; None (not known) stays null, never the selected
    count."""
    samples = list(samples)
    eligible = sum(1 for s in samples if s.eligible)
    reasons: Counter[str] = Counter()
    for sample in samples:
        if not sample.eligible:
            reasons.update(set(sample.reasons) or {"unspecified"})
    return Counts(
        declared=declared,
        selected=len(samples),
        eligible=eligible,
        ineligible=len(samples) - eligible,
        ineligible_reasons=dict(sorted(reasons.items())),
    )


def min_observable(horizons_us: Sequence[int]) -> float | None:
    """min_observable_s: the shortest time from the reference to T (ruling 9); None if empty."""
    return to_s(min(horizons_us)) if horizons_us else None
