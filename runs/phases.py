"""The scoring phases of a repeat (`asr`) and the aggregation (`aggregate`)."""

from __future__ import annotations

import json
import logging
import os
import sys
import traceback
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from fdb.datasets.official import list_ids
from fdb.errors import FdbError, SampleError
from fdb.io import append_debug_log, describe_failure
from fdb.layout import RepeatPaths, RunPaths
from fdb.records.v10_reference import current_reference
from fdb.run_manifest import load_manifest
from fdb.settings import load_settings
from judges import judge_repeat, resolve_judge
from judges.console import RichProgress, print_summary
from reports.headline import headline
from reports.results import write_results
from runs.scoring import choice_flags, prepare
from scorers.asr_phase import run_v10_asr
from scorers.asr_v15 import run_v15_asr
from scorers.listening import score_listening
from scorers.v10_evaluator import run_evaluator
from scorers.v10_official import score_official
from scorers.v10_unified import score_unified
from scorers.v15_timing import score_v15_timing


def _run(run_name: str) -> RunPaths:
    run = RunPaths.of(load_settings().runs_dir, run_name)
    if not run.root.is_dir():
        raise FdbError(
            f"no run named {run_name} under {run.root.parent}",
            "check --run-name, FDB_WORK, or record it first with `python -m fdb generate`",
        )
    return run


def declared_counts(run: RunPaths, dataset: str) -> dict[str, int] | None:
    """Subset sizes of the dataset the run recorded from (the `declared` counts); None when run.json
    names no such dataset or its root is gone (`score v10` uses the same source)."""
    manifest = load_manifest(run)
    use = manifest.datasets.get(dataset) if manifest else None
    if use is None or not Path(use.root).is_dir():
        return None
    return {name: len(ids) for name, ids in list_ids(Path(use.root), dataset).items()}


class _bar:
    """A rich progress bar whose tick(sample_id, done, total) the scorers call."""

    def __init__(self, label: str, console: Console):
        columns = (
            TextColumn(f"[bold]{label}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[last]}"),
        )
        self._progress = Progress(*columns, console=console)

    def __enter__(self):
        self._progress.__enter__()
        task = self._progress.add_task("work", total=None, last="")

        def tick(sample_id: str, done: int, total: int) -> None:
            self._progress.update(task, completed=done, total=total, last=sample_id)

        return tick

    def __exit__(self, *exc) -> None:
        self._progress.__exit__(*exc)


def _v10_asr(tree: Path, asr, console: Console, retry_failed: bool) -> dict:
    with _bar("v1.0 ASR", console) as tick:
        receipt = run_v10_asr(tree, asr, progress=tick, retry_failed=retry_failed)
    counts: dict[str, int] = {}
    transcripts: dict[str, int] = {}
    for entry in receipt.samples:
        counts[entry.status] = counts.get(entry.status, 0) + 1
        if entry.status == "ok":
            subset = entry.sample_id.split("/")[0]
            transcripts[subset] = transcripts.get(subset, 0) + 1
        if entry.status == "failed":
            console.print(
                f"  [yellow]{escape(entry.sample_id)}[/]: ASR failed: {escape(str(entry.error))}"
            )
    _json_line(console, "v1.0 ASR", dict(sorted(counts.items())))
    _json_line(console, "v1.0 transcripts per subset", dict(sorted(transcripts.items())))
    return counts


def _json_line(console: Console, label: str, counts: dict) -> None:
    """A count line in the runbook's format, e.g. `v1.5 ASR: {"ok": 16}`."""
    console.print(f"{label}: {json.dumps(counts)}", markup=False, highlight=False)


def _icc_ground_truth(run: RunPaths) -> Path | None:
    """The ICC backchannel ground truth from the user's Full-Duplex-Bench checkout, if any.

    None for a run on fdb's synthetic v1.0 set: its monologues are not the ICC conversations, so a
    JSD against the official distribution would be meaningless (the scorer then reports null).
    """
    manifest = load_manifest(run)
    use = manifest.datasets.get("v1.0") if manifest else None
    if use is not None and use.source == "synthetic":
        return None

    explicit = os.environ.get("FDB_ICC_GT")
    if explicit:
        return Path(explicit)
    checkout = load_settings().reference_checkout
    return checkout if checkout.is_dir() else None


