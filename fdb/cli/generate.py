"""`python -m fdb generate`: record one repeat (and, with --all-stages, score and report it)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from fdb.cli import configure_logging
from fdb.dialects import dialects_help
from fdb.session_settings import session_settings
from runs.options import DatasetChoice, GenerateOptions, parse_turn_detection, revision_option


def generate(
    run_name: str = typer.Option(..., help="Name of the run: $FDB_WORK/runs/RUN_NAME."),
    repeat: int = typer.Option(
        1, help="Names the output directory repeat-N/; one command runs once."
    ),
    v15_per_subset: str | None = typer.Option(
        None,
        help="v1.5 pairs per category, first N in numeric id order (default 12); 'all'; 0 leaves "
        "v1.5 out.",
    ),
    v10_per_subset: str | None = typer.Option(
        None,
        help="v1.0 samples per subset, first N in numeric id order (default 12); 'all'; 0 leaves "
        "v1.0 out.",
    ),
    v15_subset_count: list[str] = typer.Option(
        [], help="NAME=N: override the count of one v1.5 category (repeatable)."
    ),
    v10_subset_count: list[str] = typer.Option(
        [], help="NAME=N: override the count of one v1.0 subset (repeatable)."
    ),
    v15_sample_id: list[str] = typer.Option(
        [], help="NAME/ID: record exactly these v1.5 pairs (repeatable)."
    ),
    v10_sample_id: list[str] = typer.Option(
        [], help="NAME/ID: record exactly these v1.0 samples (repeatable)."
    ),
    v15_sample_ids_file: Path | None = typer.Option(
        None,
        help="File with one v1.5 NAME/ID per line, e.g. another run's repeat-1/sample-ids.txt.",
    ),
    v10_sample_ids_file: Path | None = typer.Option(
        None, help="File with one v1.0 NAME/ID per line, e.g. repeat-1/v10/sample-ids.txt."
    ),
    url: str | None = typer.Option(
        None,
        help="ws://HOST:PORT/v1/realtime of your own server; without it generate starts the "
        "bundled one.",
    ),
    model: str | None = typer.Option(
        None, help="Model name sent in session.update (must match the server's)."
    ),
    system: str = typer.Option(
        "embedded-cascade", help="Bundled system to start when --url is not given."
    ),
    profile: str = typer.Option(
        "turn-based", help=f"Protocol dialect of the server: {dialects_help()}."
    ),
    turn_detection: str | None = typer.Option(
        None,
        help="Turn detection JSON sent in session.update: required by turn-based and legacy "
        'profiles (default {"type": "server_vad", "silence_duration_ms": 500}), refused by '
        "native ones.",
    ),
    instructions: str | None = typer.Option(
        None,
        help="Role prompt sent as instructions in the first session.update (replaces the "
        "deployment's); recorded in run.json.",
    ),
    voice: str | None = typer.Option(
        None,
        help="Voice sent as sglang.voice: one of the voices the server lists in "
        "/v1/realtime/capabilities (an unknown one is the server's error); session-protocol "
        "profiles only.",
    ),
    sampling: str | None = typer.Option(
        None,
        help='Sampling sent as sglang.sampling, a JSON object, e.g. \'{"temperature": 0.7, '
        '"top_k": 50}\'; fields the server does not list in sampling_parameters are its '
        "error; unset fields keep its defaults.",
    ),
    reference_audio: Path | None = typer.Option(
        None,
        help="Voice recording sent as sglang.reference_audio (a PCM16 WAV of at most 30 s and 1 "
        "MiB, base64 on the wire); run.json records its path and sha256.",
    ),
    num_shards: int = typer.Option(
        1,
        help="Sessions recorded at once (they share the server: latencies are measured under "
        "load); refused beyond the servers' max_sessions.",
    ),
    gpus: str | None = typer.Option(
        None,
        help="GPU indices, e.g. 0,1: one bundled model server per GPU on port 8097 + 10 x GPU; "
        "shard i records on server i mod n. Needs at least as many shards.",
    ),
    v15_dataset_root: Path | None = typer.Option(
        None,
        help="v1.5 tree (default $FDB_DATASET, $FDB_WORK/dataset/v1.5, else the synthetic set).",
    ),
    v10_dataset_root: Path | None = typer.Option(
        None,
        help="v1.0 tree (default $FDB10_DATASET, $FDB_WORK/dataset/v1.0, else the synthetic set).",
    ),
    server_revision: str | None = typer.Option(
        None,
        help="Source revision of the server recorded against (e.g. $(git rev-parse HEAD) of its "
        "checkout): recorded as given in run.json and RESULTS.md's header; a later repeat "
        "with another one is refused.",
    ),
    model_revision: str | None = typer.Option(
        None,
        help="Revision of the model the server serves (e.g. the Hugging Face snapshot 503e754): "
        "recorded as given, like --server-revision.",
    ),
    dataset_revision: str | None = typer.Option(
        None,
        help="Revision label of the dataset(s) (e.g. $(cat $FDB_WORK/dataset/v1.5.revision)): "
        "recorded as given beside the revision fdb reads from the tree's .revision file or "
        "hashes; a label, not a content pin (the run pins each selected file's sha256).",
    ),
    v15_dataset_revision: str | None = typer.Option(
        None, help="--dataset-revision for v1.5 only (wins over --dataset-revision)."
    ),
    v10_dataset_revision: str | None = typer.Option(
        None, help="--dataset-revision for v1.0 only (wins over --dataset-revision)."
    ),
    all_stages: bool = typer.Option(
        False, help="Continue with asr, judge and aggregate after recording."
    ),
    accept_revision: str | None = typer.Option(
        None,
        help="With --all-stages: accept the Full-Duplex-Bench checkout "
        "($FDB_WORK/Full-Duplex-Bench) at this git revision although its files "
        "differ from the pinned 3e799c4 (a clean git checkout of exactly that "
        "revision); the evaluator and judge outputs record it with each "
        "differing file.",
    ),
    log_level: str = typer.Option(
        "warning",
        help="debug, info, warning or error; debug prints the server and recorder logs prefixed by "
        "their name.",
    ),
    export_only: bool = typer.Option(
        False,
        help="Record nothing: cut the windows again from this repeat's finished recording (after "
        "generate was killed or failed during export). Selection and shards come from the run "
        "manifest.",
    ),
) -> None:
    """Record a repeat of a run: select samples, start the model server it needs (or use
    --url, which is checked first: it must open a realtime session), stream every selected input
    to /v1/realtime in real time (80 ms packets; two sessions per v1.5 pair, one per v1.0
    sample), stop the server, and cut the observation windows. Before recording it asks the
    server what it is (GET /v1/realtime/capabilities, /v1/models, /health; a server without them
    gives nulls, never a failure) and records that, with the declared --server-revision,
    --model-revision and --dataset-revision, in run.json, repeat-N/server.json and RESULTS.md's
    header. With no official dataset
    installed it uses fdb's synthetic datasets (created on demand). Refuses a repeat that
    already holds a recording; --export-only cuts the windows again from a finished recording
    whose export was interrupted. Exits 1 when a selected session failed (the export still
    counts it; --all-stages then stops), 2 on an error that recorded nothing.
    """
    # lazy: keeps `fdb --help` fast; loaded when the command runs
    from runs.generate import generate as run_generate

    configure_logging(log_level)
    console = Console(stderr=True)
    if export_only:
        # lazy: keeps `fdb --help` fast; loaded when the command runs
        from runs.generate import export_recorded

        _after_recording(
            export_recorded(run_name, repeat, console), all_stages, console, accept_revision
        )
        return
    opts = GenerateOptions(
        run_name=run_name,
        repeat=repeat,
        v15=DatasetChoice(
            per_subset=v15_per_subset,
            subset_counts=v15_subset_count,
            sample_ids=v15_sample_id,
            sample_ids_file=v15_sample_ids_file,
        ),
        v10=DatasetChoice(
            per_subset=v10_per_subset,
            subset_counts=v10_subset_count,
            sample_ids=v10_sample_id,
            sample_ids_file=v10_sample_ids_file,
        ),
        url=url,
        model=model,
        system=system,
        profile=profile,
        turn_detection=parse_turn_detection(turn_detection, profile),
        session=session_settings(profile, instructions, voice, sampling, reference_audio),
        num_shards=num_shards,
        gpus=gpus,
        all_stages=all_stages,
        log_level=log_level,
        v15_root=v15_dataset_root,
        v10_root=v10_dataset_root,
        server_revision=revision_option(server_revision, "--server-revision"),
        model_revision=revision_option(model_revision, "--model-revision"),
        dataset_revision=revision_option(dataset_revision, "--dataset-revision"),
        v15_dataset_revision=revision_option(v15_dataset_revision, "--v15-dataset-revision"),
        v10_dataset_revision=revision_option(v10_dataset_revision, "--v10-dataset-revision"),
    )
    _after_recording(run_generate(opts, console), all_stages, console, accept_revision)


def _after_recording(
    outcome, all_stages: bool, console, accept_revision: str | None = None
) -> None:
    """Exit 1 when a selected session failed (the export is written all the same, failures
    counted); --all-stages then stops before asr. Otherwise continue with --all-stages."""
    # lazy: keeps `fdb --help` fast; loaded when the command runs
    from runs.phases import run_all_stages, stopped_after_recording

    if not outcome.ok:
        stopped_after_recording(outcome, all_stages, console)
        raise SystemExit(1)
    if all_stages and not run_all_stages(
        outcome.run_name, outcome.repeat, console, accept_revision
    ):
        raise SystemExit(1)


def register(app: typer.Typer) -> None:
    app.command(
        "generate",
        short_help="Record a repeat against a server (bundled or --url); --all-stages also scores "
        "and reports.",
    )(generate)
