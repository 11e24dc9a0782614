"""`python -m fdb compare RUN_A RUN_B [RUN_C ...]`: systems side by side, one column each."""

from __future__ import annotations

import re
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from fdb.errors import FdbError
from fdb.settings import load_settings

HELP = (
    "Compare the scored runs of two or more systems. RUN is a run directory (with run.json) or a "
    "run name under $FDB_WORK/runs. Writes OUT/COMPARISON.md, OUT/comparison.json and "
    "OUT/tables/*.csv: the cross-system table (Behavior: v1.5 judge labels per category, "
    "LLM-judge quality, stop/response latency, v1.0 pause intrusion and 2 s turn taking; Serving: "
    "capacity from --sweep; Listening: omission rate, MOS, voice consistency), each cell with its "
    "denominator, `not measured` where a run lacks the data, the mean over repeats where a run "
    "has several, and a sampling-noise note from the actual sample counts. With exactly two runs, "
    "a paired view by sample id follows: the samples whose outcome changed and the paired "
    "differences of latencies and yes/no outcomes, marked where they exceed sampling noise. Runs "
    "on different selections are still compared (a note says so; the paired view uses the ids "
    "both have). Exit 2 on bad input. Guide: docs/comparing.md."
)


def compare(
    runs: list[str] = typer.Argument(
        ..., metavar="RUN_A RUN_B [RUN_C ...]", help="Two or more run directories or run names."
    ),
    names: str | None = typer.Option(
        None, help="Column names, comma-separated, one per run (default: run names)."
    ),
    sweep: list[str] = typer.Option(
        [], help="NAME=DIR: the serving sweep of the system NAME (repeatable)."
    ),
    out: Path | None = typer.Option(
        None, help="Output folder (default $FDB_WORK/comparisons/A-vs-B[-vs-C…])."
    ),
) -> None:
    """Compare runs of several systems."""
    try:
        path, data = _compare(runs, names, sweep, out)
    except FdbError as exc:
        typer.secho(f"ERROR: {exc.one_line()}", fg=typer.colors.RED, err=True)
        raise typer.Exit(2) from None
    _summary(path, data)


def _compare(runs: list[str], names: str | None, sweeps: list[str], out: Path | None):
    # lazy: keeps `fdb --help` fast; loaded when the command runs
    from reports.compare import write_comparison
    from reports.compare_load import load_capacity, load_system, resolve_run

    if len(runs) < 2:
        raise FdbError(
            f"compare needs at least two runs, got {len(runs)}", "pass RUN_A RUN_B [RUN_C …]"
        )
    settings = load_settings()
    roots = [resolve_run(run, settings.runs_dir) for run in runs]
    labels = column_names(names, roots)
    systems = [load_system(label, root) for label, root in zip(labels, roots, strict=True)]
    by_name = {s.name: s for s in systems}
    for name, directory in parse_sweeps(sweeps):
        if name not in by_name:
            raise FdbError(
                f"--sweep {name}={directory}: no system is named {name!r}",
                f"use one of: {', '.join(by_name)} (see --names)",
            )
        load_capacity(by_name[name], directory)
    folder = out or settings.work / "comparisons" / "-vs-".join(_slug(n) for n in labels)
    return write_comparison(systems, folder)


def column_names(names: str | None, roots: list[Path]) -> list[str]:
    if names is None:
        labels = [root.resolve().name for root in roots]
        if len(set(labels)) != len(labels):
            raise FdbError(
                f"the runs share a name ({', '.join(labels)})",
                "name the columns with --names A,B,…",
            )
        return labels
    labels = [n.strip() for n in names.split(",")]
    if len(labels) != len(roots) or not all(labels):
        raise FdbError(
            f"--names gives {len(labels)} name(s) for {len(roots)} runs",
            "pass one non-empty name per run, e.g. --names "
            f"{','.join(f'S{i + 1}' for i in range(len(roots)))}",
        )
    if len(set(labels)) != len(labels):
        raise FdbError(f"--names repeats a name ({names})", "give every run its own name")
    return labels


def parse_sweeps(values: list[str]) -> list[tuple[str, Path]]:
    found = []
    for value in values:
        name, sep, directory = value.partition("=")
        if not sep or not name or not directory:
            raise FdbError(
                f"--sweep {value!r} is not NAME=DIR",
                "e.g. --sweep cascade=$FDB_WORK/sweeps/cascade",
            )
        found.append((name, Path(directory)))
    return found


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)[:60] or "run"


def _summary(path: Path, data: dict) -> None:
    console = Console(stderr=True)
    cross = data["tables"][0]
    table = Table("Metric", *cross["headers"][2:], title="fdb compare")
    for cells in cross["cells"]:
        table.add_row(*cells[1:])
    console.print(table)
    if data["paired"]:
        counts = data["paired"]["counts"]
        beyond = sum(e["verdict"] in ("regressed", "improved") for e in data["paired"]["effects"])
        console.print(
            f"paired view: {counts['changed']} of {counts['paired']} samples changed outcome; "
            f"{beyond} of {len(data['paired']['effects'])} paired differences beyond noise"
        )
    console.print(f"wrote {path}")


def register(app: typer.Typer) -> None:
    app.command("compare", help=HELP, short_help="Compare runs of several systems side by side.")(
        compare
    )
