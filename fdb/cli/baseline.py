"""`python -m fdb baseline freeze`: keep a baseline's values without its audio."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

baseline_app = typer.Typer(help="Frozen baselines for `fdb gate`.", no_args_is_help=True)


@baseline_app.command("freeze")
def freeze(
    source: str = typer.Argument(..., help="A run dir or name, a sweep or tts-bench output."),
    out: Path = typer.Option(
        ..., help="The frozen baseline file to write (JSON, schema fdb-baseline-1)."
    ),
) -> None:
    """Write the per-sample and per-level values a gate needs, their comparability keys (dataset
    revision and selection, scoring backends, definitions) and a content hash, so the baseline
    survives without the audio. `fdb gate --baseline FILE` checks the hash before it reads it."""
    # lazy: keeps `fdb --help` fast; loaded when the command runs
    from reports.baseline import freeze as freeze_source

    console = Console(stderr=True)
    with console.status(f"reading {source} …"):
        frozen = freeze_source(source, out)
    samples = sum(len(s.samples) or len(s.values) for s in frozen.series.values())
    console.print(
        f"froze {frozen.kind} output {frozen.source}: {len(frozen.series)} series, {samples} "
        f"values, sha256 {frozen.content_sha256[:12]}…"
    )
    console.print(f"wrote {out}")


def register(app: typer.Typer) -> None:
    app.add_typer(baseline_app, name="baseline", short_help="Freeze a baseline for `fdb gate`.")
