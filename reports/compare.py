"""`fdb compare`: runs of several systems side by side (docs/comparing.md).

The cross-system table has one row per metric (Behavior, Serving, Listening) and one column per
system; every cell is a typed :class:`Cell` (value, count, denominator, repeats) from which the
Markdown, CSV and JSON are rendered (``fdb.tables.Table``). A run with several repeats shows the
mean over its repeats, counts and denominators included. For two systems the paired view
(``reports.compare_paired``) follows. Outputs: ``OUT/COMPARISON.md``, ``OUT/comparison.json``
and ``OUT/tables/NN-<name>.csv``, written atomically, the same bytes for the same inputs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from fdb.io import atomic_write_json, atomic_write_text
from fdb.models.scoring import MOS_LABELS
from fdb.provenance import current
from fdb.records.listening import GroupSummary
from fdb.records.serving import Capacity
from fdb.tables import NA, Column, Table, write_tables
from reports.compare_load import RepeatData, System
from reports.compare_paired import paired_view

COMPARISON_SCHEMA = "fdb-comparison-1"
NOT_MEASURED = "not measured"
Z95 = 1.96
PAUSE_SUBSETS = ("synthetic_pause_handling", "candor_pause_handling")  # synthetic / natural speech
TURN_SUBSET = "candor_turn_taking"


class Part(BaseModel):
    """One number of a cell (a cell holds two for "stop / response" and "synthetic / natural")."""

    measured: bool = True
    value: float | None = None
    count: float | None = None  # numerator (shares), mean over repeats
    n: float | None = None  # denominator, mean over repeats


class Cell(BaseModel):
    kind: Literal["share", "seconds", "score", "sessions"]
    parts: list[Part] = []  # empty: not measured
    unit: str = ""  # what the denominator counts
    digits: int = 2
    repeats: int = 0  # repeats that had the data
    of_repeats: int = 0
    text: str | None = None  # sessions: the capacity as the sweep words it

    @property
    def measured(self) -> bool:
        return any(p.measured for p in self.parts)


Extract = Callable[[RepeatData], list[Part | None] | None]


@dataclass(frozen=True)
class RowSpec:
    dimension: str
    metric: str
    kind: str
    extract: Extract | None = None  # None: the serving row, read from the system's sweep
    noise: str | None = None  # "v1.5" / "v1.0": a behavior share whose n enters the noise note
    unit: str = ""
    digits: int = 1  # shares: decimals of the percentage (trailing zeros dropped); scores: decimals


# --- extractors, one repeat each --------------------------------------------------------------


def _behavior(category: str, label: str) -> Extract:
    def extract(rep: RepeatData) -> list[Part | None] | None:
        cell = rep.behavior.categories.get(category) if rep.behavior else None
        if cell is None:
            return None
        share = cell.labels.get(label)
        return [
            Part(
                value=share.share if share else None,
                count=share.count if share else 0,
                n=cell.judged,
            )
        ]

    return extract


def _semantic(axis: str) -> Extract:
    def extract(rep: RepeatData) -> list[Part | None] | None:
        cell = rep.semantic.all.get(axis) if rep.semantic else None
        if cell is None:
            return None
        return [Part(value=cell.quality, count=cell.accepted, n=cell.accepted + cell.failed)]

    return extract


def _latency(rep: RepeatData) -> list[Part | None] | None:
    cell = rep.timing.categories.get("all") if rep.timing else None
    if cell is None:
        return None
    return [Part(value=s.mean_s, n=s.intervals) for s in (cell.stop_latency, cell.response_latency)]


def _unified(subsets: tuple[str, ...], metric: str) -> Extract:
    def extract(rep: RepeatData) -> list[Part | None] | None:
        if rep.unified is None:
            return None
        parts: list[Part | None] = []
        for name in subsets:
            share = (
                getattr(rep.unified.subsets[name].metrics, metric, None)
                if name in rep.unified.subsets
                else None
            )
            parts.append(
                None if share is None else Part(value=share.value, count=share.count, n=share.n)
            )
        return parts if any(p is not None for p in parts) else None

    return extract


def _groups(rep: RepeatData) -> list[GroupSummary]:
    """Each dataset's "all" group: pooled below over the datasets (word counts and reply counts)."""
    if rep.listening is None:
        return []
    return [
        groups["all"] for _, groups in sorted(rep.listening.datasets.items()) if "all" in groups
    ]


def _omission(rep: RepeatData) -> list[Part | None] | None:
    groups = _groups(rep)
    if not groups:
        return None
    omitted, words = sum(g.omitted_words for g in groups), sum(g.reference_words for g in groups)
    return [Part(value=omitted / words if words else None, count=omitted, n=words)]


