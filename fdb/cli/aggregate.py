"""`python -m fdb aggregate`: combine a run's repeats into RESULTS.md."""

from __future__ import annotations

import typer
from rich.console import Console

from fdb.errors import FdbError
from fdb.settings import load_settings


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
    # lazy: keeps `fdb --help` fast; loaded when the command runs
    from runs.phases import run_aggregate

    _check_run(run_name)
    run_aggregate(run_name, Console(stderr=True), show=not quiet)


def _check_run(run_name: str) -> None:
    """Refuse, with the file and the fix, what would otherwise give a traceback or an empty
    RESULTS.md: a damaged run.json, a directory with neither run.json nor any repeat."""
    # lazy: keeps `fdb --help` fast; loaded when the command runs
    from fdb.layout import RunPaths
    from fdb.run_manifest import load_manifest

    run = RunPaths.of(load_settings().runs_dir, run_name)
    if not run.root.is_dir():
        return  # run_aggregate names the missing run
    manifest = load_manifest(run)
    if manifest is None and not run.repeats():
        raise FdbError(
            f"{run.root} holds neither run.json nor a repeat-N/: nothing to aggregate",
            f"record a repeat first: python -m fdb generate --run-name {run_name}",
        )


def register(app: typer.Typer) -> None:
    app.command(
        "aggregate", short_help="Combine a run's scored repeats into RESULTS.md and results.json."
    )(aggregate)
