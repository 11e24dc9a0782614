"""`python -m fdb score v15 timing|judge|summarize|report`: v1.5 scoring of exported trees.

The phases of a repeat's v1.5 scoring (`fdb asr`'s timing, `fdb judge`, `fdb aggregate`'s v1.5
tables), run by hand on one or more reference-audio exports outside the run layout. Run them in
order on one --out directory with the same --tree options (reports/v15_tree.py lists the files).
"""

from __future__ import annotations

import re
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from fdb.cli import configure_logging
from fdb.cli.declared import declared_for
from fdb.errors import FdbError
from fdb.io import read_jsonl
from fdb.settings import load_settings

v15_app = typer.Typer(
    name="v15",
    no_args_is_help=True,
    add_completion=False,
    help="v1.5 scoring of exported reference-audio trees: timing, judge, summarize, report (in "
    "that order, on one --out directory with the same --tree options).",
)

ENGINE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
DEFAULT_ENGINE = "model"
RESERVED = {"summary.json", "report.txt"}  # files of OUT itself
TREE_HELP = (
    "A cohort to score: ENGINE=DIR, DIR a v1.5 reference-audio export (reference-manifest.json) "
    "and ENGINE a free label (letters, digits, '.', '_', '-'); a bare DIR is labeled `model`. "
    "Repeat it to score several cohorts together."
)
OUT_HELP = "The scores directory: OUT/<ENGINE>/ per cohort, OUT/summary.json, OUT/report.txt."
ONLY_HELP = "Score only this pair, category/id (repeatable); default: every pair of the export."


def parse_trees(values: list[str]) -> list[tuple[str, Path]]:
    """``--tree`` values as (engine, directory), refusing a bad or repeated engine name."""
    cohorts: list[tuple[str, Path]] = []
    for value in values:
        engine, sep, folder = value.partition("=")
        if not sep:
            engine, folder = DEFAULT_ENGINE, value
        if not ENGINE_RE.match(engine) or engine in RESERVED:
            raise FdbError(
                f"--tree {value}: engine name {engine!r} is not allowed",
                "use --tree ENGINE=DIR with letters, digits, '.', '_' and '-' in ENGINE, other "
                "than summary.json and report.txt",
            )
        if engine in (e for e, _ in cohorts):
            raise FdbError(
                f"--tree {value}: engine {engine} is given twice",
                "give each cohort its own ENGINE name",
            )
        cohorts.append((engine, Path(folder)))
    if not cohorts:
        raise FdbError(
            "no --tree given", "pass --tree ENGINE=DIR for each reference-audio export to score"
        )
    return cohorts


def _console():
    return Console(stderr=True, soft_wrap=True)


def timing(
    tree: list[str] = typer.Option(..., help=TREE_HELP),
    out: Path = typer.Option(..., help=OUT_HELP),
    only: list[str] = typer.Option(None, help=ONLY_HELP),
    limit: int | None = typer.Option(
        None,
        min=1,
        help="Run the VAD of at most N pairs per cohort in this call "
        "(a rerun continues; the summary is written once every pair is timed).",
    ),
) -> None:
    """Time every session with Silero VAD and the official interval rules, exactly as `fdb asr`
    does for a repeat: writes OUT/<ENGINE>/timing/summary.json and intervals.jsonl (spans cached in
    timing/vad-cache/). Exits 1 when a session could not be read (named, one line each; the
    summary is still written with it as failed)."""
    # lazy: keeps `fdb --help` fast; loaded when the command runs
    from reports.v15_tree import timing_dir
    from scorers.v15_timing import score_v15_timing, time_some

    console, failed = _console(), False
    for engine, folder in parse_trees(tree):
        cache = timing_dir(out, engine) / "vad-cache"
        if limit is not None:
            done, left = time_some(folder, cache, limit, only=only)
            if left:
                console.print(f"{engine}: timed {done} pair(s); {left} left: rerun to continue")
                continue
        summary = score_v15_timing(folder, out=timing_dir(out, engine), cache_dir=cache, only=only)
        overall = summary.categories["all"]
        console.print(
            f"{engine}: {overall.timed_overlap_sessions} timed overlap sessions of "
            f"{overall.pairs} pairs, {overall.failed_sessions} failed; wrote "
            f"{timing_dir(out, engine) / 'summary.json'}"
        )
        failed |= _print_failed(console, engine, timing_dir(out, engine) / "intervals.jsonl")
    if failed:
        raise SystemExit(1)


