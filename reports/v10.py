"""The v1.0 sections: unified metrics per repeat, the official-rule reference table, replies."""

from __future__ import annotations

from fdb.datasets.types import V10_TASK
from fdb.io import sha256_file
from fdb.layout import RepeatPaths
from fdb.records import ExportManifest, OfficialTranscript
from fdb.records.judge import JudgeSummary, RelevanceSummary
from fdb.records.v10 import (
    UNIFIED_SCHEMA,
    InterruptMetrics,
    InterruptRow,
    LatencyQuantiles,
    PauseMetrics,
    PauseRow,
    PooledRatio,
    Share,
    TurnMetrics,
    TurnRow,
    UnifiedResult,
    UnifiedStamp,
    read_sample_rows,
)
from fdb.records.v10_reference import (
    OfficialSubset,
    OfficialSummary,
    current_reference,
    evaluator_metric,
)
from fdb.tables import Column, Table
from reports.cells import NA, NOT_MEASURED, count_range, interval, mean_sd, percent, seconds
from reports.exports import Section, results_table

# A metric row mixes shares, ratios and latencies: its cells are formatted per kind, as strings.
# The rows of a subset are its record's metrics in field order (fdb.records.v10), so a new metric
# shows up in RESULTS.md as soon as unified.json holds it.
METRIC_KINDS = (Share, PooledRatio, LatencyQuantiles)
Metric = Share | PooledRatio | LatencyQuantiles
METRIC_COLUMNS = [
    Column("metric", "metric"),
    Column("value", "value"),
    Column("interval", "95% interval"),
    Column("count", "count"),
    Column("bounds", "all-selected bounds"),
    Column("better", "better"),
]
COVERAGE_COLUMNS = [
    Column("subset", "subset"),
    Column("declared", "declared"),
    Column("selected", "selected"),
    Column("eligible", "eligible"),
    Column("ineligible", "ineligible"),
    Column("reasons", "reasons"),
    Column("min_observable_s", "min observable (s)", seconds),
]
REPLIES_COLUMNS = [
    Column("sample", "sample"),
    Column("outcome", "outcome"),
    Column("words", "words"),
    Column("first_word_s", "first word (s)", seconds),
    Column("transcript", "transcript"),
]


def _repeats(fmt):
    """A cell of per-repeat values; None (the column does not apply to the subset) is n/a."""
    return lambda values: NA if values is None else fmt(values)


# Counts and rates hold their per-repeat values; relevance cells say why they are missing,
# so are strings.
OFFICIAL_COLUMNS = [
    Column("subset", "Subset"),
    Column("selected", "Selected", count_range),
    Column("eligible", "Eligible", count_range),
    Column("evaluated", "Evaluated", count_range),
    Column("takeover_rate", "Takeover rate", mean_sd),
    Column("latency_s", "Latency (s)", _repeats(mean_sd)),
    Column("relevance", "Relevance (0-5)"),
    Column("judge_retries", "Judge retries"),
    Column("backchannel_frequency", "Backchannel frequency", _repeats(mean_sd)),
    Column("backchannel_jsd", "Backchannel JSD", _repeats(mean_sd)),
]


# The original evaluator's numbers, each beside the clean-room column of the same metric.
EVALUATOR_BESIDE = {
    "takeover_rate": "Takeover rate",
    "latency_s": "Latency (s)",
    "backchannel_frequency": "Backchannel frequency",
    "backchannel_jsd": "Backchannel JSD",
}


def official_columns(with_evaluator: bool) -> list[Column]:
    """OFFICIAL_COLUMNS, plus an "(original evaluator)" column after each metric it reports."""
    if not with_evaluator:
        return OFFICIAL_COLUMNS
    columns = []
    for column in OFFICIAL_COLUMNS:
        columns.append(column)
        if column.key in EVALUATOR_BESIDE:
            columns.append(
                Column(
                    f"evaluator_{column.key}",
                    f"{EVALUATOR_BESIDE[column.key]} (original evaluator)",
                )
            )
    return columns


def _evaluators(repeats: list[RepeatPaths]) -> tuple[dict[int, object], list[str]]:
    """Per repeat, its evaluator.json when it was computed from the repeat's current manifest.json
    and asr.json (``fdb.records.v10_reference.load_reference``), and the notes for those left
    out."""
    found, notes = {}, []
    for rep in repeats:
        tree = rep.v10_reference
        columns = current_reference(tree) if (tree / "evaluator.json").exists() else None
        if columns is None:
            continue
        notes += [
            f"repeat-{rep.number}: {note}"
            for note in columns.notes
            if note.startswith("evaluator.json")
        ]
        if columns.evaluator is not None:
            found[rep.number] = columns.evaluator
    return found, notes