def _v10_scores(run: RunPaths, tree: Path, console: Console) -> None:
    rejected = None
    try:
        unified = score_unified(tree, declared=declared_counts(run, "v1.0"))
        for name, subset in unified.subsets.items():
            c = subset.counts
            console.print(f"  unified {escape(name)}: selected {c.selected}, eligible {c.eligible}")
    except (
        SampleError
    ) as exc:  # one sample's bad input: official.json is still written (that sample named)
        rejected = exc
    official = score_official(tree, icc_gt=_icc_ground_truth(run))
    for name, subset in official.subsets.items():
        rate = "n/a" if subset.takeover_rate is None else f"{subset.takeover_rate:.3f}"
        latency = "n/a" if subset.latency_s is None else f"{subset.latency_s:.3f} s"
        console.print(f"  official-rule {escape(name)}: takeover {rate}, latency {latency}")
        if subset.not_evaluated:
            console.print(f"    {escape(subset.note or '')}")
    if rejected is not None:
        raise FdbError(f"unified metrics not written: {rejected.message}", rejected.hint)


def _v15_asr(tree: Path, asr, console: Console, retry_failed: bool) -> None:
    with _bar("v1.5 ASR", console) as tick:
        receipt = run_v15_asr(tree, asr, progress=tick, retry_failed=retry_failed)
    statuses: dict[
        str, int
    ] = {}  # per transcribed WAV (four per pair), like the runbook's {"ok": 16}
    for pair in receipt.samples:
        for wav in pair.files.values():
            statuses[wav.status] = statuses.get(wav.status, 0) + 1
        if pair.status == "skipped":
            statuses["skipped"] = statuses.get("skipped", 0) + 1
        if pair.status == "failed":
            console.print(
                f"  [yellow]{escape(pair.sample_id)}[/]: ASR failed: {escape(str(pair.error))}"
            )
    _json_line(console, "v1.5 ASR", dict(sorted(statuses.items())))


def _v15_timing(rep: RepeatPaths, console: Console) -> None:
    summary = score_v15_timing(rep.reference_audio, out=rep.scores)
    overall = summary.categories.get("all")
    if overall is not None:
        sessions = 2 * overall.pairs
        counts = {"ok": sessions - overall.failed_sessions, "failed": overall.failed_sessions}
        _json_line(console, "v1.5 timing sessions", {k: v for k, v in counts.items() if v})
        console.print(
            f"  v1.5 timing: {overall.timed_overlap_sessions} timed overlap sessions of "
            f"{overall.pairs} pairs"
        )


def _step(name: str, fn, console: Console, rerun: str) -> bool:
    try:
        fn()
        return True
    except FdbError as exc:
        console.print(f"[red]WARNING[/]: {name} failed: {escape(exc.one_line())}")
    except Exception as exc:  # a phase failure must not hide the other dataset's results
        text, hint = describe_failure(exc)  # one line; the traceback goes to the debug log
        log = append_debug_log(exc, sys.argv[1:])
        fix = "; ".join(part for part in (hint, f"full traceback: {log}" if log else None) if part)
        if logging.getLogger().isEnabledFor(logging.DEBUG):
            console.print(escape(traceback.format_exc()))
        console.print(
            f"[red]WARNING[/]: {name} failed: {escape(text)}" + (f" ({escape(fix)})" if fix else "")
        )
    console.print(f"  fix the cause, then rerun: {escape(rerun)}")
    return False


def exported(rep: RepeatPaths) -> tuple[bool, bool]:
    """(v1.0, v1.5) exports of a repeat; refuses a recording whose export did not finish."""
    if not rep.root.is_dir():
        raise FdbError(
            f"no {rep.root}", "check --run-name, --repeat and FDB_WORK, or record it with generate"
        )
    found = []
    for recording, manifest in (
        (rep.v10_recording, rep.v10_reference / "manifest.json"),
        (rep.recording, rep.reference_audio / "reference-manifest.json"),
    ):
        recorded = recording.is_dir() and any(recording.rglob("session.json"))
        if recorded and not manifest.exists():
            raise FdbError(
                f"{manifest} is missing: generate recorded that dataset but did not finish its "
                "export",
                f"the recording is kept: cut the windows again with {export_only_command(rep)}, "
                "then rerun asr",
            )
        found.append(manifest.exists())
    if not any(found):
        raise FdbError(
            f"{rep.root} holds no recording",
            f"record it first: python -m fdb generate --run-name {rep.root.parent.name} --repeat "
            f"{rep.number} with the selection options of the run's other repeats",
        )
    return found[0], found[1]


def export_only_command(rep: RepeatPaths) -> str:
    """The command that recovers an interrupted export of ``rep`` byte for byte."""
    return (
        f"python -m fdb generate --run-name {rep.root.parent.name} --repeat {rep.number} "
        "--export-only"
    )