def _print_failed(console, engine: str, rows_path: Path) -> bool:
    # lazy: keeps `fdb --help` fast; loaded when the command runs
    from fdb.records.v15 import SessionIntervals

    rows = read_jsonl(rows_path, SessionIntervals)
    bad = [r for r in rows if r.status == "failed"]
    for row in bad:
        console.print(
            f"[yellow]{escape(engine)}[/] ({row.variant} session): {escape(str(row.error))}"
        )
    return bool(bad)


def judge(
    tree: list[str] = typer.Option(..., help=TREE_HELP),
    out: Path = typer.Option(..., help=OUT_HELP),
    only: list[str] = typer.Option(None, help=ONLY_HELP),
    limit: int | None = typer.Option(
        None,
        min=1,
        help="Send at most N pairs per cohort and task in this call "
        "(the others stay pending; a rerun continues).",
    ),
    base_url: str = typer.Option(
        None, help="The judge's OpenAI-compatible endpoint (as `fdb judge --base-url`)."
    ),
    judge_model: str = typer.Option(
        None,
        help="Model of an OpenAI-compatible judge without a judge config (as "
        "`fdb judge --judge-model`); its key is read from OPENAI_API_KEY only.",
    ),
    judge_config: Path = typer.Option(
        None,
        help="Judge config JSON of a self-hosted judge (as `fdb judge "
        "--judge-config`); its key is read from CUSTOM_JUDGE_API_KEY.",
    ),
    reference_source: Path = typer.Option(
        None,
        help="Full-Duplex-Bench checkout holding the behavior prompt "
        "(default $FDB_WORK/Full-Duplex-Bench when present).",
    ),
    retry_failed: bool = typer.Option(
        False, help="Send again the pairs whose requests failed (transport or parse)."
    ),
    concurrency: int = typer.Option(16, min=1, max=1024, help="Requests in flight at most."),
    timeout: float = typer.Option(
        120.0, min=0.1, help="Seconds per request before it counts as failed."
    ),
    log_level: str = typer.Option("warning", help="debug, info, warning or error."),
) -> None:
    """Label each cohort's pairs with the behavior prompt and grade them with the semantic judge,
    with the judge machinery and configuration of `fdb judge` (the transcripts come from
    `score transcribe`). Writes OUT/<ENGINE>/judge.json and the judge's task directories; a rerun
    skips finished pairs. Exits 1 when a task has failures (rerun with --retry-failed)."""
    # lazy: keeps `fdb --help` fast; loaded when the command runs
    from judges import judge_repeat, resolve_judge
    from judges.console import RichProgress, print_summary
    from reports.v15_tree import cohort_dir

    configure_logging(log_level)
    console, settings = _console(), load_settings()
    cohorts = parse_trees(tree)
    source = reference_source or settings.reference_checkout
    choice = resolve_judge(
        judge_config=judge_config,
        base_url=base_url,
        judge_model=judge_model,
        work=settings.work,
        concurrency=concurrency,
        timeout_s=timeout,
        reference_source=source if source.exists() else reference_source,
    )
    if choice.settings is None:
        console.print(f"[yellow]{escape(str(choice.reason))}[/]")
    ok = True
    for engine, folder in cohorts:
        console.print(f"[bold]{escape(engine)}[/]: {escape(str(folder))}")
        with RichProgress(console) as progress:
            summary = judge_repeat(
                cohort_dir(out, engine),
                choice.settings,
                retry_failed=retry_failed,
                progress=progress,
                pending_reason=choice.reason,
                v15_tree=folder,
                only=only or None,
                limit=limit,
            )
        print_summary(console, summary)
        behavior = summary.behavior
        left = (
            behavior.all.outcomes.get("pending", 0)
            if behavior and behavior.status not in ("blocked", "pending")
            else 0
        )
        if limit is not None and left:
            console.print(
                f"{escape(engine)}: {left} pair(s) still pending after --limit {limit}: rerun to "
                "continue"
            )
        ok &= summary.ok
    if not ok:
        console.print("rerun with --retry-failed after fixing the cause")
        raise SystemExit(1)