def mos_backend(rep: RepeatData) -> str | None:
    ident = rep.listening.backends.get("mos") if rep.listening else None
    return str(ident.get("name")) if ident and ident.get("name") else None


def _weighted(groups: list[GroupSummary], mean: str, n: str) -> Part:
    total = sum(getattr(g, n) for g in groups)
    value = (
        sum(getattr(g, mean) * getattr(g, n) for g in groups if getattr(g, mean) is not None)
        / total
        if total
        else None
    )
    return Part(value=value, n=total)


def _mos(backend: str) -> Extract:
    def extract(rep: RepeatData) -> list[Part | None] | None:
        if mos_backend(rep) != backend or not _groups(rep):
            return None
        return [_weighted(_groups(rep), "mos_mean", "mos_n")]

    return extract


def _voice(rep: RepeatData) -> list[Part | None] | None:
    groups = _groups(rep)
    if not groups or rep.listening.backends.get("speaker") is None:
        return None
    return [_weighted(groups, "voice_mean", "voice_n")]


def row_specs(systems: list[System]) -> list[RowSpec]:
    behavior = [
        ("user_interruption", "C_RESPOND", "Responds when the user interrupts ↑"),
        ("user_backchannel", "C_RESUME", "Keeps talking through a backchannel ↑"),
        ("talking_to_other", "C_RESUME", "Keeps talking when the user addresses someone else ↑"),
        ("background_speech", "C_RESUME", "Keeps talking through background speech ↑"),
    ]
    specs = [
        RowSpec("Behavior", metric, "share", _behavior(cat, label), noise="v1.5")
        for cat, label, metric in behavior
    ]
    specs += [
        RowSpec(
            "Behavior",
            "Overlap handled appropriately (LLM judge) ↑",
            "share",
            _semantic("interaction_handling"),
        ),
        RowSpec("Behavior", "Grounded reply (LLM judge) ↑", "share", _semantic("grounding")),
        RowSpec("Behavior", "Stop / response latency ↓", "seconds", _latency, unit="intervals"),
        RowSpec(
            "Behavior",
            "Speaks into a pause, synthetic / natural speech ↓",
            "share",
            _unified(PAUSE_SUBSETS, "pause_intrusion_rate"),
            noise="v1.0",
        ),
        RowSpec(
            "Behavior",
            "Takes the turn within 2 s ↑",
            "share",
            _unified((TURN_SUBSET,), "response_rate_2s"),
            noise="v1.0",
        ),
        RowSpec("Serving", "Concurrent sessions per GPU meeting the target ↑", "sessions"),
        RowSpec("Listening", "Omission rate ↓", "share", _omission, unit="words"),
    ]
    backends = sorted({b for s in systems for r in s.repeats if (b := mos_backend(r))})
    specs += [
        RowSpec(
            "Listening", f"{MOS_LABELS.get(b, b)} ↑", "score", _mos(b), unit="replies", digits=2
        )
        for b in backends
    ] or [RowSpec("Listening", "MOS ↑", "score", lambda rep: None, unit="replies", digits=2)]
    specs.append(
        RowSpec("Listening", "Voice consistency ↑", "score", _voice, unit="replies", digits=1)
    )
    return specs


# --- cells ------------------------------------------------------------------------------------


