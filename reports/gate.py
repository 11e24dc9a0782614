"""`fdb gate`: a candidate against a baseline, decided with statistics (docs/gating.md).

The reward (throughput, capacity) is reported as candidate / baseline per level with its
interval; every guard is decided per series (level, subset, category) as ``pass``,
``regressed``, ``improved`` or ``inconclusive`` (fdb/decide.py). A candidate that breaks a guard
earns no reward. Exit codes: 0 pass, 1 a guard regressed or the reward is below
``--require-gain``, 2 not comparable / bad input, 3 (``--strict``) a guard was inconclusive.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, Field

from fdb import decide
from fdb.decide import Effect, Verdict
from fdb.errors import FdbError
from reports.gate_config import GateConfig, Guard
from reports.observations import Observations, Series

GATE_RESULT_SCHEMA = "fdb-gate-result-1"
SEVERITY = {"regressed": 3, "inconclusive": 2, "pass": 1, "improved": 0}
Outcome = Literal["pass", "fail", "inconclusive"]


class SeriesVerdict(BaseModel):
    guard: str
    series: str
    key: str
    label: str
    unit: str
    better: str
    rule: str
    allowed: float | None
    relative: bool
    verdict: Verdict
    effect: Effect | None = None
    baseline_total: float | None = None
    candidate_total: float | None = None
    reason: str


class RewardLevel(BaseModel):
    series: str
    key: str
    effect: Effect


class RewardResult(BaseModel):
    metric: str
    levels: list[RewardLevel]
    ratio: float | None  # geometric mean of the levels' ratios
    earned: float | None  # the ratio, or None when a guard regressed ("no reward")
    required: float | None = None
    meets_required: bool | None = None


class GateResult(BaseModel):
    schema_: str = Field(GATE_RESULT_SCHEMA, alias="schema")
    outcome: Outcome
    exit_code: int
    kind: str
    baseline: str
    candidate: str
    baseline_sha256: str | None
    candidate_sha256: str | None
    config: dict
    strict: bool
    reward: RewardResult | None
    guards: list[SeriesVerdict]
    regressed: list[str]
    inconclusive: list[str]
    series_alpha: float  # the one-sided level each guard series was tested at
    notes: list[str] = Field(default_factory=list)
    provenance: dict = Field(default_factory=dict)

    model_config = {"populate_by_name": True}

    def dump(self) -> dict:
        return self.model_dump(mode="json", by_alias=True)


def check_comparable(base: Observations, cand: Observations) -> None:
    if base.kind != cand.kind:
        raise FdbError(
            f"the baseline is a {base.kind} output and the candidate a {cand.kind} output",
            "gate one kind of output against the same kind",
        )
    differ = [
        key
        for key in sorted(base.comparability.keys() & cand.comparability.keys())
        if base.comparability[key] is not None
        and cand.comparability[key] is not None
        and base.comparability[key] != cand.comparability[key]
    ]
    if differ:
        key = differ[0]
        more = f" (and {len(differ) - 1} more: {', '.join(differ[1:])})" if len(differ) > 1 else ""
        raise FdbError(
            f"not comparable: {key} is {base.comparability[key]!r} in the baseline ({base.source}) "
            f"but {cand.comparability[key]!r} in the candidate ({cand.source}){more}",
            "record and score both sides on the same dataset selection, backends and definitions",
        )


def _series_for(obs: Observations, metric: str, keys: list[str] | None) -> dict[str, Series]:
    return {
        s.key: s
        for s in obs.series.values()
        if s.metric == metric and (keys is None or s.key in keys)
    }


def _values(series: Series) -> list[float]:
    if series.shape in ("paired", "binary"):
        return [v for v in series.per_sample().values() if v is not None]
    return [v for v in series.values if v is not None]


def _effect(
    b: Series, c: Series, config: GateConfig, guard_test: str | None, alpha: float
) -> Effect:
    if b.shape == "exact":
        return decide.exact(b.values[0] if b.values else None, c.values[0] if c.values else None)
    if b.shape == "unpaired":
        return decide.unpaired(b.values, c.values, b.better, alpha, guard_test or config.test)
    if b.shape == "binary" and b.single_values() and c.single_values():
        return decide.mcnemar(
            {k: None if v[0] is None else bool(v[0]) for k, v in b.samples.items()},
            {k: None if v[0] is None else bool(v[0]) for k, v in c.samples.items()},
            b.better,
            alpha,
        )
    return decide.paired(b.per_sample(), c.per_sample(), b.better, alpha)


def _allowed_limit(guard: Guard, effect: Effect) -> tuple[float, bool]:
    """(allowed, relative-to-baseline) in the effect's own terms."""
    if effect.relative and not guard.relative:  # an absolute allowance on a ratio effect
        base = abs(effect.baseline or 0.0)
        return (guard.allowed / base if base else math.inf), False
    return guard.allowed, guard.relative and not effect.relative


