"""`python -m fdb sweep`: serving capacity, one concurrency level after another."""

from __future__ import annotations

from pathlib import Path

import typer

sweep_app = typer.Typer(
    help=(
        "Serving capacity: how many sessions one server keeps up with in real time, measured at the "
        "client. `sweep run` records the same cohort at each --concurrency level (each level in a fresh "
        "client process, against --url or the bundled server) and writes DIR/concurrency-N/, "
        "DIR/serving.json and DIR/SERVING.md; `sweep report` builds the same table from levels already "
        "recorded. A level meets the targets with no failed session, no 503, no pacing violation and a "
        "unit miss of at most 1% (native profiles) or a reply RTF p90 below 1 (turn-based); the capacity "
        "is the highest level below the first that misses."
    ),
    no_args_is_help=True,
    add_completion=False,
)


@sweep_app.command("run", short_help="Record each level in turn, then write serving.json and SERVING.md.")
def run(
    output: Path = typer.Option(..., help="Sweep directory: concurrency-N/ per level, serving.json, SERVING.md."),
    concurrency: str = typer.Option("1,2,4,8", help="Rising levels, e.g. 1,2,4,8: sessions recorded at once."),
    dataset: str = typer.Option("v1.5", help="v1.5 (two sessions per pair) or v1.0 (one per sample)."),
    url: str | None = typer.Option(None, help="ws://HOST:PORT/v1/realtime of your server (max_sessions at least the top level); without it the bundled server is started."),
    per_subset: str | None = typer.Option(None, help="Samples per subset/category, first N in id order (default 12); 'all'."),
    sample_id: list[str] = typer.Option([], help="NAME/ID: record exactly these samples (repeatable)."),
    dataset_root: Path | None = typer.Option(None, help="Dataset tree (default the official one under $FDB_WORK, else the synthetic set)."),
    profile: str = typer.Option("turn-based", help="Protocol dialect: turn-based (the bundled server), minicpmo-native-pr2377, ..."),
    turn_detection: str | None = typer.Option(None, help='Turn detection JSON for turn-based/legacy profiles (default {"type": "server_vad", "silence_duration_ms": 500}).'),
    model: str | None = typer.Option(None, help="Model name sent in session.update."),
    system: str = typer.Option("embedded-cascade", help="Bundled system to start when --url is not given."),
    playback_reserve_ms: float = typer.Option(80.0, help="Startup buffer of the simulated player: a reply needing more underruns."),
) -> None:
    """Record each --concurrency level in turn (a fresh client process per level; failed sessions
    are part of the result, so the sweep goes on), then write serving.json and SERVING.md with one
    row per level, the capacity line and the targets, and print the table. Times are client-side."""
    from rich.console import Console

    from runs.options import DatasetChoice, parse_turn_detection
    from runs.sweep import SweepOptions, parse_levels, sweep

    opts = SweepOptions(
        output=output, concurrency=parse_levels(concurrency), dataset=_dataset(dataset), url=url, system=system,
        choice=DatasetChoice(per_subset=per_subset, sample_ids=sample_id), dataset_root=dataset_root,
        profile=profile, turn_detection=parse_turn_detection(turn_detection, profile), model=model,
        playback_reserve_ms=playback_reserve_ms,
    )
    sweep(opts, Console(stderr=True))


@sweep_app.command("report", short_help="Build serving.json and SERVING.md from recorded levels.")
def report(
    run_dir: list[Path] = typer.Option(..., "--run", help="A recorded level directory, e.g. DIR/concurrency-4 (repeatable)."),
    output: Path = typer.Option(..., help="serving.json to write; SERVING.md goes next to it."),
    playback_reserve_ms: float = typer.Option(80.0, help="Startup buffer of the simulated player: a reply needing more underruns."),
) -> None:
    """Build serving.json and SERVING.md from levels already recorded (by `sweep run` or any
    recording whose directory is named concurrency-N or holds a level.json), and print the table."""
    from rich.console import Console

    from runs.sweep import report as build
    from runs.sweep import summary_table

    data = build(run_dir, output, playback_reserve_ms)
    Console(stderr=True).print(summary_table(data))


def _dataset(name: str) -> str:
    from fdb.errors import FdbError

    if name not in ("v1.5", "v1.0"):
        raise FdbError(f"--dataset {name!r} is not v1.5 or v1.0", "pass --dataset v1.5 or --dataset v1.0")
    return name


def register(app: typer.Typer) -> None:
    app.add_typer(sweep_app, name="sweep",
                  short_help="Serving capacity sweep: sessions a server keeps up with, per concurrency level.")
