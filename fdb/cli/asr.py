"""`python -m fdb asr`: transcribe and score a recorded repeat."""

from __future__ import annotations

import typer


def asr(
    run_name: str = typer.Option(..., help="The run: $FDB_WORK/runs/RUN_NAME."),
    repeat: int = typer.Option(1, help="Which repeat-N/ to score."),
    retry_failed: bool = typer.Option(False, help="Transcribe again the samples whose ASR failed before."),
    log_level: str = typer.Option("warning", help="debug, info, warning or error."),
) -> None:
    """Transcribe the v1.0 windows with word timestamps (embedded Whisper tiny.en; official
    output.json schema, interruption samples cut at the interruption end), write the unified
    v1.0 metrics (unified.json, unified-samples.jsonl) and the official-rule reference numbers
    (official.json), and time the v1.5 windows with Silero VAD (scores/summary.json). Finished
    samples are skipped on a rerun; a failing step prints the command that continues it.
    """
    from rich.console import Console

    from fdb.cli import configure_logging
    from runs.phases import run_asr

    configure_logging(log_level)
    if not run_asr(run_name, repeat, Console(stderr=True), retry_failed=retry_failed):
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("asr", short_help="Transcribe and score a recorded repeat (v1.0 unified + official rules, v1.5 timing).")(asr)
