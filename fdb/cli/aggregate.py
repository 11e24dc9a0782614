"""`python -m fdb aggregate`: combine a run's repeats into RESULTS.md."""

from __future__ import annotations

import typer


def aggregate(
    run_name: str = typer.Option(..., help="The run: $FDB_WORK/runs/RUN_NAME."),
    quiet: bool = typer.Option(False, help="Write RESULTS.md without printing its tables."),
) -> None:
    """Read the scored repeats of a run (never the audio) and write
    $FDB_WORK/runs/RUN_NAME/RESULTS.md and results.json: the v1.5 timing table (mean ±
    standard deviation over repeats), the unified v1.0 tables per repeat with their intervals
    and denominators, the official-rule v1.0 reference table, and the transcripts of the
    replies. Missing values are shown as n/a or `not measured`, never as zero.
    """
    from rich.console import Console

    from runs.phases import run_aggregate

    run_aggregate(run_name, Console(stderr=True), show=not quiet)


def register(app: typer.Typer) -> None:
    app.command("aggregate", short_help="Combine a run's scored repeats into RESULTS.md and results.json.")(aggregate)
