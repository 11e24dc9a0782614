"""Noise-aware comparison of a candidate with a baseline: the statistics every gate and
comparison uses (docs/gating.md, "How a verdict is reached").

Three designs, one per shape of data:

- **unpaired** (values per repeat, round or server start; throughput, TTFA per level):
  ``welch`` (default) is Welch's t-test on the logarithms, so the effect is a ratio
  candidate / baseline with its confidence interval exp(d ± t·se); ``mannwhitney`` is the
  one-sided Mann-Whitney U test (benchstat's), the interval then from ``bootstrap``;
  ``bootstrap`` resamples each side's values (seeded) for the ratio of means. Needs at least
  two values on each side.
- **paired** (one value per sample id on both sides; latencies): the mean per-sample delta,
  its percentile interval from a seeded paired bootstrap (2000 resamples of sample ids,
  ``default_rng(0)``), and the one-sided p-value of the sign-flip permutation test (exact up to
  16 samples). Needs at least 3 samples.
- **binary paired** (one yes/no per sample on both sides; "responded within 2 s"): the exact
  McNemar test on the discordant pairs (``scipy.stats.binomtest``), the effect the difference
  of shares with a paired bootstrap interval.

Every test is one-sided in the direction that would be a regression, at level ``alpha``; the
same at the other side tells an improvement. :func:`verdict` turns an effect into ``pass``,
``regressed``, ``improved`` or ``inconclusive`` against the allowed change.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel

Better = Literal["lower", "higher"]
Verdict = Literal["pass", "regressed", "improved", "inconclusive"]
UnpairedTest = Literal["welch", "mannwhitney", "bootstrap"]
RESAMPLES = 2000
MIN_PAIRED = 3  # a percentile bootstrap over fewer samples has next to no resamples to tell
SEED = 0


class Effect(BaseModel):
    """A candidate-vs-baseline effect. ``relative``: the effect is a ratio (1.0 = no change);
    otherwise a difference (0.0 = no change), in the metric's unit."""

    test: str
    n_baseline: int
    n_candidate: int
    baseline: float | None  # the baseline's centre (mean, or share)
    candidate: float | None
    relative: bool
    estimate: float | None  # ratio or difference
    low: (
        float | None
    )  # confidence interval at 1 - 2·alpha (two-sided), i.e. one-sided alpha each way
    high: float | None
    p_worse: float | None  # one-sided p-value against "no change", in the regression direction
    p_better: float | None
    note: str | None = None


def _clean(values: Sequence[float | None]) -> np.ndarray:
    return np.asarray(
        [float(v) for v in values if v is not None and math.isfinite(float(v))], dtype=float
    )


def _mean(values: np.ndarray) -> float | None:
    return float(values.mean()) if values.size else None


def unpaired(
    baseline: Sequence[float | None],
    candidate: Sequence[float | None],
    better: Better,
    alpha: float = 0.05,
    test: UnpairedTest = "welch",
) -> Effect:
    """The ratio candidate / baseline of values from independent repeats."""
    b, c = _clean(baseline), _clean(candidate)
    base = Effect(
        test=test,
        n_baseline=int(b.size),
        n_candidate=int(c.size),
        baseline=_mean(b),
        candidate=_mean(c),
        relative=True,
        estimate=None,
        low=None,
        high=None,
        p_worse=None,
        p_better=None,
    )
    if b.size == 0 or c.size == 0:
        return base.model_copy(update={"note": "no value on one side"})
    if base.baseline and base.baseline != 0:
        base.estimate = base.candidate / base.baseline
    if b.size < 2 or c.size < 2:
        return base.model_copy(update={"note": "fewer than 2 values on a side: no test"})
    if (b <= 0).any() or (c <= 0).any():
        test = "bootstrap" if test == "welch" else test  # logs need positive values
    if test == "welch":
        return _welch_log(b, c, better, alpha, base)
    low, high = _bootstrap_ratio(b, c, alpha)
    p_worse, p_better = (
        _mannwhitney(b, c, better) if test == "mannwhitney" else _bootstrap_p(b, c, better)
    )
    return base.model_copy(
        update={"test": test, "low": low, "high": high, "p_worse": p_worse, "p_better": p_better}
    )


