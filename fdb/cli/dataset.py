"""`python -m fdb dataset synth`: write fdb's deterministic synthetic datasets."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from fdb.settings import load_settings

dataset_app = typer.Typer(
    help=(
        "Datasets: `synth` writes fdb's deterministic synthetic Full-Duplex-Bench v1.0/v1.5 trees "
        "and a Seed-TTS-format list (official trees are linked and checked by `python -m fdb "
        "setup`)."
    ),
    no_args_is_help=True,
)


@dataset_app.command("synth")
def synth(
    out: Path | None = typer.Option(
        None,
        help="Where to write (default $FDB_WORK/dataset/synthetic, which runs use when no official "
        "tree is installed). An existing synthetic dataset there is replaced; a directory "
        "holding anything else is refused.",
    ),
    v10_per_subset: int = typer.Option(
        3,
        help="Samples per v1.0 subset (all five: synthetic_pause_handling, candor_pause_handling, "
        "candor_turn_taking, synthetic_user_interruption, icc_backchannel).",
    ),
    v15_per_category: int = typer.Option(
        2,
        help="Pairs per v1.5 category (user_interruption, user_backchannel, talking_to_other, "
        "background_speech).",
    ),
    seedtts_rows: int = typer.Option(
        8, help="Rows of seedtts/en/meta.lst (odd rows carry a ground-truth wav)."
    ),
    count: list[str] = typer.Option(
        [],
        help="NAME=N: the size of one part, NAME a v1.0 subset, a v1.5 category or seedtts "
        "(repeatable), e.g. icc_backchannel=1.",
    ),
    seed: int = typer.Option(
        20250617,
        help="Seed of the per-sample draws (pause lengths, gaps, monologue lengths). The same seed "
        "and sizes give the same bytes.",
    ),
) -> None:
    """Write fdb's synthetic datasets: FDB v1.0 (all five subsets, with pause.json,
    turn_taking.json, interrupt.json + context.wav/interrupt.wav, transcription.json), FDB v1.5
    (all four categories: input.wav, clean_input.wav, metadata.json) and seedtts/en/meta.lst with
    prompt and ground-truth wavs. Utterances are fixed English sentences spoken by Piper (the joe
    voice and two voices derived from it); every annotation is a measured speech edge that
    Silero VAD agrees with. Byte-deterministic for a given seed and sizes; a larger set extends a
    smaller one. Revisions read fdb-synth-<hash>: smoke tests only, never official numbers.
    The default size takes well under a minute on 2 CPU cores.
    """
    # lazy: keeps `fdb --help` fast; loaded when the command runs
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from fdb.datasets.synthetic import SynthSizes, install_synthetic

    console = Console(stderr=True)
    sizes = SynthSizes.build(v10_per_subset, v15_per_category, seedtts_rows, count)
    dest = out if out is not None else load_settings().dataset_dir / "synthetic"
    columns = (
        TextColumn("[bold]synthesizing"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[last]}"),
    )
    with Progress(*columns, console=console, transient=False) as bar:
        task = bar.add_task("synth", total=sizes.total(), last="")
        report = install_synthetic(
            dest,
            sizes=sizes,
            seed=seed,
            progress=lambda label: bar.update(task, advance=1, last=label),
        )
    _summary(report, console)


def _summary(report, console) -> None:
    table = Table(
        title=f"synthetic dataset {report.root} (seed {report.seed}, {report.elapsed_s:.1f} s)"
    )
    for column, justify in (("part", "left"), ("samples", "right"), ("audio s", "right")):
        table.add_column(column, justify=justify)
    for key, count in report.samples.items():
        table.add_row(key, str(count), f"{report.input_seconds[key]:.1f}")
    console.print(table)
    for tree, revision in report.revisions.items():
        console.print(f"{tree}: revision {revision}")


def register(app: typer.Typer) -> None:
    app.add_typer(
        dataset_app, name="dataset", short_help="Write fdb's synthetic datasets (dataset synth)."
    )