def _judge_series(
    guard: Guard, b: Series | None, c: Series | None, config: GateConfig, alpha: float
) -> SeriesVerdict:
    ref = b or c
    row = dict(
        guard=guard.metric,
        series=ref.name,
        key=ref.key,
        label=ref.label,
        unit=ref.unit,
        better=ref.better,
        rule=guard.rule,
        allowed=guard.max if guard.rule == "ceiling" else guard.allowed,
        relative=guard.relative and guard.rule == "change",
    )
    if c is None or b is None:
        side = "candidate" if c is None else "baseline"
        return SeriesVerdict(**row, verdict="inconclusive", reason=f"not measured on the {side}")
    if guard.rule in ("ceiling", "no_increase"):
        return _judge_count(guard, b, c, row)
    effect = _effect(b, c, config, guard.test, alpha)
    allowed, against_baseline = _allowed_limit(guard, effect)
    verdict = decide.verdict(effect, b.better, allowed, alpha, against_baseline)
    return SeriesVerdict(**row, verdict=verdict, effect=effect, reason=_reason(verdict, effect))


def _judge_count(guard: Guard, b: Series, c: Series, row: dict) -> SeriesVerdict:
    bv, cv = _values(b), _values(c)
    if not cv:
        return SeriesVerdict(**row, verdict="inconclusive", reason="no value on the candidate")
    if guard.rule == "ceiling":
        total = sum(cv)
        bad = total > (guard.max or 0.0) + 1e-12
        return SeriesVerdict(
            **row,
            verdict="regressed" if bad else "pass",
            candidate_total=total,
            baseline_total=sum(bv) if bv else None,
            reason=f"{total:g} against a ceiling of {guard.max:g}",
        )
    if not bv:
        return SeriesVerdict(**row, verdict="inconclusive", reason="no value on the baseline")
    bm, cm = sum(bv) / len(bv), sum(cv) / len(cv)
    bad = cm > bm + guard.allowed + 1e-12
    verdict = "regressed" if bad else ("improved" if cm < bm - 1e-12 else "pass")
    return SeriesVerdict(
        **row,
        verdict=verdict,
        baseline_total=bm,
        candidate_total=cm,
        reason=f"mean {cm:g} per repeat against {bm:g} (+{guard.allowed:g} allowed)",
    )


def _reason(verdict: Verdict, effect: Effect) -> str:
    if effect.note and verdict == "inconclusive" and effect.p_worse is None:
        return effect.note
    if verdict == "inconclusive":
        return "worse than allowed, but not significantly (more repeats or samples would tell)"
    if verdict == "regressed":
        return "worse than allowed, significantly"
    if verdict == "improved":
        return "significantly better"
    return "no significant change beyond the allowed one"


