"""GATE.md, gate.json, tables/*.csv and JUnit XML of a gate result, all from one set of tables."""

from __future__ import annotations

from pathlib import Path
from xml.etree import ElementTree as ET

from fdb.decide import Effect
from fdb.io import atomic_write_json, atomic_write_text
from fdb.tables import NA, Column, Table, write_tables
from reports.gate import GateResult, SeriesVerdict

MARK = {
    "pass": "pass",
    "regressed": "REGRESSED",
    "improved": "improved",
    "inconclusive": "inconclusive",
}


def _num(value: float | None, unit: str = "") -> str:
    if value is None:
        return NA
    text = f"{value:.4g}" if abs(value) < 1e4 else f"{value:.0f}"
    return f"{text} {unit}".strip()


def change_text(effect: Effect | None, unit: str = "", alpha: float = 0.05) -> str:
    """benchstat-style: ``+12.3% [+8.1%, +16.9%]``, ``~`` when nothing significant changed."""
    if effect is None or effect.estimate is None:
        return NA
    significant = (
        min(
            effect.p_worse if effect.p_worse is not None else 1.0,
            effect.p_better if effect.p_better is not None else 1.0,
        )
        < alpha
    )
    if effect.relative:
        body = f"{100 * (effect.estimate - 1):+.1f}%"
        interval = (
            f" [{100 * (effect.low - 1):+.1f}%, {100 * (effect.high - 1):+.1f}%]"
            if effect.low is not None and effect.high is not None and effect.test != "exact"
            else ""
        )
    else:
        body = f"{effect.estimate:+.4g}{(' ' + unit) if unit else ''}"
        interval = (
            f" [{effect.low:+.4g}, {effect.high:+.4g}]"
            if effect.low is not None and effect.high is not None
            else ""
        )
    if effect.test != "exact" and not significant:
        return f"~ ({body}{interval})"
    return body + interval


def _p(effect: Effect | None) -> str:
    if effect is None or effect.p_worse is None:
        return NA
    return f"p={min(effect.p_worse, effect.p_better or 1.0):.3g}"


def _allowed(row: SeriesVerdict) -> str:
    if row.rule == "ceiling":
        return f"≤ {row.allowed:g}"
    if row.rule == "no_increase":
        return f"≤ baseline + {row.allowed:g}"
    if row.relative:
        return f"{'+' if row.better == 'lower' else '-'}{100 * (row.allowed or 0):.0f}%"
    return (
        f"{'+' if row.better == 'lower' else '-'}{row.allowed:g}"
        f"{(' ' + row.unit) if row.unit else ''}"
    )


def guard_table(result: GateResult) -> Table:
    columns = [
        Column("series", "Guard"),
        Column("label", "Metric"),
        Column("baseline", "Baseline"),
        Column("candidate", "Candidate"),
        Column("change", "Change [interval]"),
        Column("p", "p"),
        Column("n", "n (base/cand)"),
        Column("allowed", "Allowed"),
        Column("verdict", "Verdict"),
        Column("reason", "Why"),
    ]
    table = Table("guards", "Guards", columns)
    for row in result.guards:
        e = row.effect
        base = e.baseline if e is not None else row.baseline_total
        cand = e.candidate if e is not None else row.candidate_total
        table.add(
            series=row.series,
            label=f"{row.label} ({'lower' if row.better == 'lower' else 'higher'} is better)",
            baseline=_num(base, row.unit),
            candidate=_num(cand, row.unit),
            change=change_text(e, row.unit, result.series_alpha),
            p=_p(e),
            n=f"{e.n_baseline}/{e.n_candidate}" if e is not None else NA,
            allowed=_allowed(row),
            verdict=MARK[row.verdict],
            reason=row.reason,
        )
    family = (
        f"Bonferroni over the {round(result.config['alpha'] / result.series_alpha)} tested series"
        if result.config.get("family", "bonferroni") == "bonferroni"
        else "no family correction"
    )
    table.notes.append(
        f"Each series is tested one-sided at {result.series_alpha:.3g} (alpha "
        f"{result.config['alpha']}, {family}; unpaired: {result.config['test']} over "
        "rounds/repeats; paired: bootstrap over sample ids; yes/no: exact McNemar); its interval "
        f"is the matching two-sided {100 * (1 - 2 * result.series_alpha):.2f}% interval. `~`: "
        "no significant change."
    )
    return table


