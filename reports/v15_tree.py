"""v1.5 scoring of exported trees outside the run layout (``python -m fdb score v15``).

One output directory ``OUT`` scores one or more cohorts (``--tree ENGINE=DIR``), each a v1.5
reference-audio export (``reference-manifest.json``). Per cohort, ``OUT/<ENGINE>/`` holds what a
repeat holds for its v1.5 scores, written by the same code as the run path:

- ``timing/summary.json`` and ``timing/intervals.jsonl`` (``scorers.v15_timing``), with the VAD
  span cache in ``timing/vad-cache/``;
- ``judge.json``, ``judge-<name>/`` and ``semantic-<name>/`` (``judges.judge_repeat``).

``summarize`` reads those and the tree (never the audio) and writes ``OUT/summary.json``
(:class:`TreeScores`): per cohort the populations (declared from the dataset, selected,
eligible), protocol verdicts, ineligibility reasons, ASR and timing coverage, every sample not
evaluated with its reason, the timing summary and the judge summary as written. ``report`` reads
only ``OUT/summary.json`` and writes ``OUT/report.txt``: the same v1.5 tables as RESULTS.md
(:func:`reports.v15.timing_section`), one set per cohort, after its coverage lines.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from pydantic import BaseModel

from fdb.datasets.types import category_key
from fdb.errors import FdbError
from fdb.io import atomic_write_json, atomic_write_text, read_json, sha256_file
from fdb.provenance import current
from fdb.records import ExportSample, V15AsrReceipt, load_record, load_rows, load_v15_manifest
from fdb.records.judge import LABELS as BEHAVIOR_LABELS
from fdb.records.judge import SEMANTIC_SCHEMA, BehaviorCell, JudgeSummary, SemanticSummary, Share
from fdb.records.v15 import (
    TREE_SCORES_SCHEMA,
    AsrCoverage,
    CohortScores,
    Population,
    SessionIntervals,
    TimingSummary,
    TreeScores,
)
from fdb.tables import Column, Table
from reports.v15 import UNMEASURED, semantic_table, timing_section

MANIFEST = "reference-manifest.json"


def cohort_dir(out: Path, engine: str) -> Path:
    return Path(out) / engine


def timing_dir(out: Path, engine: str) -> Path:
    return cohort_dir(out, engine) / "timing"


def _populations(
    chosen: list[ExportSample], declared: dict[str, int] | None
) -> dict[str, Population]:
    groups: dict[str, list[ExportSample]] = {"all": chosen}
    for sample in chosen:
        groups.setdefault(sample.subset, []).append(sample)
    out = {}
    for name, samples in groups.items():
        size = (
            (sum(declared.values()) if name == "all" else declared.get(name))
            if declared is not None
            else None
        )
        eligible = sum(1 for s in samples if s.eligible)
        out[name] = Population(
            declared=size,
            selected=len(samples),
            eligible=eligible,
            ineligible=len(samples) - eligible,
        )
    return out


def _asr(tree: Path, manifest_sha: str, ids: set[str]) -> AsrCoverage | None:
    path = tree / "asr.json"
    receipt = V15AsrReceipt.load(path, "rerun `python -m fdb score transcribe` on the tree")
    if receipt is None:
        return None
    backend = receipt.backend.get("name")
    if receipt.manifest_sha256 != manifest_sha:
        return AsrCoverage(
            backend=backend,
            pairs={},
            note=f"{path} was written for another {MANIFEST}: "
            "not counted; rerun `python -m fdb score transcribe` on the tree",
        )
    counts = Counter(e.status for e in receipt.samples if e.sample_id in ids)
    return AsrCoverage(backend=backend, pairs=dict(sorted(counts.items())))


def _timing(
    out: Path, engine: str, manifest_sha: str, ids: set[str]
) -> tuple[TimingSummary, list[SessionIntervals]]:
    folder = timing_dir(out, engine)
    summary_path, rows_path = folder / "summary.json", folder / "intervals.jsonl"
    rerun = f"run `python -m fdb score v15 timing --tree {engine}=DIR --out {out}` first"
    summary = TimingSummary.load(summary_path)
    if summary is None or not rows_path.exists():
        raise FdbError(f"{engine}: {summary_path} is missing: the cohort has not been timed", rerun)
    rows = load_rows(
        SessionIntervals,
        rows_path,
        f"time the tree again: {rerun.removeprefix('run ').removesuffix(' first')}",
    )
    if summary.manifest_sha256 != manifest_sha:
        raise FdbError(
            f"{engine}: {summary_path} was computed from another {MANIFEST}",
            f"time the tree again: {rerun.removeprefix('run ').removesuffix(' first')}",
        )
    timed = {r.sample_id for r in rows}
    if timed != ids:
        raise FdbError(
            f"{engine}: {summary_path} times {len(timed)} pair(s), the selection has {len(ids)}",
            "pass the same --only to timing and summarize",
        )
    return summary, rows


def _not_evaluated(chosen: list[ExportSample], rows: list[SessionIntervals]) -> dict[str, str]:
    out = {
        s.sample_id: "ineligible: " + ("; ".join(s.reasons) or "no reason recorded")
        for s in chosen
        if not s.eligible
    }
    for row in rows:
        if row.status == "failed":
            out.setdefault(row.sample_id, f"{row.variant} session failed: {row.error}")
    return dict(sorted(out.items()))


def _judge(out: Path, engine: str, ids: set[str]) -> JudgeSummary | None:
    """judge.json of the cohort (None: not judged), after checking it judged the selected pairs."""
    path = cohort_dir(out, engine) / "judge.json"
    judge = JudgeSummary.load(path)
    if judge is None:
        return None
    judged = {s.sample_id for s in (judge.behavior.samples if judge.behavior else [])}
    if judged != ids:
        raise FdbError(
            f"{engine}: {path} judged {len(judged)} pair(s), the selection has {len(ids)}",
            "pass the same --tree and --only to judge and summarize (or rerun judge)",
        )
    return judge


def summarize_cohort(
    engine: str,
    tree: Path,
    out: Path,
    only: list[str] | None,
    declared: dict[str, int] | None,
    declared_note: str | None,
) -> CohortScores:
    """One cohort's record for ``OUT/summary.json`` from its tree and its phase outputs."""
    tree = Path(tree)
    path = tree / MANIFEST
    try:
        manifest, manifest_sha = load_v15_manifest(tree)
    except FdbError as exc:
        raise FdbError(
            f"{engine}: {exc.message}",
            exc.hint and "point --tree ENGINE=DIR at a v1.5 reference-audio export",
        ) from exc
    chosen = manifest.select(only, str(path))
    ids = {s.sample_id for s in chosen}
    judge = _judge(out, engine, ids)
    timing, rows = _timing(out, engine, manifest_sha, ids)
    judge_path = cohort_dir(out, engine) / "judge.json"
    overall = timing.categories.get("all")
    inputs = {
        str(p): sha256_file(p)
        for p in (path, timing_dir(out, engine) / "summary.json", judge_path, tree / "asr.json")
        if p.exists()
    }
    return CohortScores(
        engine=engine,
        tree=str(tree),
        manifest_sha256=manifest_sha,
        dataset_revision=manifest.dataset_revision,
        trace_format=manifest.trace_format,
        only=sorted(only) if only else None,
        declared_note=declared_note,
        populations=_populations(chosen, declared),
        verdicts=dict(sorted(Counter(s.verdict for s in chosen).items())),
        ineligible_reasons=dict(
            sorted(Counter(r for s in chosen if not s.eligible for r in s.reasons).items())
        ),
        asr=_asr(tree, manifest_sha, ids),
        timing_coverage={
            k: getattr(overall, k) if overall else 0
            for k in ("timed_overlap_sessions", "timed_clean_sessions", "failed_sessions")
        },
        not_evaluated=_not_evaluated(chosen, rows),
        timing=timing,
        judge=judge,
        inputs=inputs,
    )