def _welch_log(b: np.ndarray, c: np.ndarray, better: Better, alpha: float, base: Effect) -> Effect:
    # lazy: scipy.stats is slow to import (~0.5 s)
    from scipy import stats

    lb, lc = np.log(b), np.log(c)
    diff = float(lc.mean() - lb.mean())
    vb, vc = lb.var(ddof=1) / lb.size, lc.var(ddof=1) / lc.size
    se = math.sqrt(vb + vc)
    if se == 0.0:  # identical values on each side: the difference is exact
        worse = diff > 0 if better == "lower" else diff < 0
        p = 0.0 if diff != 0 else 1.0
        return base.model_copy(
            update={
                "low": math.exp(diff),
                "high": math.exp(diff),
                "p_worse": p if worse else 1.0,
                "p_better": p if (diff != 0 and not worse) else 1.0,
            }
        )
    df = (vb + vc) ** 2 / (vb**2 / (lb.size - 1) + vc**2 / (lc.size - 1))
    t = diff / se
    half = float(stats.t.ppf(1 - alpha, df)) * se
    upper_tail = float(stats.t.sf(t, df))  # P(T >= t): evidence the candidate is larger
    lower_tail = float(stats.t.cdf(t, df))
    p_worse, p_better = (upper_tail, lower_tail) if better == "lower" else (lower_tail, upper_tail)
    return base.model_copy(
        update={
            "low": math.exp(diff - half),
            "high": math.exp(diff + half),
            "p_worse": p_worse,
            "p_better": p_better,
        }
    )


def _mannwhitney(b: np.ndarray, c: np.ndarray, better: Better) -> tuple[float, float]:
    # lazy: scipy.stats is slow to import (~0.5 s)
    from scipy.stats import mannwhitneyu

    greater = float(mannwhitneyu(c, b, alternative="greater", method="exact").pvalue)
    less = float(mannwhitneyu(c, b, alternative="less", method="exact").pvalue)
    return (greater, less) if better == "lower" else (less, greater)


