"""The record options of a sweep: what each level's recording takes, given after ``--``.

``python -m fdb sweep --concurrency 1,2,4 --output DIR -- --url ws://… --profile … --timeout 60``
hands everything after ``--`` (and any option the sweep itself does not know) to this parser;
every level records with exactly these options. They are checked once, before anything is
recorded, and a bad one is named in the error.
"""

from __future__ import annotations

from pathlib import Path

import click
from pydantic import BaseModel, Field

from fdb.dialects import dialects_help
from fdb.errors import FdbError
from runs.options import DatasetChoice, parse_turn_detection, revision_option

SWEEP_OPTIONS = (
    "--output",
    "--concurrency",
    "--dataset",
    "--search",
    "--max-concurrency",
    "--repeats",
    "--playback-reserve-ms",
)

_OPTIONS = (
    (
        "--url",
        str,
        "ws://HOST:PORT/v1/realtime of your server (max_sessions at least the top level); "
        "without it the bundled server is started with max_sessions raised to the top level.",
    ),
    ("--profile", str, f"Protocol dialect (default turn-based): {dialects_help()}."),
    (
        "--turn-detection",
        str,
        'Turn detection JSON for turn-based/legacy profiles (default {"type": '
        '"server_vad", "silence_duration_ms": 500}); refused by native ones.',
    ),
    ("--model", str, "Model name sent in session.update."),
    ("--instructions", str, "Instructions sent in session.update."),
    (
        "--timeout",
        float,
        "Deadline of each session in seconds (default SESSION_TIMEOUT_S for v1.5, "
        "V10_SESSION_TIMEOUT_S for v1.0).",
    ),
    (
        "--system",
        str,
        "Bundled system to start when --url is not given (default embedded-cascade).",
    ),
    (
        ("--max-per-subset", "--per-subset"),
        str,
        "Samples per subset/category, first N in id order (default 12); "
        "'all'. --per-subset is the same option.",
    ),
    ("--subset-count", str, "NAME=N: the count of one subset/category (repeatable)."),
    ("--sample-id", str, "NAME/ID: record exactly these samples (repeatable)."),
    ("--sample-ids-file", Path, "File with one NAME/ID per line."),
    (
        "--dataset-root",
        Path,
        "Dataset tree (default the official one under $FDB_WORK, else the synthetic set).",
    ),
    (
        "--dataset-revision",
        str,
        "Revision label of the dataset (e.g. $(cat $FDB_WORK/dataset/v1.5.revision)), "
        "recorded as given in each level.json, serving.json and SERVING.md.",
    ),
    (
        "--server-revision",
        str,
        "Source revision of the server (e.g. $(git rev-parse HEAD) of its checkout), "
        "recorded as given.",
    ),
    (
        "--model-revision",
        str,
        "Revision of the served model (e.g. its Hugging Face snapshot), recorded as given.",
    ),
)
_MULTIPLE = {"--subset-count", "--sample-id"}


class RecordOptions(BaseModel):
    """What every level's recording uses (the parsed record options)."""

    url: str | None = None
    profile: str = "turn-based"
    turn_detection: dict | None = None
    model: str | None = None
    instructions: str | None = None
    timeout_s: float | None = None
    system: str = "embedded-cascade"
    choice: DatasetChoice = DatasetChoice()
    dataset_root: Path | None = None
    dataset_revision: str | None = None  # --dataset-revision, as given
    server_revision: str | None = None  # --server-revision, as given
    model_revision: str | None = None  # --model-revision, as given
    args: list[str] = Field(default_factory=list)  # as given, for the level's provenance


def _names(name: str | tuple[str, ...]) -> tuple[str, ...]:
    return (name,) if isinstance(name, str) else name


def _command() -> click.Command:
    params = [
        click.Option(
            list(_names(name)), type=kind, multiple=_names(name)[0] in _MULTIPLE, help=text
        )
        for name, kind, text in _OPTIONS
    ]
    return click.Command("record options", params=params, add_help_option=False)


def help_text() -> str:
    """The record options, one per line, for the sweep's --help."""
    return "\n\n".join(
        f"{' / '.join(_names(name))} {kind.__name__.upper()}: {text}"
        for name, kind, text in _OPTIONS
    )


def parse_record_options(args: list[str]) -> RecordOptions:
    """Parse and check the record options; an unknown or malformed one raises FdbError naming it."""
    try:
        values = _command().make_context("record options", list(args)).params
    except click.NoSuchOption as exc:
        where = (
            "a sweep option: put it before --"
            if exc.option_name in SWEEP_OPTIONS
            else "neither a sweep nor a record option"
        )
        raise FdbError(
            f"{exc.option_name} is {where}",
            "record options: " + ", ".join(n for name, _, _ in _OPTIONS for n in _names(name)),
        ) from None
    except click.UsageError as exc:  # a missing value, a non-number, a stray argument
        raise FdbError(
            f"record options {' '.join(args)!r}: {exc.format_message()}",
            "see `python -m fdb sweep run --help`",
        ) from None
    if values["timeout"] is not None and not values["timeout"] > 0:
        raise FdbError(
            f"--timeout must be positive, got {values['timeout']:g}", "e.g. --timeout 90"
        )
    profile = values["profile"] or "turn-based"
    choice = DatasetChoice(
        per_subset=values["max_per_subset"],
        subset_counts=list(values["subset_count"]),
        sample_ids=list(values["sample_id"]),
        sample_ids_file=values["sample_ids_file"],
    )
    return RecordOptions(
        url=values["url"],
        profile=profile,
        turn_detection=parse_turn_detection(values["turn_detection"], profile),
        model=values["model"],
        instructions=values["instructions"],
        timeout_s=values["timeout"],
        system=values["system"] or "embedded-cascade",
        choice=choice,
        dataset_root=values["dataset_root"],
        dataset_revision=revision_option(values["dataset_revision"], "--dataset-revision"),
        server_revision=revision_option(values["server_revision"], "--server-revision"),
        model_revision=revision_option(values["model_revision"], "--model-revision"),
        args=list(args),
    )