def write_scores(out: Path, cohorts: list[CohortScores]) -> TreeScores:
    """``OUT/summary.json`` for the cohorts (in the order given)."""
    scores = TreeScores(
        schema_=TREE_SCORES_SCHEMA,
        cohorts={c.engine: c for c in cohorts},
        provenance=current().model_dump(mode="json"),
    )
    atomic_write_json(Path(out) / "summary.json", scores.dump())
    return scores


def load_scores(scores_dir: Path) -> TreeScores:
    path = Path(scores_dir) / "summary.json"
    scores = TreeScores.load(
        path,
        "this is not a `score v15 summarize` summary: pass --scores the --out directory of "
        "`score v15 summarize`",
    )
    if scores is None:
        raise FdbError(
            f"{path} is missing",
            f"run `python -m fdb score v15 summarize --out {scores_dir}` first",
        )
    return scores


def _count(value: int | None) -> str:
    return "n/a" if value is None else str(value)


def _coverage_lines(c: CohortScores) -> list[str]:
    lines = [
        f"Tree: {c.tree} ({MANIFEST} sha256 {c.manifest_sha256[:16]}…), trace format "
        f"{c.trace_format}, dataset revision {c.dataset_revision or 'n/a'}"
        + (f", only {len(c.only)} pair(s)" if c.only else "")
    ]
    groups = sorted(c.populations.items(), key=lambda kv: (kv[0] != "all", category_key(kv[0])))
    lines.append(
        "Populations: "
        + "; ".join(
            f"{name} declared {_count(p.declared)}, selected {p.selected}, eligible {p.eligible}"
            for name, p in groups
        )
    )
    if c.declared_note:
        lines.append(f"Note: {c.declared_note}")
    lines.append(
        "Protocol verdicts: " + (", ".join(f"{k} {v}" for k, v in c.verdicts.items()) or "none")
    )
    if c.ineligible_reasons:
        lines.append(
            "Ineligible reasons: "
            + "; ".join(f"{k} ({v})" for k, v in c.ineligible_reasons.items())
        )
    if c.asr is None:
        lines.append("ASR coverage: n/a (no asr.json in the tree)")
    else:
        pairs = ", ".join(f"{k} {v}" for k, v in c.asr.pairs.items()) or "none"
        lines.append(
            f"ASR coverage ({c.asr.backend}): pairs {pairs}"
            + (f" ({c.asr.note})" if c.asr.note else "")
        )
    t = c.timing_coverage
    lines.append(
        f"Timing coverage: timed overlap sessions {t['timed_overlap_sessions']}, timed clean "
        f"sessions {t['timed_clean_sessions']}, failed sessions {t['failed_sessions']}"
    )
    lines += [f"Not evaluated: {sid}: {why}" for sid, why in c.not_evaluated.items()]
    return [*lines, ""]


