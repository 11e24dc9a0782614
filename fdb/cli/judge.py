"""`python -m fdb judge`: LLM judges for a recorded, transcribed repeat."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from fdb.cli import configure_logging
from fdb.errors import FdbError
from fdb.settings import load_settings


def judge(
    run_name: str = typer.Option(..., help="The run: $FDB_WORK/runs/RUN_NAME."),
    repeat: int = typer.Option(1, help="Which repeat-N/ to judge."),
    base_url: str = typer.Option(
        None,
        help="The judge's OpenAI-compatible endpoint, e.g. http://127.0.0.1:30000/v1 "
        "(default: JUDGE_URL with a judge config, else OPENAI_BASE_URL, else OpenAI).",
    ),
    judge_model: str = typer.Option(
        None,
        help="Model for an OpenAI-compatible judge without a judge config "
        "(JUDGE=gpt: gpt-4o-2024-08-06 for labels, gpt-4-turbo for relevance). Its key "
        "is read from OPENAI_API_KEY only.",
    ),
    judge_config: Path = typer.Option(
        None,
        help="Judge config JSON of a self-hosted judge (model and tokenizer "
        "revisions, served model, precision, decoding, seeds, launch receipt and its "
        "sha256); default JUDGE_CONFIG or $FDB_WORK/judge/port-$JUDGE_PORT/"
        "judge-config.json. Its key is read from CUSTOM_JUDGE_API_KEY.",
    ),
    reference_source: Path = typer.Option(
        None,
        help="Full-Duplex-Bench checkout (default $FDB_WORK/"
        "Full-Duplex-Bench when present): the behavior prompt and the official "
        "interruption prompt are read from it and hash-checked, and its v1.0 "
        "evaluator is run (python of SCORING_VENV when set).",
    ),
    accept_revision: str = typer.Option(
        None,
        help="Accept a --reference-source checkout whose files differ "
        "from the pinned 3e799c4: the git revision it is at (a clean git checkout "
        "of exactly that revision). The outputs record it with each differing file.",
    ),
    retry_failed: bool = typer.Option(
        False,
        help="Send again the samples whose requests failed (transport or "
        "parse); wrong models and invalid labels stay as they are.",
    ),
    concurrency: int = typer.Option(16, min=1, max=1024, help="Requests in flight at most."),
    timeout: float = typer.Option(
        120.0, min=0.1, help="Seconds per request before it counts as failed."
    ),
    log_level: str = typer.Option("warning", help="debug, info, warning or error."),
) -> None:
    """With a Full-Duplex-Bench checkout, first run its original v1.0 evaluator on the LLM-free
    subsets (evaluator.json, logs/evaluate-<subset>.log). Then label the v1.5 pairs (official
    behavior prompt; seeds 1-3, at most three attempts; shares with Wilson 95% intervals), grade
    them with fdb's semantic judge behind its six-control gate (self-hosted judge only), and rate
    the v1.0 interruption replies (official prompt with --reference-source, else fdb's own rubric;
    at most three identical requests). Every exchange is appended to a ledger; a rerun skips
    finished samples. Without a judge, labels and ratings stay pending and the counts are still
    written to repeat-N/judge.json.
    """
    _judge(
        run_name,
        repeat,
        base_url,
        judge_model,
        judge_config,
        reference_source,
        accept_revision,
        retry_failed,
        concurrency,
        timeout,
        log_level,
    )


def _judge(
    run_name: str,
    repeat: int,
    base_url: str | None,
    judge_model: str | None,
    judge_config: Path | None,
    reference_source: Path | None,
    accept_revision: str | None,
    retry_failed: bool,
    concurrency: int,
    timeout: float,
    log_level: str,
) -> None:
    # lazy: keeps `fdb --help` fast; loaded when the command runs
    from fdb.layout import RunPaths
    from judges import judge_repeat, resolve_judge
    from judges.console import RichProgress, print_summary
    from runs.phases import run_v10_evaluator

    configure_logging(log_level)
    console = Console(stderr=True)
    settings = load_settings()
    run = RunPaths.of(settings.runs_dir, run_name)
    rep = run.repeat(repeat)
    if not rep.root.is_dir():
        raise FdbError(
            f"no {rep.root}",
            "check --run-name, --repeat and FDB_WORK, or record it first with `python -m fdb "
            "generate`",
        )
    source = reference_source or settings.reference_checkout
    evaluated = run_v10_evaluator(
        rep, source if source.exists() else None, accept_revision, console
    )
    choice = resolve_judge(
        judge_config=judge_config,
        base_url=base_url,
        judge_model=judge_model,
        work=settings.work,
        concurrency=concurrency,
        timeout_s=timeout,
        accept_revision=accept_revision,
        reference_source=source if source.exists() else reference_source,
    )
    if choice.settings is None:
        console.print(f"[yellow]{choice.reason}[/]")
    with RichProgress(console) as progress:
        summary = judge_repeat(
            rep.root,
            choice.settings,
            retry_failed=retry_failed,
            progress=progress,
            pending_reason=choice.reason,
        )
    print_summary(console, summary)
    if not (summary.ok and evaluated):
        console.print(
            f"rerun: python -m fdb judge --run-name {run_name} --repeat {repeat} --retry-failed "
            "(after fixing the cause)"
        )
        raise SystemExit(1)  # not typer.Exit: fdb.cli.main runs click with standalone_mode=False


def register(app: typer.Typer) -> None:
    app.command(
        "judge",
        short_help="LLM judges: v1.5 behavior labels, semantic grades, v1.0 interruption "
        "relevance.",
    )(judge)