def run_asr(
    run_name: str,
    repeat: int,
    console: Console,
    retry_failed: bool = False,
    asked: dict | None = None,
    side_by_side: bool = False,
    device: str | None = None,
) -> bool:
    """Transcribe and score one repeat with the run's scoring backends (``runs.scoring``: those
    run.json records, else the defaults, or ``asked`` ones side by side). Returns True when every
    step succeeded; a refused backend choice raises FdbError before anything is written."""
    run = _run(run_name)
    rep = run.repeat(repeat)
    has_v10, has_v15 = exported(rep)
    scoring = prepare(run, rep, asked or {}, side_by_side, device)
    target, asr = scoring.target, scoring.backends["asr"]
    rerun = f"python -m fdb asr --run-name {run_name} --repeat {repeat}" + (
        f" --side-by-side {choice_flags(scoring.choice)}" if target.side else ""
    )
    _scoring_line(scoring, console)
    ok = True
    if has_v10:
        counts: dict[str, int] = {}
        tree = target.out.v10_reference
        ok &= _step(
            "the v1.0 ASR",
            lambda: counts.update(_v10_asr(tree, asr, console, retry_failed)),
            console,
            rerun,
        )
        if counts:
            ok &= _step(
                "v1.0 unified scoring", lambda: _v10_scores(run, tree, console), console, rerun
            )
    if has_v15:
        if not target.side:  # Silero VAD timing depends on no scoring backend
            ok &= _step("v1.5 timing", lambda: _v15_timing(rep, console), console, rerun)
        ok &= _step(
            "the v1.5 ASR",
            lambda: _v15_asr(target.out.reference_audio, asr, console, retry_failed),
            console,
            rerun,
        )
    ok &= _step("the listening-quality phase", lambda: _listening(scoring, console), console, rerun)
    return ok


def _scoring_line(scoring, console: Console) -> None:
    names = ", ".join(
        f"{kind} {ident['name'] if ident else 'unavailable'}"
        for kind, ident in ((k, scoring.identity(k)) for k in ("asr", "mos", "speaker"))
    )
    where = (
        f"side by side in {scoring.target.root}"
        if scoring.target.side
        else "the run's (run.json scoring)"
    )
    console.print(f"scoring backends: {escape(names)}; {escape(where)}")


def _listening(scoring, console: Console) -> None:
    """Every reply of the repeat cut, transcribed and scored (omission, WER, MOS, voice)."""
    console.print("listening quality: cutting, transcribing and scoring every reply …")
    b = scoring.backends
    summary = score_listening(
        scoring.target.rep.root,
        asr=b["asr"],
        mos=b["mos"] or False,
        speaker=b["speaker"] or False,
        out=scoring.target.out.listening,
        notes=scoring.notes,
    )
    for dataset, groups in summary.datasets.items():
        overall = groups.get("all")
        if overall is not None:
            console.print(
                f"  listening {escape(dataset)}: {overall.replies} replies, omission "
                f"{_pct(overall.omission_rate)}, WER {_pct(overall.wer)}"
            )
    for note in summary.notes:
        console.print(f"  note: {escape(note)}")


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def reference_checkout() -> Path | None:
    """The user's Full-Duplex-Bench checkout, $FDB_WORK/Full-Duplex-Bench, when it exists."""
    checkout = load_settings().reference_checkout
    return checkout if checkout.exists() else None


def run_v10_evaluator(
    rep: RepeatPaths, checkout: Path | None, accept_revision: str | None, console: Console
) -> bool:
    """The original v1.0 evaluator on the LLM-free subsets of a transcribed repeat (spec: the judge
    step runs it first), when there is a checkout. False when the checkout fails its check; a subset
    that evaluate.py fails is a warning naming its log (a rerun of judge evaluates it again)."""
    if checkout is None or not (rep.v10_reference / "asr.json").exists():
        return True
    done = _evaluated(rep, checkout, accept_revision)
    if done is not None:
        console.print(
            f"v1.0 evaluator: already evaluated with {escape(done.revision_label())} "
            "(evaluator.json)"
        )
        return True
    venv = load_settings().scoring_venv
    try:
        summary = run_evaluator(
            rep.v10_reference,
            checkout,
            python=str(venv / "bin" / "python") if venv else None,
            accept_revision=accept_revision,
        )
    except FdbError as exc:
        console.print(
            f"[red]WARNING[/]: the v1.0 evaluation did not run: {escape(exc.one_line())}",
            soft_wrap=True,
        )
        return False
    console.print(f"v1.0 evaluator: {escape(summary.revision_label())}")
    for name, subset in summary.subsets.items():
        if subset.status == "ok":
            _json_line(console, f"  {name}", subset.result)
        elif subset.status == "failed":
            console.print(
                f"[red]WARNING[/]: the v1.0 evaluation failed for {escape(name)}: "
                f"see {escape(str(subset.log))}"
            )
    return True