def _share(cell: Share | None) -> str:
    if cell is None or cell.share is None or cell.ci95 is None:
        return "n/a"
    low, high = cell.ci95
    return f"{cell.count} ({100 * cell.share:.1f}% [{100 * low:.1f}, {100 * high:.1f}])"


def behavior_lines(judge: JudgeSummary | None) -> list[str]:
    """The behavior label distribution of judge.json: per category the pairs under each outcome
    and each label's count and share of the judged pairs with its Wilson 95% interval."""
    behavior = judge.behavior if judge else None
    if behavior is None or behavior.status in UNMEASURED:
        why = (behavior.message if behavior else None) or "no judge ran"
        return ["Behavior label distribution: not measured (" + why + ").", ""]
    columns = [
        Column("category", "Category"),
        Column("outcomes", "Pairs by outcome"),
        Column("judged", "Judged pairs"),
        *(Column(label, label, _share) for label in BEHAVIOR_LABELS),
    ]
    table = Table("behavior", "Behavior label distribution", columns)
    cells: dict[str, BehaviorCell] = {"all": behavior.all, **behavior.categories}
    for name in sorted(cells, key=lambda n: (n != "all", category_key(n))):
        cell = cells[name]
        outcomes = ", ".join(f"{k} {v}" for k, v in cell.outcomes.items() if v)
        table.add(
            category=name,
            outcomes=outcomes,
            judged=cell.judged,
            **{label: cell.labels.get(label) for label in BEHAVIOR_LABELS},
        )
    model = (behavior.judge or {}).get("model")
    return [
        f"Behavior label distribution ({model}; status {behavior.status}): count (share of judged "
        "pairs [Wilson 95%])",
        "",
        *table.markdown(None),
    ]


