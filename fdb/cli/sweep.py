"""`python -m fdb sweep`: serving capacity, one concurrency level after another."""

from __future__ import annotations

from pathlib import Path

import click
import typer
from rich.console import Console
from typer.core import TyperGroup

from fdb.errors import FdbError
from runs.sweep_args import help_text as record_help
from runs.sweep_args import parse_record_options


class _RunByDefault(TyperGroup):
    """`sweep --concurrency … --output …` (options first, no subcommand) means `sweep run …`."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0].startswith("-") and args[0] not in ("--help", "-h"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


sweep_app = typer.Typer(
    cls=_RunByDefault,
    help=(
        "Serving capacity: how many sessions one server keeps up with in real time, measured at "
        "the client. `sweep --concurrency 1,2,4,8 --output DIR -- RECORD OPTIONS` (the same as "
        "`sweep run …`) records the same cohort at each level (each level in a fresh client "
        "process, against --url or the bundled server) and writes DIR/concurrency-N/, "
        "DIR/serving.json, DIR/SERVING.md and DIR/serving.png; `sweep report` builds the same "
        "from levels already recorded. A level meets the targets with no failed session, no 503, "
        "no pacing violation and a unit miss of at most 1% (native profiles) or a reply RTF p90 "
        "below 1 (turn-based); the capacity is the highest level below the first that misses."
    ),
    no_args_is_help=True,
    add_completion=False,
)


@sweep_app.command(
    "run",
    short_help="Record each level in turn, then write serving.json, SERVING.md and serving.png.",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    epilog="Record options (after --; every level records with them):\n\n" + record_help(),
)
def run(
    ctx: typer.Context,
    output: Path = typer.Option(
        ...,
        help="Sweep directory: concurrency-N/ per level, serving.json, SERVING.md, serving.png.",
    ),
    concurrency: str | None = typer.Option(
        None, help="Rising levels, e.g. 1,2,4,8 (default): sessions recorded at once."
    ),
    dataset: str = typer.Option(
        "v1.5", help="v1.5 (two sessions per pair) or v1.0 (one per sample)."
    ),
    search: bool = typer.Option(
        False,
        help="Find the capacity instead of listing levels: double from 1 until a level misses, "
        "then bisect.",
    ),
    max_concurrency: int = typer.Option(64, help="--search: the highest level it may record."),
    repeats: int = typer.Option(
        1,
        help="Record every level this many times (concurrency-N/repeat-K/); a level meets the "
        "targets only if every repeat does.",
    ),
    playback_reserve_ms: float = typer.Option(
        80.0, help="Startup buffer of the simulated player: a reply needing more underruns."
    ),
) -> None:
    """Record each --concurrency level in turn (a fresh client process per level and repeat; failed
    sessions are part of the result, so the sweep goes on), then write serving.json, SERVING.md and
    serving.png with one row per level, the capacity line, the targets and warnings (levels above
    the server's max_sessions, levels limited by the load generator), and print the table. Times are
    client-side. Before the first level it asks the server what it is (GET
    /v1/realtime/capabilities, /v1/models, /health; missing ones give nulls, never a failure) and
    records that, with --server-revision, --model-revision and --dataset-revision, in each
    level.json, serving.json and SERVING.md's header. Options after -- go to every level's
    recording (see below)."""
    # lazy: keeps `fdb --help` fast; loaded when the command runs
    from runs.sweep import SweepOptions, parse_levels, sweep

    if search and concurrency is not None:
        raise FdbError("--search finds the levels itself", "drop --concurrency, or drop --search")
    if repeats < 1 or max_concurrency < 1:
        raise FdbError(
            "--repeats and --max-concurrency must be at least 1",
            "e.g. --repeats 3 --max-concurrency 32",
        )
    levels = parse_levels(
        "1,2,4,8" if concurrency is None else concurrency
    )  # --concurrency '' is refused
    opts = SweepOptions(
        output=output,
        concurrency=levels,
        dataset=_dataset(dataset),
        record=parse_record_options(ctx.args),
        playback_reserve_ms=playback_reserve_ms,
        repeats=repeats,
        search=search,
        max_concurrency=max_concurrency,
    )
    sweep(opts, Console(stderr=True))


@sweep_app.command(
    "report", short_help="Build serving.json, SERVING.md and serving.png from recorded levels."
)
def report(
    run_dir: list[Path] = typer.Option(
        ..., "--run", help="A recorded level directory, e.g. DIR/concurrency-4 (repeatable)."
    ),
    output: Path = typer.Option(
        ..., help="serving.json to write; SERVING.md and serving.png go next to it."
    ),
    playback_reserve_ms: float = typer.Option(
        80.0, help="Startup buffer of the simulated player: a reply needing more underruns."
    ),
) -> None:
    """Build serving.json, SERVING.md and serving.png from levels already recorded (by `sweep run`
    or any recording whose directory is named concurrency-N or holds a level.json; repeat-K/
    folders inside a level are its repeats), and print the table."""
    # lazy: keeps `fdb --help` fast; loaded when the command runs
    from runs.sweep import report as build
    from runs.sweep import summary_table

    data = build(run_dir, output, playback_reserve_ms)
    console = Console(stderr=True)
    console.print(summary_table(data))
    for line in data["warnings"]:
        console.print(f"[yellow]WARNING[/]: {line}")


def _dataset(name: str) -> str:
    if name not in ("v1.5", "v1.0"):
        raise FdbError(
            f"--dataset {name!r} is not v1.5 or v1.0", "pass --dataset v1.5 or --dataset v1.0"
        )
    return name


def register(app: typer.Typer) -> None:
    app.add_typer(
        sweep_app,
        name="sweep",
        short_help="Serving capacity sweep: sessions a server keeps up with, per concurrency "
        "level.",
    )