def _evaluated(rep: RepeatPaths, checkout: Path, accept_revision: str | None):
    """The repeat's evaluator.json when a rerun would repeat it: computed from the current
    manifest.json and asr.json, from the same checkout and accepted revision, no subset failed."""
    if not (rep.v10_reference / "evaluator.json").exists():
        return None
    columns = current_reference(rep.v10_reference)
    done = columns.evaluator if columns is not None else None
    check = done.checkout_check if done is not None else None
    accepted = check.accepted_revision if check is not None else None
    same_acceptance = (
        accepted is None
        if accept_revision is None
        else bool(accepted and accepted.startswith(accept_revision))
    )
    same = check is not None and check.checkout == str(Path(checkout).resolve()) and same_acceptance
    if not same or any(s.status == "failed" for s in done.subsets.values()):
        return None
    return done


def run_judge(
    run_name: str, repeat: int, console: Console, accept_revision: str | None = None
) -> bool:
    """The judge step of --all-stages: the original v1.0 evaluator (with a checkout), then the judge
    the environment configures (JUDGE, JUDGE_CONFIG / JUDGE_URL, OPENAI_API_KEY); without one every
    label stays `pending`. ``accept_revision``: the checkout revision the user accepted."""
    run = _run(run_name)
    rep = run.repeat(repeat)
    settings = load_settings()
    checkout = reference_checkout()
    evaluated = run_v10_evaluator(rep, checkout, accept_revision, console)
    choice = resolve_judge(
        work=settings.work, reference_source=checkout, accept_revision=accept_revision
    )
    if choice.settings is None:
        console.print(f"judge: {escape(str(choice.reason))}")
    with RichProgress(console) as progress:
        summary = judge_repeat(
            rep.root, choice.settings, progress=progress, pending_reason=choice.reason
        )
    print_summary(console, summary)
    if not summary.ok:
        console.print(
            f"rerun: python -m fdb judge --run-name {run_name} --repeat {repeat} --retry-failed"
        )
    return summary.ok and evaluated


def run_aggregate(run_name: str, console: Console, show: bool = True) -> Path:
    run = _run(run_name)
    _, data = write_results(run)
    if show:
        print(headline(run, data), flush=True)
    else:
        console.print(f"RESULTS.md: {escape(str(run.results_md))}")
    return run.results_md


def continue_commands(
    run_name: str, repeat: int, step: str, accept_revision: str | None = None
) -> list[str]:
    """The commands that continue an --all-stages run stopped at ``step`` (asr or judge)."""
    base = f"--run-name {run_name} --repeat {repeat}"
    accept = f" --accept-revision {accept_revision}" if accept_revision else ""
    steps = {
        "asr": f"python -m fdb asr {base} --retry-failed",
        "judge": f"python -m fdb judge {base} --retry-failed{accept}",
        "aggregate": f"python -m fdb aggregate --run-name {run_name}",
    }
    names = list(steps)
    return [steps[name] for name in names[names.index(step) :]]


def stopped_after_recording(outcome, all_stages: bool, console: Console) -> None:
    """generate's last word when a selected session failed (``runs.generate.Outcome``): the
    failed sessions and how to record the repeat again; --all-stages runs no later step, and
    says how to score the repeat as recorded anyway."""
    console.print(f"[red]ERROR[/]: {escape(outcome.failure_line())}", soft_wrap=True)
    if all_stages:
        commands = " && ".join(continue_commands(outcome.run_name, outcome.repeat, "asr"))
        console.print(
            "--all-stages stopped before asr; to score this repeat as recorded anyway: "
            f"{escape(commands)}",
            soft_wrap=True,
        )


def run_all_stages(
    run_name: str, repeat: int, console: Console, accept_revision: str | None = None
) -> bool:
    """asr, judge and aggregate after generate; stops at the first step that failed and names
    the commands that continue the run. ``accept_revision`` goes to the judge step."""
    steps = (("asr", run_asr), ("judge", lambda *a: run_judge(*a, accept_revision=accept_revision)))
    for step, fn in steps:
        if not fn(run_name, repeat, console):
            console.print(
                f"[red]ERROR[/]: {step} stopped the --all-stages run of {run_name} "
                f"repeat-{repeat}; fix the cause above, then continue with: "
                + escape(" && ".join(continue_commands(run_name, repeat, step, accept_revision))),
                soft_wrap=True,
            )
            return False
    run_aggregate(run_name, console, show=True)
    return True
