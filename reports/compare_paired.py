"""The paired view of two runs, by sample id (docs/comparing.md, "Paired view").

- Outcomes: v1.0 ``unified-samples.jsonl`` ``outcome`` (pause samples: whether the system spoke
  into a pause) and the v1.5 behavior label of each judged pair; a sample's outcome is taken from
  the first repeat in which both runs have it. The table lists the samples whose outcome changed.
- Paired differences B - A over the ids both runs have, with ``fdb.decide``: latencies (v1.0
  ``latency_s``, v1.5 each overlap session's mean stop / response latency; each sample's mean
  over its repeats) by the paired bootstrap, yes/no outcomes (responds within 2 s, speaks into a
  pause, the expected v1.5 behavior) by exact McNemar. A row differs beyond noise when
  ``verdict(effect, better, allowed=0.0)`` is ``regressed`` or ``improved``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal, TypeVar

from pydantic import BaseModel

from fdb.decide import Better, Effect, mcnemar, paired, verdict
from fdb.records.v10 import InterruptRow, PauseRow, SampleRow, TurnRow
from fdb.tables import NA, Column, Table
from reports.compare_load import System

T = TypeVar("T")
EXPECTED = {"user_interruption": "C_RESPOND"}  # every other v1.5 category: C_RESUME
ALPHA = 0.05
PerRepeat = dict[str, dict[int, Any]]  # sample id -> repeat number -> value


class Measure(BaseModel):
    value: float | None
    unit: Literal["s", "share"]


class Delta(BaseModel):
    estimate: float | None
    low: float | None
    high: float | None
    unit: Literal["s", "share"]


def id_key(sample: str) -> tuple[str, int, str]:
    """``subset/12`` after ``subset/9``: numeric ids in number order."""
    where, _, ident = sample.rpartition("/")
    return (where, int(ident), "") if ident.isdigit() else (where, -1, ident)


def pick(a: dict[int, T], b: dict[int, T]) -> tuple[T, T]:
    """Both sides' value from the first repeat that both have, else each side's first."""
    common = sorted(a.keys() & b.keys())
    if common:
        return a[common[0]], b[common[0]]
    return a[min(a)], b[min(b)]


def _pairs(a: PerRepeat, b: PerRepeat) -> tuple[dict[str, Any], dict[str, Any]]:
    left, right = {}, {}
    for sample in sorted(a.keys() & b.keys()):
        left[sample], right[sample] = pick(a[sample], b[sample])
    return left, right


# --- per-sample values ------------------------------------------------------------------------


def _v10_outcome(row: SampleRow) -> str:
    if not row.eligible:
        return "ineligible"
    if isinstance(row, PauseRow):
        return "spoke into a pause" if row.pause_intrusion else "silent in the pauses"
    return row.outcome


def outcomes(system: System) -> PerRepeat:
    """sample id -> repeat -> (set, outcome) for v1.0 samples and judged v1.5 pairs."""
    out: PerRepeat = {}
    for rep in system.repeats:
        for row in rep.v10_rows:
            out.setdefault(row.sample_id, {})[rep.number] = (
                f"v1.0 {row.subset}",
                _v10_outcome(row),
            )
        for sample in rep.behavior.samples if rep.behavior else []:
            label = sample.label if sample.outcome == "valid" else sample.outcome
            out.setdefault(sample.sample_id, {})[rep.number] = (f"v1.5 {sample.category}", label)
    return out


def _mean(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return math.fsum(present) / len(present) if present else None


def _v10_rows(system: System, subset: str) -> list[tuple[int, SampleRow]]:
    return [
        (rep.number, row) for rep in system.repeats for row in rep.v10_rows if row.subset == subset
    ]


def v10_latency(system: System, subset: str) -> dict[str, float | None]:
    per: dict[str, list[float | None]] = {}
    for _, row in _v10_rows(system, subset):
        if isinstance(row, TurnRow | InterruptRow):
            per.setdefault(row.sample_id, []).append(row.latency_s)
    return {sample: _mean(values) for sample, values in per.items()}


def v15_latency(system: System, field: str, category: str) -> dict[str, float | None]:
    per: dict[str, list[float | None]] = {}
    for rep in system.repeats:
        for s in rep.intervals:
            if s.variant == "overlap" and s.status == "ok" and category in ("all", s.category):
                values = getattr(s, field)
                per.setdefault(s.sample_id, []).append(_mean(values) if values else None)
    return {sample: _mean(values) for sample, values in per.items()}


def _within_2s(row: SampleRow) -> bool | None:
    if isinstance(row, InterruptRow) and row.outcome == "not_exercised":
        return None
    return row.outcome == "response" and row.latency_s is not None and row.latency_s <= 2.0


def v10_binary(system: System, subset: str) -> PerRepeat:
    out: PerRepeat = {}
    for number, row in _v10_rows(system, subset):
        if isinstance(row, PauseRow):
            out.setdefault(row.sample_id, {})[number] = row.pause_intrusion
        elif isinstance(row, TurnRow | InterruptRow):
            out.setdefault(row.sample_id, {})[number] = _within_2s(row)
    return out


def v15_expected(system: System, category: str) -> PerRepeat:
    out: PerRepeat = {}
    for rep in system.repeats:
        for sample in rep.behavior.samples if rep.behavior else []:
            if sample.outcome == "valid" and sample.category == category:
                expected = EXPECTED.get(category, "C_RESUME")
                out.setdefault(sample.sample_id, {})[rep.number] = sample.label == expected
    return out


# --- tables -----------------------------------------------------------------------------------


def changed_table(a: System, b: System) -> tuple[Table, dict[str, int]]:
    left, right = outcomes(a), outcomes(b)
    columns = [
        Column("set", "Set"),
        Column("sample", "Sample"),
        Column("a", a.name),
        Column("b", b.name),
    ]
    table = Table("changed-outcomes", "Samples whose outcome changed", columns)
    common = sorted(
        left.keys() & right.keys(), key=lambda s: (pick(left[s], right[s])[0][0], id_key(s))
    )
    for sample in common:
        (where, before), (_, after) = pick(left[sample], right[sample])
        if before != after:
            table.add(set=where, sample=sample, a=before, b=after)
    counts = {
        "paired": len(common),
        "changed": len(table.rows),
        "only_a": len(left.keys() - right.keys()),
        "only_b": len(right.keys() - left.keys()),
    }
    table.notes.append(
        f"{counts['changed']} of {counts['paired']} samples both runs have changed outcome "
        f"(outcome from the first repeat both runs have; {counts['only_a']} only in {a.name}, "
        f"{counts['only_b']} only in {b.name}, left out)."
    )
    return table, counts


def _measure(value: float | None, unit: str) -> str:
    if value is None:
        return NA
    return f"{value:.3f} s" if unit == "s" else f"{100 * value:.1f}%"


def _delta(d: Delta) -> str:
    if d.estimate is None:
        return NA

    def num(v: float) -> str:
        return f"{v:+.3f}" if d.unit == "s" else f"{100 * v:+.1f}"

    unit = " s" if d.unit == "s" else " pts"
    interval = f" [{num(d.low)}, {num(d.high)}]" if d.low is not None and d.high is not None else ""
    return f"{num(d.estimate)}{unit}{interval}"


def _p(effect: Effect) -> str:
    ps = [p for p in (effect.p_worse, effect.p_better) if p is not None]
    return f"{min(ps):.3g}" if ps else NA


def _mark(effect: Effect, better: Better, a: str, b: str) -> str:
    decided = verdict(effect, better, allowed=0.0, alpha=ALPHA)
    if decided == "regressed":
        return f"yes: {b} worse than {a}"
    if decided == "improved":
        return f"yes: {b} better than {a}"
    return "no" if effect.estimate is not None else f"{NA} ({effect.note or 'no paired samples'})"


class _Differences:
    def __init__(self, a: System, b: System):
        self.a, self.b = a, b
        columns = [
            Column("metric", "Metric"),
            Column("set", "Set"),
            Column("n", "Paired samples"),
            Column("a", a.name, lambda m: _measure(m.value, m.unit)),
            Column("b", b.name, lambda m: _measure(m.value, m.unit)),
            Column("delta", f"{b.name} − {a.name} [90% interval]", _delta),
            Column("p", "p (one-sided)"),
            Column("differs", "Differs beyond noise"),
        ]
        self.table = Table("paired-differences", "Paired differences by sample id", columns)
        self.effects: list[dict[str, Any]] = []

    def latency(
        self, metric: str, where: str, values: Callable[[System], dict[str, float | None]]
    ) -> None:
        left, right = values(self.a), values(self.b)
        if _present(left) or _present(right):
            self._add(metric, where, "lower", paired(left, right, "lower", ALPHA), "s")

    def binary(
        self, metric: str, where: str, better: Better, values: Callable[[System], PerRepeat]
    ) -> None:
        left, right = _pairs(values(self.a), values(self.b))
        if _present(left) or _present(right):
            self._add(metric, where, better, mcnemar(left, right, better, ALPHA), "share")

    def _add(self, metric: str, where: str, better: Better, effect: Effect, unit: str) -> None:
        self.table.add(
            metric=f"{metric} ({'lower' if better == 'lower' else 'higher'} is better)",
            set=where,
            n=effect.n_baseline,
            a=Measure(value=effect.baseline, unit=unit),
            b=Measure(value=effect.candidate, unit=unit),
            delta=Delta(estimate=effect.estimate, low=effect.low, high=effect.high, unit=unit),
            p=_p(effect),
            differs=_mark(effect, better, self.a.name, self.b.name),
        )
        self.effects.append(
            {
                "metric": metric,
                "set": where,
                "better": better,
                "verdict": verdict(effect, better, allowed=0.0, alpha=ALPHA),
                "effect": effect.model_dump(mode="json"),
            }
        )


def _present(values: dict[str, Any]) -> bool:
    return any(v is not None for v in values.values())


def _categories(a: System, b: System) -> list[str]:
    def found(s: System) -> set[str]:
        return {i.category for r in s.repeats for i in r.intervals} | {
            x.category for r in s.repeats if r.behavior for x in r.behavior.samples
        }

    return sorted(found(a) & found(b))


def _subsets(a: System, b: System) -> list[tuple[str, type]]:
    def found(s: System) -> dict[str, type]:
        return {row.subset: type(row) for r in s.repeats for row in r.v10_rows if row.eligible}

    left, right = found(a), found(b)
    return [(name, left[name]) for name in sorted(left.keys() & right.keys())]


def differences_table(a: System, b: System) -> tuple[Table, list[dict[str, Any]]]:
    diff = _Differences(a, b)
    for category in [*_categories(a, b), "all"]:
        for metric, field in (
            ("stop latency", "stop_latencies_s"),
            ("response latency", "response_latencies_s"),
        ):
            diff.latency(
                metric, f"v1.5 {category}", lambda s, f=field, c=category: v15_latency(s, f, c)
            )
    for category in _categories(a, b):
        label = (
            "responds (judge label)" if EXPECTED.get(category) else "keeps talking (judge label)"
        )
        diff.binary(label, f"v1.5 {category}", "higher", lambda s, c=category: v15_expected(s, c))
    for subset, kind in _subsets(a, b):
        if kind is PauseRow:
            diff.binary(
                "speaks into a pause",
                f"v1.0 {subset}",
                "lower",
                lambda s, n=subset: v10_binary(s, n),
            )
            continue
        diff.latency("response latency", f"v1.0 {subset}", lambda s, n=subset: v10_latency(s, n))
        diff.binary(
            "responds within 2 s", f"v1.0 {subset}", "higher", lambda s, n=subset: v10_binary(s, n)
        )
    return diff.table, diff.effects


def paired_view(a: System, b: System) -> tuple[list[str], list[Table], dict[str, Any]]:
    """Markdown lines that introduce the view, its two tables and the data for comparison.json."""
    changed, counts = changed_table(a, b)
    deltas, effects = differences_table(a, b)
    intro = [
        f"## Paired view: {a.name} → {b.name}",
        "",
        f"By sample id, over the samples both runs have ({counts['paired']}; {counts['only_a']} "
        f"only in {a.name} and {counts['only_b']} only in {b.name} are left out). Outcomes and "
        "yes/no metrics come from the first repeat both runs have; latencies are each sample's "
        f"mean over its repeats. {b.name} − {a.name}: the mean paired difference with its 90% "
        "interval (paired bootstrap over sample ids, 2000 resamples, seed 0; yes/no: exact McNemar "
        f"on the discordant pairs). Differs beyond noise: the one-sided test at alpha = {ALPHA} "
        f"finds {b.name} worse or better (fdb.decide.verdict, no allowed change).",
        "",
    ]
    return (
        intro,
        [changed, deltas],
        {"a": a.name, "b": b.name, "counts": counts, "effects": effects},
    )