def summarize(
    tree: list[str] = typer.Option(..., help=TREE_HELP),
    out: Path = typer.Option(..., help=OUT_HELP),
    only: list[str] = typer.Option(None, help=ONLY_HELP + " Give the same --only as to timing."),
    dataset_root: Path | None = typer.Option(
        None,
        help="The v1.5 dataset the trees were exported from: its "
        "category sizes are the `declared` counts. Default: the run's "
        "dataset for a run's repeat-N/reference-audio, else n/a.",
    ),
) -> None:
    """Read each cohort's tree and phase outputs (never the audio) and write OUT/summary.json:
    populations (declared, selected, eligible), protocol verdicts, ineligibility reasons, ASR and
    timing coverage, every pair not evaluated with its reason, and the timing and judge summaries
    as written. Each pair not evaluated is named on one line."""
    # lazy: keeps `fdb --help` fast; loaded when the command runs
    from reports.v15_tree import summarize_cohort, write_scores

    console, cohorts = _console(), []
    for engine, folder in parse_trees(tree):
        declared, note = declared_for(folder, dataset_root, "v1.5")
        cohort = summarize_cohort(engine, folder, out, only or None, declared, note)
        for sample_id, why in cohort.not_evaluated.items():
            console.print(
                f"[yellow]{escape(engine)}[/]: {escape(sample_id)} not evaluated: {escape(why)}"
            )
        if note:
            console.print(f"{escape(engine)}: {escape(note)}")
        cohorts.append(cohort)
    write_scores(out, cohorts)
    console.print(f"wrote {out / 'summary.json'}")


def report(
    scores: Path = typer.Option(
        ..., help="The --out directory of `score v15 summarize` (its summary.json)."
    ),
    engine: list[str] = typer.Option(
        None, help="Report only this cohort (repeatable); default: every cohort."
    ),
    semantic_summary: Path | None = typer.Option(
        None,
        help="A semantic judge's summary.json (semantic-<name>/) to "
        "add as a table; needs a single --engine.",
    ),
    replay: Path | None = typer.Option(
        None,
        help='replay.json, offline replay agreement to add: {"selected": N, '
        '"replayed": M, "samples": [{"sample": "category/id", "variant": "overlap", '
        '"recorded_status": "pass", "status": "match"}]}; needs a single --engine.',
    ),
) -> None:
    """Write SCORES/report.txt from SCORES/summary.json alone (no audio, GPU or key) and print it:
    per cohort the populations, protocol verdicts, ASR and timing coverage, the pairs not
    evaluated, then the v1.5 tables of RESULTS.md (timing with bootstrap 95% intervals, behavior
    label distribution with Wilson 95% intervals, semantic quality). --semantic-summary and
    --replay add those files' tables to a single cohort's report."""
    # lazy: keeps `fdb --help` fast; loaded when the command runs
    from reports.v15_tree import write_report

    path, text = write_report(scores, engine or None, replay, semantic_summary)
    print(text, end="", flush=True)
    _console().print(f"wrote {path}")


v15_app.command(
    "timing", short_help="Silero VAD timing of each cohort (stop and response latency)."
)(timing)
v15_app.command(
    "judge",
    short_help="Behavior labels and semantic grades of each cohort (the `fdb judge` machinery).",
)(judge)
v15_app.command(
    "summarize", short_help="OUT/summary.json: coverage, timing and judge summaries per cohort."
)(summarize)
v15_app.command("report", short_help="report.txt from summary.json: coverage and the v1.5 tables.")(
    report
)
