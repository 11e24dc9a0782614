"""`python -m fdb setup`: prepare $FDB_WORK (synthetic datasets, dataset revisions)."""

from __future__ import annotations

import typer


def setup(
    force: bool = typer.Option(False, help="Regenerate the synthetic datasets even if they are complete."),
) -> None:
    """Prepare $FDB_WORK: write fdb's deterministic synthetic FDB v1.0/v1.5 datasets to
    $FDB_WORK/dataset/synthetic (Piper voice, license-free), record their revisions, and report
    which official datasets are installed at $FDB_WORK/dataset/v1.0 and v1.5. Safe to rerun:
    finished steps are skipped.
    """
    from rich.console import Console

    from fdb.settings import load_settings
    from runs.datasets import describe_datasets, prepare_synthetic

    console = Console(stderr=True)
    settings = load_settings()
    root = prepare_synthetic(settings, force=force, console=console)
    console.print(f"synthetic datasets: {root}")
    for line in describe_datasets(settings):
        console.print(line)


def register(app: typer.Typer) -> None:
    app.command("setup", short_help="Prepare $FDB_WORK: synthetic datasets and dataset revisions.")(setup)
