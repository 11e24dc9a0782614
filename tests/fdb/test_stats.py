"""Wilson intervals, the ceil-quantile rule and the bootstrap procedure (rulings 10, 11)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy.stats import norm

from fdb.stats import (
    WILSON_Z,
    bootstrap_indices,
    bootstrap_quantile,
    bootstrap_ratio,
    ceil_quantile,
    percentile_interval,
    wilson,
)
from scorers.times import to_s, to_us


def test_wilson_z_is_norm_ppf():
    assert WILSON_Z == norm.ppf(0.975)
    assert WILSON_Z != 1.96


def test_wilson_endpoints_exact_at_zero_and_n():
    for n in (1, 2, 7, 119, 200):
        low, high = wilson(0, n)
        assert low == 0.0 and 0 < high < 1
        low, high = wilson(n, n)
        assert high == 1.0 and 0 < low < 1
    assert wilson(0, 0) is None


def test_wilson_known_value():
    low, high = wilson(3, 5)
    assert low == pytest.approx(0.2307, abs=1e-4)
    assert high == pytest.approx(0.8824, abs=1e-4)


def test_ceil_quantile_no_interpolation_and_not_reached():
    assert ceil_quantile([3.0, 1.0, 2.0, 4.0], Fraction(1, 2)) == 2.0  # ceil(2) = 2nd
    assert ceil_quantile([3.0, 1.0, 2.0], Fraction(1, 2)) == 2.0  # ceil(1.5) = 2nd
    assert ceil_quantile([1.0, math.inf, math.inf], Fraction(1, 2)) == math.inf
    assert ceil_quantile([1.0] * 9 + [math.inf], Fraction(9, 10)) == 1.0  # ceil(9) = 9th
    assert ceil_quantile([], Fraction(1, 2)) is None


def test_microsecond_rounding_and_exact_latency():
    assert to_us(2.14) - to_us(1.14) == 1_000_000  # float 2.14 - 1.14 is 1.0000000000000002
    assert to_us(2.0100000000000016) == 2_010_000
    # correct rounding of the binary value (ruling 1), where numpy.round and round(x * 1e6) differ
    assert to_us(1 / 16000) == 63 and round(1 / 16000 * 1e6) == 62
    assert to_us(11 / 16000) == 687 and float(np.round(11 / 16000, 6)) == 0.000688
    assert to_s(to_us(6.32000000000005)) == 6.32


def test_bootstrap_indices_fresh_rng_per_call():
    a, b = bootstrap_indices(7), bootstrap_indices(7)
    assert a.shape == (2000, 7)
    assert np.array_equal(a, b)
    assert np.array_equal(a, np.random.default_rng(0).integers(0, 7, size=(2000, 7)))


def test_bootstrap_median_matches_naive_loop():
    values = np.array([0.0, 1e6, 2.5e6, 4.9e6, math.inf, math.inf])
    interval, valid = bootstrap_quantile(values)
    idx = np.random.default_rng(0).integers(0, 6, size=(2000, 6))
    medians = sorted(sorted(values[row])[math.ceil(0.5 * 6) - 1] for row in idx)
    assert valid == 2000
    assert interval == (medians[49], medians[1949])  # the 50th and 1950th smallest


def test_bootstrap_ratio_skips_zero_denominators():
    num, den = np.array([5, 0, 1]), np.array([10, 0, 0])
    interval, valid = bootstrap_ratio(num, den)
    idx = np.random.default_rng(0).integers(0, 3, size=(2000, 3))
    ratios = sorted(num[r].sum() / den[r].sum() for r in idx if den[r].sum() > 0)
    assert valid == len(ratios) < 2000
    b = len(ratios)
    assert interval == (ratios[math.ceil(0.025 * b) - 1], ratios[math.ceil(0.975 * b) - 1])


def test_percentile_interval_empty():
    assert percentile_interval(np.array([np.nan, np.nan])) == (None, 0)
