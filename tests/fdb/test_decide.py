"""fdb/decide.py: the tests behind every gate verdict."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from fdb import decide


def test_welch_log_matches_scipy_and_gives_a_ratio_interval():
    base, cand = [100.0, 104.0, 98.0], [120.0, 118.0, 125.0]
    effect = decide.unpaired(base, cand, "lower", alpha=0.05)
    assert effect.estimate == pytest.approx(np.mean(cand) / np.mean(base))
    expected = stats.ttest_ind(
        np.log(cand), np.log(base), equal_var=False, alternative="greater"
    ).pvalue
    assert effect.p_worse == pytest.approx(expected)
    assert effect.low < math.exp(np.log(cand).mean() - np.log(base).mean()) < effect.high
    assert decide.verdict(effect, "lower", allowed=0.10) == "regressed"
    # for a higher-is-better metric the same numbers are an improvement
    up = decide.unpaired(base, cand, "higher")
    assert decide.verdict(up, "higher", allowed=0.10) == "improved"


def test_same_distribution_passes_and_small_worsening_within_allowance_passes():
    rng = np.random.default_rng(1)
    base = list(100 * np.exp(rng.normal(0, 0.03, 5)))
    cand = list(103 * np.exp(rng.normal(0, 0.03, 5)))
    effect = decide.unpaired(base, cand, "lower")
    assert decide.verdict(effect, "lower", allowed=0.10) == "pass"


def test_too_few_values_or_noise_is_inconclusive():
    one = decide.unpaired([100.0], [150.0], "lower")
    assert one.p_worse is None and decide.verdict(one, "lower", 0.1) == "inconclusive"
    noisy = decide.unpaired([100.0, 160.0], [150.0, 100.0, 190.0], "lower")
    assert decide.verdict(noisy, "lower", 0.05) == "inconclusive"


def test_mannwhitney_and_bootstrap_options():
    base, cand = [10.0, 11.0, 10.5, 10.2, 10.8], [13.0, 12.5, 13.5, 12.9, 13.2]
    mw = decide.unpaired(base, cand, "lower", test="mannwhitney")
    assert mw.p_worse == pytest.approx(1 / 252)
    assert decide.verdict(mw, "lower", 0.1) == "regressed"
    boot = decide.unpaired(base, cand, "lower", test="bootstrap")
    assert boot.low > 1.1 and decide.verdict(boot, "lower", 0.1) == "regressed"


def test_paired_bootstrap_is_seeded_and_detects_a_shift():
    rng = np.random.default_rng(3)
    ids = [f"s{i}" for i in range(40)]
    base = {k: float(v) for k, v in zip(ids, rng.normal(1.0, 0.3, 40), strict=True)}
    cand = {k: v + 0.25 + float(rng.normal(0, 0.05)) for k, v in base.items()}
    first, second = decide.paired(base, cand, "lower"), decide.paired(base, cand, "lower")
    assert first == second  # deterministic
    assert first.estimate == pytest.approx(np.mean([cand[k] - base[k] for k in ids]))
    assert first.low > 0.2 and decide.verdict(first, "lower", allowed=0.1) == "regressed"
    assert decide.verdict(first, "lower", allowed=0.5) == "pass"
    same = decide.paired(base, dict(base), "lower")
    assert decide.verdict(same, "lower", 0.0) == "pass"


def test_mcnemar_exact_on_discordant_pairs():
    base = {f"s{i}": True for i in range(20)}
    cand = dict(base)
    for i in range(9):
        cand[f"s{i}"] = False  # 9 lost, 0 gained
    effect = decide.mcnemar(base, cand, "higher")
    assert effect.test == "mcnemar-exact"
    assert effect.p_worse == pytest.approx(stats.binomtest(0, 9, 0.5, alternative="less").pvalue)
    assert effect.estimate == pytest.approx(-9 / 20)
    assert decide.verdict(effect, "higher", allowed=0.10) == "regressed"
    unchanged = decide.mcnemar(base, dict(base), "higher")
    assert decide.verdict(unchanged, "higher", 0.0) == "pass"


def test_exact_values_compare_as_they_are():
    assert decide.verdict(decide.exact(8, 4), "higher", 0.0) == "regressed"
    assert decide.verdict(decide.exact(8, 8), "higher", 0.0) == "pass"
    assert decide.verdict(decide.exact(8, 16), "higher", 0.0) == "improved"
    assert decide.verdict(decide.exact(None, 16), "higher", 0.0) == "inconclusive"


def test_few_paired_samples_cannot_be_significant():
    """Three samples that all moved one way: the sign-flip test gives 1/8, so no verdict; the
    bootstrap alone would have claimed p = 1/2001 (every resample of 3 positive deltas is
    positive)."""
    base = {"a": 1.0, "b": 1.2, "c": 1.1}
    cand = {"a": 1.5, "b": 1.9, "c": 1.6}
    effect = decide.paired(base, cand, "lower")
    assert effect.p_worse == pytest.approx(1 / 8)
    assert decide.verdict(effect, "lower", allowed=0.1) == "inconclusive"
    many = {f"s{i}": 1.0 + 0.01 * i for i in range(10)}
    moved = {k: v + 0.5 + 0.001 * i for i, (k, v) in enumerate(many.items())}
    assert decide.paired(many, moved, "lower").p_worse == pytest.approx(1 / 1024)


def test_sign_flip_p_matches_a_brute_force_count():
    import itertools

    deltas = np.array([0.3, -0.1, 0.2, 0.05, -0.02])
    observed = deltas.mean()
    flips = [
        np.mean(np.array(signs) * np.abs(deltas)) for signs in itertools.product([-1, 1], repeat=5)
    ]
    larger, smaller = decide.sign_flip_p(deltas)
    assert larger == pytest.approx(sum(f >= observed - 1e-12 for f in flips) / 32)
    assert smaller == pytest.approx(sum(f <= observed + 1e-12 for f in flips) / 32)
