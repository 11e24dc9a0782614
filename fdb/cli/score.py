"""`python -m fdb score`: score an existing export tree without a run directory.

- ``score v10 --tree DIR``: unified v1.0 metrics and the official-rule reference numbers of a
  transcribed v1.0 reference tree, printed per subset with value, interval and count. ``declared``
  is the dataset's subset size, from the same source as the run path (the run's run.json when the
  tree is a run's ``repeat-N/v10/reference``) or ``--dataset-root``; null when neither is known.
  A sample the unified loader rejects (e.g. an interruption transcript not cut at R) stops the
  unified metrics with its name, but official.json is still written, that sample left out;
- ``score v15 timing|judge|summarize|report``: v1.5 scoring of reference-audio exports
  (fdb/cli/score_v15.py);
- ``score transcribe --tree DIR``: the ASR phase of a v1.0 or v1.5 export with any of the three
  backends (embedded faster-whisper, NeMo Parakeet from a local checkpoint, an OpenAI-compatible
  endpoint).
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from fdb.cli.declared import declared_for
from fdb.cli.score_v15 import v15_app
from fdb.errors import FdbError, SampleError

score_app = typer.Typer(
    name="score",
    no_args_is_help=True,
    add_completion=False,
    help="Score (or transcribe) an existing export tree: `score v10`, `score v15 "
    "timing|judge|summarize|report`, `score transcribe`.",
)

NA = "n/a"


def _num(value) -> str:
    if value is None:
        return NA
    if value == "not_reached":
        return "not reached"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return str(value)
    return f"{value:.3f}"


def _interval(pair) -> str:
    return NA if pair is None else f"[{_num(pair[0])}, {_num(pair[1])}]"


def metric_rows(metrics) -> list[tuple[str, str, str, str, str]]:
    """(metric, value, 95% interval, count, all-selected bounds) for every field of a metrics
    record."""
    # lazy: keeps `fdb --help` fast; loaded when the command runs
    from fdb.records.v10 import LatencyQuantiles, PooledRatio, Share

    rows = []
    for name in type(metrics).model_fields:
        value = getattr(metrics, name)
        if name == "task":
            continue
        if isinstance(value, Share):
            rows.append(
                (
                    name,
                    _num(value.value),
                    _interval(value.wilson95),
                    f"{value.count}/{value.n}",
                    _interval(value.selected_bounds),
                )
            )
        elif isinstance(value, PooledRatio):
            rows.append(
                (
                    name,
                    _num(value.value),
                    _interval(value.bootstrap95),
                    f"{value.numerator:g}/{value.denominator:g}",
                    "",
                )
            )
        elif isinstance(value, LatencyQuantiles):
            count = f"{value.observed}/{value.n} observed"
            rows.append(
                (
                    f"{name} median",
                    _num(value.median_s),
                    _interval(value.median_bootstrap95),
                    count,
                    "",
                )
            )
            rows.append((f"{name} p90", _num(value.p90_s), "", count, ""))
        else:
            rows.append((name, _num(value), "", "", ""))
    return rows


METRIC_FIELDS = {
    "takeover rate": "takeover_rate",
    "latency (s)": "latency_s",
    "backchannel frequency (1/s)": "backchannel_frequency",
    "backchannel JSD": "backchannel_jsd",
}


def _evaluator_value(result: dict, metric: str) -> str:
    # lazy: keeps `fdb --help` fast; loaded when the command runs
    from fdb.records.v10_reference import evaluator_metric

    return _num(evaluator_metric(result, METRIC_FIELDS[metric]))


def reference_rows(official, evaluated) -> list[tuple[str, ...]]:
    """Rows of the reference table of one subset: clean-room official rules, original evaluator."""
    rows = []
    task = official.task if official is not None else None
    metrics = ["takeover rate"] + (
        ["latency (s)"] if task in ("turn_taking", "user_interruption") else []
    )
    if task == "backchannel":
        metrics += ["backchannel frequency (1/s)", "backchannel JSD"]
    values = {}
    if official is not None:
        values = {
            "takeover rate": official.takeover_rate,
            "latency (s)": official.latency_s,
            "backchannel frequency (1/s)": official.backchannel_frequency,
            "backchannel JSD": official.backchannel_jsd,
        }
    for metric in metrics:
        row = [metric, _num(values.get(metric))]
        if evaluated is not None:
            row.append(
                _evaluator_value(evaluated.result, metric)
                if evaluated.status == "ok"
                else evaluated.status
            )
        rows.append(tuple(row))
    return rows


def _subset_title(subset: str, result) -> str:
    c = result.counts
    extra = f", exercised {c.exercised}" if c.exercised is not None else ""
    coverage = NA if result.coverage is None else f"{result.coverage:.3f}"
    return (
        f"{subset} ({result.task}): declared {_num(c.declared)}, selected {c.selected}, eligible "
        f"{c.eligible}{extra}, coverage {coverage}"
    )


def print_v10(console, unified, columns, notes: tuple[str, ...] = ()) -> None:
    """Each subset's unified metrics (``unified`` None: not scored), then its reference column(s),
    then the notes."""
    # lazy: keeps `fdb --help` fast; loaded when the command runs
    from scorers.v10_tree import subset_key

    official = columns.official.subsets if columns.official else {}
    evaluator = columns.evaluator.subsets if columns.evaluator else {}
    scored = unified.subsets if unified is not None else {}
    not_scored = unified.not_scored if unified is not None else {}
    for subset in sorted(set(scored) | set(official), key=subset_key):
        if subset in scored:
            result = scored[subset]
            console.print(f"[bold]{_subset_title(subset, result)}[/]")
            table = Table()
            for head in ("metric", "value", "95% interval", "count", "all-selected bounds"):
                table.add_column(head)
            for row in metric_rows(result.metrics):
                table.add_row(*row)
            console.print(table)
        elif subset in not_scored:
            console.print(f"[bold]{subset}[/]: {not_scored[subset]}")
        if subset in official:
            _print_reference(
                console,
                subset,
                official[subset],
                evaluator.get(subset),
                columns.evaluator.revision_label() if columns.evaluator else "",
            )
    for note in (*notes, *columns.notes):
        console.print(f"[yellow]{note}[/]")


def _print_reference(console, subset: str, official, evaluated, revision: str) -> None:
    o = official
    console.print(
        f"{subset} official-rule reference: selected {o.selected}, eligible {o.eligible}, "
        f"evaluated {o.evaluated}"
    )
    table = Table()
    table.add_column("official metric")
    table.add_column("official rules (clean-room)")
    if evaluated is not None:
        table.add_column(f"original evaluator ({revision})")
    for row in reference_rows(official, evaluated):
        table.add_row(*row)
    console.print(table)
    if o.note:
        console.print(f"  note: {o.note}")


def v10(
    tree: Path = typer.Option(
        ...,
        help="A transcribed v1.0 reference tree (manifest.json, asr.json, "
        "<subset>/<id>/output.wav, output.json and annotations).",
    ),
    dataset_root: Path | None = typer.Option(
        None,
        help="The v1.0 dataset the tree was exported from: its subset "
        "sizes are the `declared` counts. Default: the run's dataset when "
        "the tree is a run's repeat-N/v10/reference, else declared is n/a.",
    ),
    reference_source: Path | None = typer.Option(
        None,
        help="A Full-Duplex-Bench checkout at 3e799c4: its file "
        "hashes are verified, its ICC ground truth is used, and its "
        "evaluator is run on the LLM-free subsets (evaluator.json).",
    ),
    accept_revision: str | None = typer.Option(
        None,
        help="Accept a --reference-source checkout whose files differ "
        "from the pinned 3e799c4: the git revision it is at (it must be a "
        "clean git checkout of exactly that revision). evaluator.json "
        "records it with each differing file.",
    ),
    icc_gt: Path | None = typer.Option(
        None,
        help="icc_gt_distribution.json (or a checkout holding it) for the "
        "backchannel JSD; without it (or --reference-source) the JSD is n/a.",
    ),
    backchannel_rule: str = typer.Option(
        "since-2026-02-22",
        help="since-2026-02-22 (current official code) or "
        "before-2026-02-22 (the rule of the README rows of 2025-06-05).",
    ),
    backchannel_audio: str = typer.Option(
        "assume-16k",
        help="assume-16k (official: Silero takes every file for "
        "16 kHz) or resample (resample other rates to 16 kHz first).",
    ),
    reference_python: str | None = typer.Option(
        None,
        help="Python interpreter with the evaluator's packages "
        "(silero_vad, torchaudio, ...); default: this one.",
    ),
    official: bool = typer.Option(
        True,
        help="Also recompute official.json (--no-official shows the existing one "
        "when it matches the inputs).",
    ),
) -> None:
    """Score a transcribed v1.0 tree: write unified.json and unified-samples.jsonl (the unified
    metrics, Silero VAD for interruption) and official.json (the official rules, clean-room:
    takeover, clamped latency, backchannel TOR / frequency / JSD), then print each subset's
    metrics with value, 95% interval (Wilson for shares, bootstrap for ratios and the median),
    count and the bounds over all selected samples, followed by the official-rule reference
    column. With --reference-source the original evaluator's numbers are printed next to it.
    Reference files computed from another manifest.json or asr.json are left out with a line
    saying which input changed. `declared` is the dataset's subset size (--dataset-root, or the
    run's dataset for a run's tree), n/a when unknown. A sample the unified metrics reject (for
    example an interruption transcript not cut at R) stops them with its name, after official.json
    is written with that sample left out and named. ASR is not run here (see `score transcribe`)."""
    # lazy: keeps `fdb --help` fast; loaded when the command runs
    from fdb.official_source import EVALUATOR_FILES, verify_checkout
    from fdb.records.v10_reference import load_reference
    from scorers.v10_backchannel import BackchannelOptions, load_icc_gt
    from scorers.v10_evaluator import run_evaluator
    from scorers.v10_official import score_official
    from scorers.v10_tree import load_tree
    from scorers.v10_unified import score_unified

    if backchannel_rule not in ("since-2026-02-22", "before-2026-02-22"):
        raise FdbError(
            f"--backchannel-rule {backchannel_rule!r} is unknown",
            "use since-2026-02-22 or before-2026-02-22",
        )
    if backchannel_audio not in ("assume-16k", "resample"):
        raise FdbError(
            f"--backchannel-audio {backchannel_audio!r} is unknown", "use assume-16k or resample"
        )
    options = BackchannelOptions(rule=backchannel_rule, audio_rate=backchannel_audio)
    if reference_source is not None:
        verify_checkout(reference_source, EVALUATOR_FILES, accept_revision=accept_revision)
    elif accept_revision is not None:
        raise FdbError(
            "--accept-revision needs --reference-source",
            "pass the checkout whose revision you accept",
        )
    gt = load_icc_gt(icc_gt or reference_source) if (icc_gt or reference_source) else None
    declared, declared_note = declared_for(tree, dataset_root)
    unified, rejected = None, None
    try:
        unified = score_unified(tree, declared=declared)
    except SampleError as exc:  # one sample's bad input: the official rules still run on the others
        rejected = exc
    if official:
        score_official(tree, icc_gt=gt, options=options)
    if reference_source is not None:
        run_evaluator(
            tree, reference_source, python=reference_python, accept_revision=accept_revision
        )
    console = Console(width=None if Console().is_terminal else 150)
    inputs = load_tree(tree)
    print_v10(
        console,
        unified,
        load_reference(tree, inputs.manifest_sha256, inputs.receipt_sha256),
        notes=(declared_note,) if declared_note and unified is not None else (),
    )
    written = (
        [] if unified is None else [tree / "unified.json", tree / "unified-samples.jsonl"]
    ) + ([tree / "official.json"] if official else [])
    if written:
        console.print("wrote " + ", ".join(map(str, written)))
    if rejected is not None:
        raise FdbError(f"unified metrics not written: {rejected.message}", rejected.hint)


def _backend(
    asr: str,
    nemo: Path | None,
    nemo_sha256: str | None,
    device: str,
    asr_url: str | None,
    asr_model: str | None,
    api_key_env: str,
):
    # lazy: keeps `fdb --help` fast; loaded when the command runs
    from fdb.models.scoring import choose, load_backend

    return load_backend(
        "asr",
        choose(
            "asr",
            asr,
            nemo,
            nemo_sha256,
            device=device,
            url=asr_url,
            model=asr_model,
            api_key_env=api_key_env,
        ),
    )


def _refuse_other_model(tree: Path, backend, replace: bool) -> None:
    """A tree transcribed by another model is not silently transcribed over (``--replace`` does)."""
    # lazy: keeps `fdb --help` fast; loaded when the command runs
    from fdb.models.scoring import same_model
    from fdb.records import asr_backend

    receipt = tree / "asr.json"
    old = asr_backend(tree)
    now = backend.identity.model_dump(mode="json")
    if old and not replace and not same_model(old, now):
        raise FdbError(
            f"{receipt} holds transcripts of {old.get('name')}, not of {now['name']}",
            "pass the backend that wrote them, or --replace to transcribe the whole tree again "
            "(a run's repeat: fdb asr --side-by-side keeps both)",
        )


def transcribe(
    tree: Path = typer.Option(
        ...,
        help="A v1.0 reference tree (manifest.json) or a v1.5 reference-audio tree "
        "(reference-manifest.json).",
    ),
    asr: str = typer.Option(
        "faster-whisper", help="faster-whisper (embedded), parakeet or openai-compatible."
    ),
    nemo: Path | None = typer.Option(
        None, help="Parakeet: the local parakeet-tdt-0.6b-v2 .nemo checkpoint."
    ),
    nemo_sha256: str | None = typer.Option(
        None, help="Parakeet: expected sha256 (default: the pinned d99e3995…)."
    ),
    device: str = typer.Option("cpu", help="Parakeet: cpu, or cuda with exactly one visible GPU."),
    asr_url: str | None = typer.Option(None, help="openai-compatible: base URL ending in /v1."),
    asr_model: str | None = typer.Option(
        None, help="openai-compatible: the model name to request."
    ),
    api_key_env: str = typer.Option(
        "OPENAI_API_KEY",
        help="openai-compatible: the environment variable holding "
        "the key (EMPTY for no authentication); the key is never written.",
    ),
    retry_failed: bool = typer.Option(
        False, help="Transcribe again the files whose ASR failed before."
    ),
    replace: bool = typer.Option(
        False,
        help="Transcribe a tree that another ASR model transcribed, replacing "
        "its transcripts (refused without it).",
    ),
) -> None:
    """Transcribe an export tree with word timestamps into the official schema: v1.0 writes
    <subset>/<id>/output.json (interruption cut at R) and asr.json; v1.5 writes input.json,
    clean_input.json, output.json and clean_output.json per pair and asr.json. The receipt
    records the backend identity; finished files are skipped on a rerun. A tree whose asr.json
    another model wrote is refused unless --replace. For a run's repeat, prefer `fdb asr --asr …`,
    which records the choice in run.json and scores everything after the ASR."""
    # lazy: keeps `fdb --help` fast; loaded when the command runs
    from scorers.asr_phase import run_v10_asr
    from scorers.asr_v15 import run_v15_asr

    if (tree / "manifest.json").exists():
        run = run_v10_asr
    elif (tree / "reference-manifest.json").exists():
        run = run_v15_asr
    else:
        raise FdbError(
            f"{tree} holds neither manifest.json (v1.0) nor reference-manifest.json (v1.5)",
            "point --tree at a repeat's v10/reference or reference-audio directory",
        )
    backend = _backend(asr, nemo, nemo_sha256, device, asr_url, asr_model, api_key_env)
    _refuse_other_model(tree, backend, replace)
    console = Console(stderr=True)
    receipt = run(
        tree,
        backend,
        progress=lambda sid, done, total: console.print(f"{done}/{total} {sid}"),
        retry_failed=retry_failed,
    )
    counts: dict[str, int] = {}
    for entry in receipt.samples:
        counts[entry.status] = counts.get(entry.status, 0) + 1
        if entry.status == "failed":
            console.print(f"[yellow]{entry.sample_id}[/]: {entry.error}")
    console.print(f"{backend.identity.name}: {counts}; receipt {tree / 'asr.json'}")
    if counts.get("failed"):
        raise typer.Exit(1)


score_app.command(
    "v10", short_help="Unified v1.0 metrics + official-rule reference of a transcribed tree."
)(v10)
score_app.add_typer(
    v15_app,
    name="v15",
    short_help="v1.5 timing, judge, summary and report.txt of exported "
    "trees (several cohorts with --tree ENGINE=DIR).",
)
score_app.command(
    "transcribe",
    short_help="ASR of a v1.0 or v1.5 export tree (faster-whisper, parakeet, openai-compatible).",
)(transcribe)


def register(app: typer.Typer) -> None:
    app.add_typer(
        score_app,
        name="score",
        short_help="Score an existing export tree (v1.0 unified + official rules, v1.5 timing, "
        "judge and report) or transcribe it.",
    )