def _evaluator_cells(name: str, task: str, evaluators: dict[int, object]) -> dict[str, str]:
    """The original evaluator's cells of one subset: mean ± sd over the repeats where it ran;
    else why not (not run: needs the judge / no eligible sample; failed: see its log); n/a
    where the clean-room column does not apply to the task either."""
    runs = [e.subsets[name] for e in evaluators.values() if name in e.subsets]
    ok = [r for r in runs if r.status == "ok"]
    cells = {}
    for key in EVALUATOR_BESIDE:
        values = [evaluator_metric(r.result, key) for r in ok]
        applies = key == "takeover_rate" or (key == "latency_s") != (task == "backchannel")
        if not applies:
            cells[f"evaluator_{key}"] = NA
        elif any(v is not None for v in values):
            cells[f"evaluator_{key}"] = mean_sd(values)
        else:
            cells[f"evaluator_{key}"] = (
                NA
                if ok or not runs
                else "failed"
                if any(r.status == "failed" for r in runs)
                else "not run"
            )
    return cells


def _evaluator_note(evaluators: dict[int, object]) -> str:
    by_label: dict[str, list[str]] = {}
    for number, summary in evaluators.items():
        by_label.setdefault(summary.revision_label(), []).append(f"repeat-{number}")
    ran = "; ".join(f"{label} ({', '.join(reps)})" for label, reps in sorted(by_label.items()))
    return (
        "Columns marked (original evaluator): evaluate.py run unchanged from the user's "
        "checkout of "
        + ran
        + (
            ", on the same windows and transcripts; user interruption needs the judge, "
            "so it is not run there."
        )
    )


def _metric_row(name: str, m: Metric) -> dict[str, str]:
    return dict(zip([c.key for c in METRIC_COLUMNS], _metric_cells(name, m), strict=True))


def _metric_cells(name: str, m: Metric) -> list[str]:
    if isinstance(m, Share):  # a share of samples
        return [
            name,
            percent(m.value),
            interval(m.wilson95, percent),
            f"{m.count}/{m.n}",
            interval(m.selected_bounds, percent),
            m.better,
        ]
    if isinstance(m, PooledRatio):
        value = NA if m.value is None else f"{m.value:.3f}"
        ci = interval(m.bootstrap95, lambda v: f"{v:.3f}")
        return [name, value, ci, f"{m.numerator:.3f}/{m.denominator:.3f}", NA, m.better]
    return [
        name,
        f"median {seconds(m.median_s)} s, p90 {seconds(m.p90_s)} s",
        interval(m.median_bootstrap95),
        f"{m.observed}/{m.n} responded",
        NA,
        m.better,
    ]


def _metrics(metrics: PauseMetrics | TurnMetrics | InterruptMetrics) -> list[tuple[str, Metric]]:
    """The metrics of a subset in the record's field order
    (its counts and plain numbers left out)."""
    values = ((key, getattr(metrics, key)) for key in type(metrics).model_fields)
    return [(key, value) for key, value in values if isinstance(value, METRIC_KINDS)]


def unified_section(repeats: list[RepeatPaths]) -> Section:
    section = Section(["## v1.0 unified metrics", ""], {})
    for rep in repeats:
        if not (rep.v10_reference / "manifest.json").exists() and not rep.v10_recording.exists():
            continue  # this repeat left v1.0 out
        result, problem = load_unified(rep)
        heading = f"repeat-{rep.number}"
        if result is None:
            section.lines += [
                f"### {heading}",
                "",
                f"Unified metrics unavailable: {problem}. {backfill_hint(rep)}",
                "",
            ]
            continue
        section.data[heading] = result.dump()
        section.lines += [
            f"### {heading}",
            "",
            f"Definitions `{result.definitions}`; ASR "
            f"`{result.inputs.asr_backend.get('name')}`; VAD "
            f"`{result.vad.name if result.vad else 'not used'}`.",
            "",
        ]
        section.show(_coverage(heading, result))
        for name, subset in result.subsets.items():
            table = results_table(heading, name, METRIC_COLUMNS)
            for key, metric in _metrics(subset.metrics):
                table.add(**_metric_row(key, metric))
            section.lines += [f"**{name}** ({subset.task})", ""]
            section.show(table)
        for name, why in result.not_scored.items():
            section.lines += [f"{name}: not scored by the unified metrics ({why}).", ""]
    return section


