"""The statistics the scorers and judges share: Wilson intervals, the ceil-quantile rule and the
sample-resampling bootstrap.

Definitions (spec "Denominators and intervals" and ``unified-v10-rulings.md``):

- a share of samples has a 95% Wilson interval with z = ``scipy.stats.norm.ppf(0.975)``
  (ruling 11), whose endpoints are exactly 0 at a count of 0 and exactly 1 at a count of n;
- a quantile is Q(q) = inf{t : F(t) >= q}, the ceil(qN)-th smallest value, no interpolation;
  values may be ``inf`` (a sample that never responds), and then the quantile is not reached;
- the bootstrap draws ``numpy.random.default_rng(0).integers(0, n, size=(2000, n))`` afresh for
  each metric (ruling 10); the interval is the ceil(0.025 B)-th and ceil(0.975 B)-th smallest of
  the B valid resample statistics (a resample whose statistic is NaN is not valid);
- a serving quantile in milliseconds (``quantile_ms``) is the ceil-quantile of seconds times
  1000, rounded to 3 decimals; None for no values.
"""

from __future__ import annotations

import math
from fractions import Fraction
from statistics import NormalDist

import numpy as np

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0
LOW = Fraction(1, 40)  # 0.025
HIGH = Fraction(39, 40)  # 0.975
MEDIAN = Fraction(1, 2)
P50 = MEDIAN
P90 = Fraction(9, 10)
P95 = Fraction(19, 20)


def _wilson_z() -> float:
    # lazy: scipy.stats is slow to import (~0.5 s)
    from scipy.stats import norm

    return float(norm.ppf(0.975))


WILSON_Z = _wilson_z()
# The judges' label shares have always used the standard library's value, which sits 2 ulps
# below scipy's (1.9599639845400536 vs 1.959963984540054); kept so that their outputs stay
# byte-identical. Moving them to WILSON_Z is a deliberate change of published digits.
WILSON_Z_NORMALDIST = NormalDist().inv_cdf(0.975)


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


def ceil_rank(q: Fraction, n: int) -> int:
    """ceil(q * n), computed exactly; the 1-based rank of Q(q) among n sorted values."""
    return max(1, math.ceil(Fraction(q) * n))


def ceil_quantile(values: np.ndarray | list[float], q: Fraction) -> float | None:
    """Q(q): the ceil(qN)-th smallest value (may be inf); None for an empty set."""
    arr = np.sort(np.asarray(values, dtype=np.float64))
    if arr.size == 0:
        return None
    return float(arr[ceil_rank(q, arr.size) - 1])


def quantile_ms(values: list[float], q: Fraction) -> float | None:
    """Q(q) of values in seconds, as milliseconds rounded to 3 decimals; None for no values."""
    found = ceil_quantile(values, q) if values else None
    return None if found is None else round(found * 1000.0, 3)


def bootstrap_indices(n: int) -> np.ndarray:
    """One draw of 2000 resamples of n units from a fresh ``default_rng(0)`` (ruling 10)."""
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    return rng.integers(0, n, size=(BOOTSTRAP_RESAMPLES, n))


def percentile_interval(statistics: np.ndarray) -> tuple[tuple[float, float] | None, int]:
    """(interval, B): ceil(0.025 B)-th and ceil(0.975 B)-th smallest valid statistic.

    NaN marks an invalid resample and is skipped; inf is a valid value (not reached).
    """
    stats = np.asarray(statistics, dtype=np.float64)
    valid = np.sort(stats[~np.isnan(stats)])
    b = int(valid.size)
    if b == 0:
        return None, 0
    return (float(valid[ceil_rank(LOW, b) - 1]), float(valid[ceil_rank(HIGH, b) - 1])), b


def bootstrap_quantile(
    values: np.ndarray, q: Fraction = MEDIAN
) -> tuple[tuple[float, float] | None, int]:
    """Percentile interval of Q(q) over resamples of the given per-unit values (inf allowed)."""
    vals = np.asarray(values, dtype=np.float64)
    if vals.size == 0:
        return None, 0
    draws = np.sort(vals[bootstrap_indices(vals.size)], axis=1)
    return percentile_interval(draws[:, ceil_rank(q, vals.size) - 1])


def bootstrap_ratio(
    numerators: np.ndarray, denominators: np.ndarray
) -> tuple[tuple[float, float] | None, int]:
    """Percentile interval of a pooled ratio sum(num)/sum(den) over resampled units.

    Integer inputs are summed exactly; a resample with a zero denominator is skipped.
    """
    num = np.asarray(numerators)
    den = np.asarray(denominators)
    if num.size == 0:
        return None, 0
    idx = bootstrap_indices(num.size)
    num_sum = num[idx].sum(axis=1)
    den_sum = den[idx].sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(den_sum > 0, num_sum / np.where(den_sum > 0, den_sum, 1), np.nan)
    return percentile_interval(ratio.astype(np.float64))