class ReplaySample(BaseModel):
    sample: str
    variant: str
    recorded_status: str
    status: str


class Replay(BaseModel):
    """replay.json: offline replay agreement of the recorded sessions."""

    selected: int
    replayed: int
    samples: list[ReplaySample]


def replay_lines(path: Path) -> list[str]:
    try:
        replay = Replay.model_validate(read_json(path))
    except (ValueError, TypeError) as exc:
        raise FdbError(
            f"{path} is not a replay summary ({str(exc).splitlines()[0]})",
            'pass --replay a file {"selected": N, "replayed": M, "samples": [{"sample", "variant", '
            '"recorded_status", "status"}]}',
        ) from exc
    counts = Counter(s.status for s in replay.samples)
    lines = [
        f"Offline replay agreement: {replay.replayed} of {replay.selected} selected sessions "
        "replayed; " + (", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "no samples")
    ]
    lines += [
        f"  {s.sample} [{s.variant}]: {s.status} (recorded {s.recorded_status})"
        for s in replay.samples
        if s.status != "match"
    ]
    return [*lines, ""]


def semantic_lines(path: Path, categories: list[str]) -> list[str]:
    """The semantic table of a semantic judge's summary.json given with --semantic-summary."""
    doc = read_json(path)
    if doc.get("schema") != SEMANTIC_SCHEMA:
        raise FdbError(
            f"{path} is not a semantic judge summary (schema {doc.get('schema')!r})",
            "pass --semantic-summary the summary.json of a semantic-<name>/ directory",
        )
    semantic = load_record(
        SemanticSummary,
        path,
        "pass --semantic-summary the summary.json of a semantic-<name>/ directory",
    )
    table = semantic_table(categories, [semantic])
    if table is None:
        return [f"Semantic judge ({path}): status {semantic.status}, no grades to show.", ""]
    return [
        f"Semantic judge ({path}): quality = A/(A+F), coverage = (A+F)/N.",
        "",
        *table.markdown(None),
    ]


def report_text(
    scores: TreeScores,
    engines: list[str] | None = None,
    replay: Path | None = None,
    semantic: Path | None = None,
) -> str:
    """report.txt: per cohort its coverage lines, the v1.5 tables of RESULTS.md and the behavior
    label distribution; ``replay`` and ``semantic`` (one cohort only) add those files."""
    chosen = engines or list(scores.cohorts)
    unknown = [e for e in chosen if e not in scores.cohorts]
    if unknown:
        raise FdbError(
            f"summary.json has no cohort {unknown[0]} (it has "
            f"{', '.join(scores.cohorts) or 'none'})",
            "pass --engine with one of those names",
        )
    if (replay or semantic) and len(chosen) != 1:
        raise FdbError(
            f"--replay and --semantic-summary describe one cohort, and {len(chosen)} are reported",
            "pass --engine NAME with them",
        )
    lines = ["# fdb v1.5 report", ""]
    for engine in chosen:
        cohort = scores.cohorts[engine]
        section = timing_section(
            {engine: cohort.timing},
            [cohort.judge] if cohort.judge else [],
            f"## {engine}",
            "No timing.",
        )
        lines += [
            *section.lines[:2],
            *_coverage_lines(cohort),
            *(replay_lines(replay) if replay else []),
            *section.lines[2:],
            *behavior_lines(cohort.judge),
        ]
        if semantic:
            lines += semantic_lines(semantic, list(cohort.timing.categories))
    return "\n".join(lines).rstrip() + "\n"


def write_report(
    scores_dir: Path,
    engines: list[str] | None = None,
    replay: Path | None = None,
    semantic: Path | None = None,
) -> tuple[Path, str]:
    text = report_text(load_scores(scores_dir), engines, replay, semantic)
    path = Path(scores_dir) / "report.txt"
    atomic_write_text(path, text)
    return path, text