def _resampled_means(values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    picks = rng.integers(0, values.size, size=(RESAMPLES, values.size))
    return values[picks].mean(axis=1)


def _bootstrap_ratio(
    b: np.ndarray, c: np.ndarray, alpha: float
) -> tuple[float | None, float | None]:
    rng = np.random.default_rng(SEED)
    mb, mc = _resampled_means(b, rng), _resampled_means(c, rng)
    ok = mb != 0
    if not ok.any():
        return None, None
    ratios = np.sort(mc[ok] / mb[ok])
    return _percentile(ratios, alpha), _percentile(ratios, 1 - alpha)


def _bootstrap_p(b: np.ndarray, c: np.ndarray, better: Better) -> tuple[float, float]:
    rng = np.random.default_rng(SEED)
    diff = _resampled_means(c, rng) - _resampled_means(b, rng)
    larger = (np.count_nonzero(diff <= 0) + 1) / (diff.size + 1)  # p for "candidate larger"
    smaller = (np.count_nonzero(diff >= 0) + 1) / (diff.size + 1)
    return (larger, smaller) if better == "lower" else (smaller, larger)


def _percentile(sorted_values: np.ndarray, q: float) -> float:
    rank = max(1, math.ceil(q * sorted_values.size))
    return float(sorted_values[rank - 1])


def paired(
    baseline: dict[str, float | None],
    candidate: dict[str, float | None],
    better: Better,
    alpha: float = 0.05,
) -> Effect:
    """The mean per-sample difference candidate - baseline over the ids both sides have."""
    ids = sorted(
        k
        for k in baseline.keys() & candidate.keys()
        if baseline[k] is not None and candidate[k] is not None
    )
    b = np.asarray([float(baseline[k]) for k in ids])
    c = np.asarray([float(candidate[k]) for k in ids])
    out = Effect(
        test="paired-bootstrap",
        n_baseline=len(ids),
        n_candidate=len(ids),
        baseline=_mean(b),
        candidate=_mean(c),
        relative=False,
        estimate=None,
        low=None,
        high=None,
        p_worse=None,
        p_better=None,
    )
    if len(ids) < MIN_PAIRED:
        return out.model_copy(update={"note": f"fewer than {MIN_PAIRED} paired samples: no test"})
    deltas = c - b
    rng = np.random.default_rng(SEED)
    means = np.sort(
        deltas[rng.integers(0, deltas.size, size=(RESAMPLES, deltas.size))].mean(axis=1)
    )
    larger, smaller = sign_flip_p(deltas)
    p_worse, p_better = (larger, smaller) if better == "lower" else (smaller, larger)
    return out.model_copy(
        update={
            "estimate": float(deltas.mean()),
            "low": _percentile(means, alpha),
            "high": _percentile(means, 1 - alpha),
            "p_worse": float(p_worse),
            "p_better": float(p_better),
        }
    )


EXACT_FLIPS = 16  # up to 2**16 sign patterns enumerated; beyond, 20000 seeded random ones


def sign_flip_p(deltas: np.ndarray) -> tuple[float, float]:
    """One-sided p-values (candidate larger, candidate smaller) of the mean paired difference
    under the sign-flip permutation test: with no effect each difference is as likely to have
    either sign. Exact for up to 16 samples (so 3 samples that all moved one way give 1/8, not
    the 1/2001 a bootstrap would claim), Monte Carlo (seeded) beyond."""
    if not deltas.any():
        return 1.0, 1.0
    n = deltas.size
    if n <= EXACT_FLIPS:
        patterns = ((np.arange(2**n)[:, None] >> np.arange(n)) & 1) * 2 - 1
    else:
        patterns = np.random.default_rng(SEED).choice([-1, 1], size=(20000, n))
    observed = deltas.mean()
    null = (patterns * np.abs(deltas)).mean(axis=1)
    eps = 1e-12 * max(1.0, abs(observed))
    larger = float(np.count_nonzero(null >= observed - eps)) / null.size
    smaller = float(np.count_nonzero(null <= observed + eps)) / null.size
    return larger, smaller


def mcnemar(
    baseline: dict[str, bool | None],
    candidate: dict[str, bool | None],
    better: Better,
    alpha: float = 0.05,
) -> Effect:
    """Exact McNemar on yes/no outcomes per sample id; the effect is the share difference."""
    # lazy: scipy.stats is slow to import (~0.5 s)
    from scipy.stats import binomtest

    ids = sorted(
        k
        for k in baseline.keys() & candidate.keys()
        if baseline[k] is not None and candidate[k] is not None
    )
    b = np.asarray([float(bool(baseline[k])) for k in ids])
    c = np.asarray([float(bool(candidate[k])) for k in ids])
    out = paired(dict(zip(ids, b, strict=True)), dict(zip(ids, c, strict=True)), better, alpha)
    out = out.model_copy(update={"test": "mcnemar-exact"})
    if len(ids) < MIN_PAIRED:
        return out
    gained = int(np.count_nonzero((c == 1) & (b == 0)))
    lost = int(np.count_nonzero((c == 0) & (b == 1)))
    if gained + lost == 0:
        return out.model_copy(
            update={"p_worse": 1.0, "p_better": 1.0, "note": "no sample changed outcome"}
        )
    up = float(binomtest(gained, gained + lost, 0.5, alternative="greater").pvalue)
    down = float(binomtest(gained, gained + lost, 0.5, alternative="less").pvalue)
    p_worse, p_better = (up, down) if better == "lower" else (down, up)
    return out.model_copy(
        update={
            "p_worse": p_worse,
            "p_better": p_better,
            "note": f"{gained} samples gained the outcome, {lost} lost it",
        }
    )


def exact(baseline: float | None, candidate: float | None) -> Effect:
    """One value per side (a sweep's capacity): the ratio, no interval, no test."""
    ratio = candidate / baseline if baseline and candidate is not None else None
    return Effect(
        test="exact",
        n_baseline=int(baseline is not None),
        n_candidate=int(candidate is not None),
        baseline=baseline,
        candidate=candidate,
        relative=True,
        estimate=ratio,
        low=ratio,
        high=ratio,
        p_worse=None,
        p_better=None,
        note="one value per side: compared as is",
    )


def worse_by(effect: Effect, better: Better) -> float | None:
    """How much worse the estimate is, as a relative change (ratio effects) or a difference;
    negative when it is better. None when there is no estimate."""
    if effect.estimate is None:
        if effect.relative and effect.baseline == 0 and effect.candidate is not None:
            change = effect.candidate  # from zero: the raw change
            return change if better == "lower" else -change
        return None
    change = effect.estimate - 1.0 if effect.relative else effect.estimate
    return change if better == "lower" else -change


def _best_case(effect: Effect, better: Better) -> float | None:
    """The interval's most favourable end, as a worsening (negative = better)."""
    end = effect.low if better == "lower" else effect.high
    if end is None:
        return None
    change = end - 1.0 if effect.relative else end
    return change if better == "lower" else -change


def verdict(
    effect: Effect,
    better: Better,
    allowed: float,
    alpha: float = 0.05,
    allowed_relative_to_baseline: bool = False,
) -> Verdict:
    """``allowed``: the change tolerated in the bad direction, as a fraction (ratio effects),
    in the metric's unit (differences), or, with ``allowed_relative_to_baseline``, a fraction
    of the baseline's value for a difference effect.

    - ``regressed``: significantly worse than ``allowed``: even the favourable end of the
      interval (one-sided level ``alpha``) is worse than the allowed change, and the worsening
      is significant against no change (p_worse < alpha); exact effects: worse than allowed;
    - ``inconclusive``: no test could run, or the estimate is worse than allowed but the
      interval reaches back within it (more repeats or samples would tell);
    - ``improved``: significantly better (p_better < alpha); exact: better at all;
    - ``pass``: otherwise (the estimate is within the allowed change)."""
    change = worse_by(effect, better)
    if change is None:
        return "inconclusive"
    limit = allowed
    if allowed_relative_to_baseline and not effect.relative:
        limit = allowed * abs(effect.baseline or 0.0)
    beyond = change > limit + 1e-12
    if effect.test == "exact":
        return "regressed" if beyond else ("improved" if change < -1e-12 else "pass")
    if effect.p_worse is None:
        return "inconclusive"
    if beyond:
        best = _best_case(effect, better)
        certain = best is not None and best > limit + 1e-12 and effect.p_worse < alpha
        return "regressed" if certain else "inconclusive"
    if effect.p_better is not None and effect.p_better < alpha and change < 0:
        return "improved"
    return "pass"