def _mean(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return math.fsum(present) / len(present) if present else None


def _mean_part(parts: list[Part]) -> Part:
    if not parts:
        return Part(measured=False)
    return Part(
        value=_mean([p.value for p in parts]),
        count=_mean([p.count for p in parts]),
        n=_mean([p.n for p in parts]),
    )


def system_cell(spec: RowSpec, system: System) -> Cell:
    base = Cell(kind=spec.kind, unit=spec.unit, digits=spec.digits, of_repeats=len(system.repeats))
    if spec.extract is None:
        return _capacity_cell(base, system.capacity)
    found = [parts for rep in system.repeats if (parts := spec.extract(rep)) is not None]
    if not found:
        return base
    width = max(len(parts) for parts in found)
    merged = [_mean_part([p[i] for p in found if p[i] is not None]) for i in range(width)]
    return base.model_copy(update={"parts": merged, "repeats": len(found)})


def _capacity_cell(base: Cell, capacity: Capacity | None) -> Cell:
    if capacity is None or (capacity.sessions is None and capacity.first_miss is None):
        return base
    if capacity.client_limited:
        text = (
            f"at least {capacity.sessions} (level {capacity.first_miss} client-limited)"
            if capacity.sessions
            else NOT_MEASURED
        )
    elif capacity.sessions is None:
        text = f"below {capacity.first_miss} (the lowest level recorded misses)"
    elif capacity.at_least:
        text = f"at least {capacity.sessions} (every level met the targets)"
    else:
        text = f"{capacity.sessions} ({capacity.first_miss} miss the targets)"
    return base.model_copy(
        update={
            "parts": [Part(value=capacity.sessions)],
            "repeats": 1,
            "of_repeats": 1,
            "text": text,
        }
    )


def _number(value: float | None) -> str:
    if value is None:
        return NA
    return str(int(round(value))) if abs(value - round(value)) < 1e-9 else f"{value:.1f}"


def _percent(value: float | None, digits: int) -> str:
    if value is None:
        return NA
    text = f"{100 * value:.{digits}f}"
    return (text.rstrip("0").rstrip(".") if "." in text else text) + "%"


def _share_text(cell: Cell, part: Part) -> str:
    if not part.measured:
        return NOT_MEASURED
    unit = f" {cell.unit}" if cell.unit else ""
    return f"{_percent(part.value, cell.digits)} ({_number(part.count)}/{_number(part.n)}{unit})"


def show(cell: Cell) -> str:
    """The cell as a reader sees it: value and denominator, ``not measured`` without data."""
    if not cell.measured:
        return NOT_MEASURED
    if cell.kind == "sessions":
        return cell.text or NOT_MEASURED
    if cell.kind == "share":
        text = " / ".join(_share_text(cell, p) for p in cell.parts)
    elif cell.kind == "seconds":
        values = " / ".join(f"{p.value:.2f}" if p.value is not None else NA for p in cell.parts)
        text = f"{values} s ({' / '.join(_number(p.n) for p in cell.parts)} {cell.unit})"
    else:
        part = cell.parts[0]
        value = f"{part.value:.{cell.digits}f}" if part.value is not None else NA
        text = f"{value} (n = {_number(part.n)} {cell.unit})"
    if 0 < cell.repeats < cell.of_repeats:
        text += f" [{cell.repeats} of {cell.of_repeats} repeats]"
    return text


def header(system: System) -> str:
    count = len(system.repeats)
    return f"{system.name} (mean of {count} repeats)" if count > 1 else system.name


def cross_table(systems: list[System]) -> Table:
    keys = [f"system_{i}" for i in range(len(systems))]
    columns = [Column("dimension", "Dimension"), Column("metric", "Metric")]
    columns += [Column(key, header(s), show) for key, s in zip(keys, systems, strict=True)]
    table = Table("comparison", "Cross-system table", columns)
    specs = row_specs(systems)
    for spec in specs:
        table.add(
            dimension=spec.dimension,
            metric=spec.metric,
            **{key: system_cell(spec, s) for key, s in zip(keys, systems, strict=True)},
        )
    table.notes += _notes(specs, table, systems)
    return table


# --- notes ------------------------------------------------------------------------------------


def noise_points(n: float) -> float:
    """Half-width (points) of a 95% interval of the difference of two independent shares of n
    at p = 0.5."""
    return 100.0 * Z95 * math.sqrt(0.5 * 0.5 * 2.0 / n)


def _sample_counts(specs: list[RowSpec], table: Table, group: str) -> list[int]:
    counts = set()
    for spec, row in zip(specs, table.rows, strict=True):
        if spec.noise != group:
            continue
        cells = [v for v in row.values() if isinstance(v, Cell)]
        counts |= {int(round(p.n)) for c in cells for p in c.parts if p.measured and p.n}
    return sorted(counts)


def noise_note(specs: list[RowSpec], table: Table) -> str | None:
    groups = [
        (where, ns)
        for key, where in (("v1.5", "per v1.5 category"), ("v1.0", "per v1.0 subset"))
        if (ns := _sample_counts(specs, table, key))
    ]
    if not groups:
        return None
    sizes = [f"{ns[0]}-{ns[-1]}" if len(ns) > 1 else str(ns[0]) for _, ns in groups]
    margins = [f"{noise_points(ns[0]):.0f}" for _, ns in groups]
    if len(groups) == 2:
        where = f"{sizes[0]} samples {groups[0][0]} and {sizes[1]} {groups[1][0]}"
        span = f"{margins[0]} and {margins[1]} points, respectively,"
    else:
        where, span = f"{sizes[0]} samples {groups[0][0]}", f"{margins[0]} points"
    smallest = ", at the smallest n" if any(len(ns) > 1 for _, ns in groups) else ""
    return (
        f"Behavior rates come from {where}; differences smaller than about {span} are within "
        "sampling noise (the half-width of a 95% interval of the difference of two independent "
        f"shares at p = 0.5, 1.96·√(0.5·0.5·2/n) in points{smallest})."
    )


def _notes(specs: list[RowSpec], table: Table, systems: list[System]) -> list[str]:
    notes = [n for n in [noise_note(specs, table)] if n]
    several = [f"{s.name} ({len(s.repeats)})" for s in systems if len(s.repeats) > 1]
    if several:
        notes.append(
            "A run with several repeats shows the mean over its repeats, "
            "counts and denominators too: "
            + ", ".join(several)
            + ". `[k of N repeats]`: only k of them have the data."
        )
    notes.append(
        "Shares carry (count/denominator): behavior labels over judged pairs (v1.5 judge), "
        "LLM-judge quality accepted/(accepted + failed), v1.0 shares over eligible samples, "
        "omission over reference words. Latency: pooled means over the overlap sessions' intervals "
        "(scores/summary.json, all categories). MOS and voice consistency: pooled over the replies "
        "of both datasets. `not measured`: the run has no such output (no judge, "
        "no listening scores, no --sweep)."
    )
    notes += selection_notes(systems) + judge_notes(systems)
    notes += [f"{s.name}: the run has no repeat-N/ yet." for s in systems if not s.repeats]
    notes += [f"{s.name} {n}" for s in systems for r in s.repeats for n in r.notes]
    return notes


def judge_notes(systems: list[System]) -> list[str]:
    """Behavior labels of different judge models are never mixed in a cell;
    the note says when columns differ."""
    models = {
        s.name: sorted(
            {
                str(m)
                for r in s.repeats
                if r.behavior and (m := (r.behavior.judge or {}).get("model"))
            }
        )
        for s in systems
    }
    distinct = {tuple(m) for m in models.values() if m}
    if len(distinct) <= 1:
        return []
    return [
        "Behavior labels come from different judges: "
        + "; ".join(f"{name}: {', '.join(m)}" for name, m in models.items() if m)
        + "."
    ]


def selection_notes(systems: list[System]) -> list[str]:
    notes = []
    for dataset in sorted({d for s in systems for d in s.manifest.datasets}, reverse=True):
        uses = {s.name: s.manifest.datasets.get(dataset) for s in systems}
        absent = [name for name, use in uses.items() if use is None]
        if absent:
            notes.append(f"{dataset}: left out by {', '.join(absent)}.")
        present = {name: use for name, use in uses.items() if use is not None}
        selections = [set(use.sample_ids) for use in present.values()]
        if len(selections) > 1 and any(sel != selections[0] for sel in selections):
            counts = ", ".join(f"{name} {len(use.sample_ids)}" for name, use in present.items())
            notes.append(
                f"{dataset}: the runs select different samples ({counts}; "
                f"{len(set.intersection(*selections))} in common): "
                "each column is its run's own selection."
            )
        if len({use.revision for use in present.values()}) > 1:
            notes.append(f"{dataset}: the runs used different dataset revisions.")
    return notes


# --- outputs ----------------------------------------------------------------------------------


def jsonable(table: Table) -> dict[str, Any]:
    data = table.dump()
    data["rows"] = [
        {k: v.model_dump(mode="json") if isinstance(v, BaseModel) else v for k, v in row.items()}
        for row in data["rows"]
    ]
    data["cells"] = table.cells()
    return data


def render(systems: list[System], tables: list[Table], paired_intro: list[str]) -> str:
    names = " vs ".join(s.name for s in systems)
    lines = [f"# fdb comparison: {names}", ""]
    for s in systems:
        repeats = ", ".join(f"repeat-{r.number}" for r in s.repeats) or "no repeats"
        sweep = f"; sweep `{s.sweep}`" if s.sweep else ""
        lines.append(f"- **{s.name}**: run `{s.root}` ({repeats}){sweep}")
    lines.append("")
    lines += tables[0].markdown("##")
    if len(tables) > 1:
        lines += paired_intro
        for table in tables[1:]:
            lines += table.markdown("###")
    lines += ["Provenance, the sha256 of every input and the typed cells: comparison.json.", ""]
    return "\n".join(lines).rstrip() + "\n"


def write_comparison(systems: list[System], out: Path) -> tuple[Path, dict[str, Any]]:
    """tables/*.csv, comparison.json, then COMPARISON.md (each atomically);
    returns its path and the data."""
    tables = [cross_table(systems)]
    intro: list[str] = []
    paired: dict[str, Any] | None = None
    if len(systems) == 2:
        intro, more, paired = paired_view(systems[0], systems[1])
        tables += more
    files = [p.name for p in write_tables(out / "tables", tables)]
    data = {
        "schema": COMPARISON_SCHEMA,
        "files": {"tables": files},
        "systems": [
            {
                "name": s.name,
                "run": str(s.root),
                "repeats": [r.number for r in s.repeats],
                "sweep": str(s.sweep) if s.sweep else None,
                "inputs": s.inputs,
            }
            for s in systems
        ],
        "tables": [jsonable(t) for t in tables],
        "paired": paired,
        "provenance": current().model_dump(mode="json"),
    }
    atomic_write_json(out / "comparison.json", data)
    return atomic_write_text(out / "COMPARISON.md", render(systems, tables, intro)), data