STALE = {
    "manifest.json": "unified.json is stale: its manifest.json hash differs from the export's",
    "asr.json": "unified.json is stale: its asr.json hash differs from the ASR receipt's",
}


def load_unified(rep: RepeatPaths) -> tuple[UnifiedResult | None, str | None]:
    """A repeat's unified.json as its record, or why it cannot be shown (an input or the file
    missing, an unsupported version, stale, incomplete). A damaged one (not JSON, or a current
    version that is not a ``UnifiedResult``) is an FdbError naming it and the backfill."""
    tree = rep.v10_reference
    for name in ("manifest.json", "asr.json"):
        if not (tree / name).exists():
            return None, f"v10/reference/{name} is missing"
    path = tree / "unified.json"
    stamp = UnifiedStamp.load(path, backfill_hint(rep))
    if stamp is None:
        return None, "v10/reference/unified.json is missing"
    if stamp.schema_ != UNIFIED_SCHEMA:
        return None, (
            f"unified.json has the unsupported version {stamp.schema_!r} "
            f"(fdb reads {UNIFIED_SCHEMA})"
        )
    stale = stamp.stale(sha256_file(tree / "manifest.json"), sha256_file(tree / "asr.json"))
    if stale is not None:
        return None, STALE[stale]
    if not (tree / "unified-samples.jsonl").exists():
        return None, "the output pair is incomplete: v10/reference/unified-samples.jsonl is missing"
    result = UnifiedResult.load(path, backfill_hint(rep))
    manifest = ExportManifest.load(tree / "manifest.json", backfill_hint(rep))
    subsets = {s.subset for s in manifest.samples} if manifest else set()
    scored = set(result.subsets) | set(result.not_scored)
    missing = sorted(sub for sub in subsets - scored if V10_TASK.get(sub) != "backchannel")
    if missing:
        return None, f"subset(s) {', '.join(missing)} incomplete in unified.json"
    return result, None


def backfill_hint(rep: RepeatPaths) -> str:
    return (
        "Repair the export or ASR if named, then run the CPU-only backfill `python -m fdb score "
        f"v10 --tree {rep.v10_reference}` (no ASR, no v1.5 work) and rerun aggregate."
    )


def _coverage(heading: str, unified: UnifiedResult) -> Table:
    table = results_table(heading, "", COVERAGE_COLUMNS)
    for name, subset in unified.subsets.items():
        c = subset.counts
        reasons = ", ".join(f"{k}: {v}" for k, v in sorted(c.ineligible_reasons.items())) or "-"
        table.add(
            subset=name,
            declared=c.declared,
            selected=c.selected,
            eligible=c.eligible,
            ineligible=c.ineligible,
            reasons=reasons,
            min_observable_s=getattr(subset.metrics, "min_observable_s", None),
        )
    return table


def _relevance_states(
    repeats: list[RepeatPaths], statuses: tuple[str, ...]
) -> list[RelevanceSummary]:
    """The relevance summaries of judge.json in the given statuses (read through its record)."""
    found = []
    for rep in repeats:
        judge = JudgeSummary.load(rep.root / "judge.json")
        rel = judge.relevance if judge is not None else None
        if rel is not None and rel.status in statuses:
            found.append(rel)
    return found


def _relevance(repeats: list[RepeatPaths]) -> list[RelevanceSummary]:
    return _relevance_states(repeats, ("complete", "failed", "incomplete"))


def _official_row(
    name: str, cells: list[OfficialSubset], relevance: list[RelevanceSummary]
) -> dict:
    task = cells[0].task
    backchannel = task == "backchannel"
    rel_cells = {"relevance": NA, "judge_retries": NA}
    if task == "user_interruption":
        rel_cells = {
            "relevance": mean_sd([r.relevance for r in relevance]) if relevance else NOT_MEASURED,
            "judge_retries": count_range([r.retries for r in relevance]) if relevance else NA,
        }

    def values(key: str, applies: bool = True) -> list | None:
        return [getattr(c, key) for c in cells] if applies else None

    return {
        "subset": name,
        "selected": values("selected"),
        "eligible": values("eligible"),
        "evaluated": values("evaluated"),
        "takeover_rate": values("takeover_rate"),
        "latency_s": values("latency_s", not backchannel),
        **rel_cells,
        "backchannel_frequency": values("backchannel_frequency", backchannel),
        "backchannel_jsd": values("backchannel_jsd", backchannel),
    }