def family_alpha(base: Observations, cand: Observations, config: GateConfig) -> float:
    """The level each series is tested at: alpha / m under Bonferroni, m the number of
    change-rule series measured on both sides."""
    if config.family == "none":
        return config.alpha
    m = sum(
        len(_series_for(base, g.metric, g.keys).keys() & _series_for(cand, g.metric, g.keys).keys())
        for g in config.guards
        if g.rule == "change"
    )
    return config.alpha / max(1, m)


def evaluate_guards(
    base: Observations, cand: Observations, config: GateConfig
) -> list[SeriesVerdict]:
    alpha = family_alpha(base, cand, config)
    out = []
    for guard in config.guards:
        bs, cs = (
            _series_for(base, guard.metric, guard.keys),
            _series_for(cand, guard.metric, guard.keys),
        )
        for key in sorted(bs.keys() | cs.keys(), key=_key_order):
            out.append(_judge_series(guard, bs.get(key), cs.get(key), config, alpha))
    return out


def _key_order(key: str) -> tuple:
    if key.startswith("c") and key[1:].isdigit():
        return (0, int(key[1:]), "")
    return (1 if key != "all" else 2, 0, key)


def evaluate_reward(
    base: Observations, cand: Observations, config: GateConfig
) -> RewardResult | None:
    if config.reward is None:
        return None
    bs = _series_for(base, config.reward.metric, config.reward.keys)
    cs = _series_for(cand, config.reward.metric, config.reward.keys)
    levels = []
    for key in sorted(bs.keys() & cs.keys(), key=_key_order):
        if not _values(bs[key]) or not _values(cs[key]):
            continue
        effect = _effect(bs[key], cs[key], config, None, config.alpha)
        levels.append(RewardLevel(series=bs[key].name, key=key, effect=effect))
    ratios = [
        lv.effect.estimate
        for lv in levels
        if lv.effect.estimate is not None and lv.effect.estimate > 0
    ]
    ratio = math.exp(sum(math.log(r) for r in ratios) / len(ratios)) if ratios else None
    return RewardResult(metric=config.reward.metric, levels=levels, ratio=ratio, earned=ratio)


def gate(
    base: Observations,
    cand: Observations,
    config: GateConfig,
    require_gain: float | None = None,
    strict: bool = False,
) -> GateResult:
    check_comparable(base, cand)
    if config.kind != base.kind:
        raise FdbError(
            f"the gate is for {config.kind} outputs, the outputs are {base.kind}",
            f"pass a gate.yaml with kind: {base.kind}",
        )
    guards = evaluate_guards(base, cand, config)
    alpha = family_alpha(base, cand, config)
    reward = evaluate_reward(base, cand, config)
    regressed = sorted({g.series for g in guards if g.verdict == "regressed"})
    inconclusive = sorted({g.series for g in guards if g.verdict == "inconclusive"})
    notes = [f"baseline: {n}" for n in base.notes] + [f"candidate: {n}" for n in cand.notes]
    if reward is not None:
        if regressed:
            reward.earned = None
        if require_gain is not None:
            reward.required = require_gain
            reward.meets_required = reward.earned is not None and reward.earned >= require_gain
    elif require_gain is not None:
        raise FdbError(
            f"--require-gain needs a reward, and {base.kind} outputs have none by default",
            "add a reward to gate.yaml, or leave --require-gain out",
        )
    short = reward is not None and reward.meets_required is False
    if regressed or short:
        outcome, code = "fail", 1
    elif inconclusive and strict:
        outcome, code = "inconclusive", 3
    else:
        outcome, code = "pass", 0
    return GateResult(
        outcome=outcome,
        exit_code=code,
        kind=base.kind,
        baseline=base.source,
        candidate=cand.source,
        baseline_sha256=base.content_sha256,
        candidate_sha256=cand.content_sha256,
        config=config.dump(),
        strict=strict,
        reward=reward,
        guards=guards,
        regressed=regressed,
        inconclusive=inconclusive,
        notes=notes,
        series_alpha=alpha,
    )