def reward_table(result: GateResult) -> Table | None:
    if result.reward is None:
        return None
    columns = [
        Column("series", "Level"),
        Column("baseline", "Baseline"),
        Column("candidate", "Candidate"),
        Column("ratio", "Candidate / baseline [interval]"),
        Column("n", "rounds (base/cand)"),
    ]
    table = Table("reward", f"Reward: {result.reward.metric}", columns)
    for level in result.reward.levels:
        e = level.effect
        ratio = NA if e.estimate is None else f"{e.estimate:.2f}×"
        if e.low is not None and e.high is not None and e.test != "exact":
            ratio += f" [{e.low:.2f}, {e.high:.2f}]"
        table.add(
            series=level.series,
            baseline=_num(e.baseline),
            candidate=_num(e.candidate),
            ratio=ratio,
            n=f"{e.n_baseline}/{e.n_candidate}",
        )
    return table


def headline(result: GateResult) -> str:
    r = result.reward
    gain = ""
    if r is not None:
        if r.ratio is None:
            gain = " Reward: n/a."
        elif r.earned is None:
            gain = f" Reward: none (measured {r.ratio:.2f}×, but a guard regressed)."
        else:
            gain = f" Reward: {r.earned:.2f}× the baseline."
        if r.required is not None:
            gain += f" Required: {r.required:.2f}× ({'met' if r.meets_required else 'NOT met'})."
    if result.outcome == "fail":
        what = ", ".join(result.regressed) or "the reward is below --require-gain"
        return f"**FAIL**: {what}.{gain}"
    if result.outcome == "inconclusive":
        return f"**INCONCLUSIVE** (--strict): {', '.join(result.inconclusive)}.{gain}"
    extra = f" ({len(result.inconclusive)} inconclusive)" if result.inconclusive else ""
    return f"**PASS**: no guard regressed{extra}.{gain}"


def render(result: GateResult) -> tuple[str, list[Table]]:
    tables = [t for t in (reward_table(result), guard_table(result)) if t is not None]
    lines = [
        "# fdb gate",
        "",
        headline(result),
        "",
        f"Baseline: `{result.baseline}` (sha256 {str(result.baseline_sha256)[:12]}…); candidate: "
        f"`{result.candidate}` (sha256 {str(result.candidate_sha256)[:12]}…); kind {result.kind}; "
        f"exit code {result.exit_code}.",
        "",
    ]
    for table in tables:
        lines += table.markdown("##")
    if result.notes:
        lines += ["## Notes", ""] + [f"- {n}" for n in result.notes] + [""]
    return "\n".join(lines).rstrip() + "\n", tables


def junit(result: GateResult) -> str:
    suite = ET.Element(
        "testsuite",
        name="fdb-gate",
        tests=str(len(result.guards)),
        failures=str(sum(g.verdict == "regressed" for g in result.guards)),
        skipped=str(sum(g.verdict == "inconclusive" for g in result.guards)),
    )
    for row in result.guards:
        case = ET.SubElement(
            suite, "testcase", classname=f"fdb.gate.{result.kind}.{row.guard}", name=row.series
        )
        text = (
            f"{row.label}: {change_text(row.effect, row.unit, result.series_alpha)}; "
            f"allowed {_allowed(row)}; {row.reason}"
        )
        if row.verdict == "regressed":
            ET.SubElement(case, "failure", message=text, type="regressed").text = text
        elif row.verdict == "inconclusive":
            element = "failure" if result.strict else "skipped"
            ET.SubElement(case, element, message=text, type="inconclusive").text = text
        else:
            ET.SubElement(case, "system-out").text = f"{row.verdict}: {text}"
    ET.indent(suite)
    return (
        '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suite, encoding="unicode") + "\n"
    )


def write(result: GateResult, out: Path, junit_path: Path | None = None) -> Path:
    """gate.json, tables/*.csv, then GATE.md (and the JUnit file): each atomically."""
    text, tables = render(result)
    data = result.dump()
    data["tables"] = [t.dump() for t in tables]
    atomic_write_json(out / "gate.json", data)
    write_tables(out / "tables", tables)
    if junit_path is not None:
        atomic_write_text(junit_path, junit(result))
    return atomic_write_text(out / "GATE.md", text)