def official_section(repeats: list[RepeatPaths]) -> Section:
    per_repeat = {
        r.number: OfficialSummary.load(r.v10_reference / "official.json", backfill_hint(r))
        for r in repeats
    }
    found = {n: s for n, s in per_repeat.items() if s is not None}
    heading = "v1.0 official-rule reference"
    section = Section([f"## {heading}", ""], {})
    if not found:
        section.lines += ["Not evaluated yet (no official.json in any repeat).", ""]
        return section
    relevance = _relevance(repeats)
    evaluators, evaluator_notes = _evaluators(repeats)
    section.lines += [
        "Takeover, latency and backchannel numbers by the official evaluator's rules, "
        "reimplemented clean-room (negative latencies clamped to 0, averaged over takeover "
        "samples), not the official evaluator itself. " + _relevance_note(repeats, relevance),
        "",
    ]
    if evaluators:
        section.lines += [_evaluator_note(evaluators), ""]
    subsets = sorted({k for s in found.values() for k in s.subsets})
    table = results_table(heading, "", official_columns(bool(evaluators)))
    for name in subsets:
        cells = [c for c in (s.subsets.get(name) for s in found.values()) if c]
        extra = _evaluator_cells(name, cells[0].task, evaluators) if evaluators else {}
        table.add(**_official_row(name, cells, relevance), **extra)
    by_number = {r.number: r for r in repeats}
    missing = [
        f"repeat-{n}" for n, s in per_repeat.items() if s is None and _holds_v10(by_number[n])
    ]
    section.show(table)
    if missing:
        section.lines += [f"Not evaluated yet: {', '.join(missing)}.", ""]
    section.lines += [f"{note}." for note in evaluator_notes] + ([""] if evaluator_notes else [])
    section.data = {f"repeat-{n}": s.dump() for n, s in found.items()}
    if evaluators:
        section.data["original_evaluator"] = {
            f"repeat-{n}": e.dump() for n, e in evaluators.items()
        }
    return section


def _holds_v10(rep: RepeatPaths) -> bool:
    """A repeat with a v1.0 recording or export. One without (never recorded, its recording
    removed, v1.5 only) is not waiting to be evaluated."""
    recording = rep.v10_recording
    return (rep.v10_reference / "manifest.json").exists() or (
        recording.is_dir() and any(recording.rglob("session.json"))
    )


def replies_section(rep: RepeatPaths, max_words: int = 14) -> Section:
    """What the system said in each v1.0 window, as the ASR heard it (latest repeat)."""
    samples = rep.v10_reference / "unified-samples.jsonl"
    manifest = ExportManifest.load(rep.v10_reference / "manifest.json", backfill_hint(rep))
    if manifest is None:
        return Section([])
    outcomes = {}
    for row in read_sample_rows(samples, backfill_hint(rep)) if samples.exists() else []:
        if isinstance(row, TurnRow | InterruptRow):
            outcomes[row.sample_id] = row.outcome
        elif isinstance(row, PauseRow):
            outcomes[row.sample_id] = "pause intrusion" if row.pause_intrusion else "no intrusion"
    heading = f"v1.0 replies as transcribed (repeat-{rep.number})"
    table = results_table(heading, "", REPLIES_COLUMNS)
    for sample in manifest.samples:
        if not sample.eligible:
            table.add(
                sample=sample.sample_id,
                outcome="ineligible: " + ", ".join(sample.reasons),
                words=None,
                first_word_s=None,
                transcript="",
            )
            continue
        out = OfficialTranscript.load(rep.v10_reference / sample.subset / sample.id / "output.json")
        words = out.chunks if out is not None else []
        text = " ".join(w.text.strip() for w in words[:max_words]) + (
            " …" if len(words) > max_words else ""
        )
        table.add(
            sample=sample.sample_id,
            outcome=outcomes.get(sample.sample_id, "-"),
            words=len(words),
            first_word_s=min(w.timestamp[0] for w in words) if words else None,
            transcript=text or "(no words)",
        )
    section = Section([f"## {heading}", ""])
    section.show(table)
    return section


def _relevance_note(repeats: list[RepeatPaths], relevance: list[RelevanceSummary]) -> str:
    if not relevance:
        reasons = sorted(
            {
                str(r.message)
                for r in _relevance_states(repeats, ("pending", "blocked"))
                if r.message
            }
        )
        why = "; ".join(reasons) if reasons else "no judge ran"
        return f"Relevance needs an LLM judge: not measured ({why})."
    labels = sorted({str((r.rubric or {}).get("label")) for r in relevance})
    models = sorted({str((r.judge or {}).get("model")) for r in relevance})
    return (
        f"Relevance rated by {', '.join(models)} with {', '.join(labels)}; a nonzero Judge retries "
        "means the official loop would have inflated the interruption takeover rate."
    )
