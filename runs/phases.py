"""The scoring phases of a repeat (`asr`) and the aggregation (`aggregate`)."""

from __future__ import annotations

import traceback
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from fdb.errors import FdbError
from fdb.settings import load_settings
from runs.layout import RepeatPaths, RunPaths
from runs.manifest import load_manifest


def _run(run_name: str) -> RunPaths:
    run = RunPaths.of(load_settings().runs_dir, run_name)
    if not run.root.is_dir():
        raise FdbError(f"no run named {run_name} under {run.root.parent}",
                       "check --run-name, FDB_WORK, or record it first with `python -m fdb generate`")
    return run


def _declared(run: RunPaths, dataset: str) -> dict[str, int] | None:
    """Subset sizes of the dataset the run recorded from (the `declared` counts)."""
    from fdb.datasets.official import list_ids

    manifest = load_manifest(run)
    use = manifest.datasets.get(dataset) if manifest else None
    if use is None or not Path(use.root).is_dir():
        return None
    return {name: len(ids) for name, ids in list_ids(Path(use.root), dataset).items()}


class _bar:
    """A rich progress bar whose tick(sample_id, done, total) the scorers call."""

    def __init__(self, label: str, console: Console):
        columns = (TextColumn(f"[bold]{label}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   TextColumn("{task.fields[last]}"))
        self._progress = Progress(*columns, console=console)

    def __enter__(self):
        self._progress.__enter__()
        task = self._progress.add_task("work", total=None, last="")

        def tick(sample_id: str, done: int, total: int) -> None:
            self._progress.update(task, completed=done, total=total, last=sample_id)

        return tick

    def __exit__(self, *exc) -> None:
        self._progress.__exit__(*exc)


def _v10_asr(rep: RepeatPaths, console: Console, retry_failed: bool) -> dict:
    from scorers.asr_phase import default_asr, run_v10_asr

    asr = default_asr()  # Whisper tiny.en with its VAD filter: better word starts after silence
    with _bar("v1.0 ASR", console) as tick:
        receipt = run_v10_asr(rep.v10_reference, asr, progress=tick, retry_failed=retry_failed)
    counts: dict[str, int] = {}
    for entry in receipt.samples:
        counts[entry.status] = counts.get(entry.status, 0) + 1
        if entry.status == "failed":
            console.print(f"  [yellow]{entry.sample_id}[/]: ASR failed: {entry.error}")
    return counts


def _icc_ground_truth(run: RunPaths) -> Path | None:
    """The ICC backchannel ground truth from the user's Full-Duplex-Bench checkout, if any.

    None for a run on fdb's synthetic v1.0 set: its monologues are not the ICC conversations, so a
    JSD against the official distribution would be meaningless (the scorer then reports null).
    """
    import os

    manifest = load_manifest(run)
    use = manifest.datasets.get("v1.0") if manifest else None
    if use is not None and use.source == "synthetic":
        return None

    explicit = os.environ.get("FDB_ICC_GT")
    if explicit:
        return Path(explicit)
    checkout = load_settings().work / "Full-Duplex-Bench"
    return checkout if checkout.is_dir() else None


def _v10_scores(run: RunPaths, rep: RepeatPaths, console: Console) -> None:
    from scorers.v10_official import score_official
    from scorers.v10_unified import score_unified

    unified = score_unified(rep.v10_reference, declared=_declared(run, "v1.0"))
    for name, subset in unified.subsets.items():
        c = subset.counts
        console.print(f"  unified {name}: selected {c.selected}, eligible {c.eligible}")
    official = score_official(rep.v10_reference, icc_gt=_icc_ground_truth(run))
    for name, subset in official.subsets.items():
        console.print(f"  official-rule {name}: takeover {subset.takeover_rate}, latency {subset.latency_s}")


def _v15_asr(rep: RepeatPaths, console: Console, retry_failed: bool) -> None:
    from scorers.asr_phase import default_asr
    from scorers.asr_v15 import run_v15_asr

    with _bar("v1.5 ASR", console) as tick:
        receipt = run_v15_asr(rep.reference_audio, default_asr(), progress=tick, retry_failed=retry_failed)
    statuses: dict[str, int] = {}
    for pair in receipt.samples:
        statuses[pair.status] = statuses.get(pair.status, 0) + 1
        if pair.status == "failed":
            console.print(f"  [yellow]{pair.sample_id}[/]: ASR failed: {pair.error}")
    console.print(f"v1.5 ASR: {dict(sorted(statuses.items()))}")


def _v15_timing(rep: RepeatPaths, console: Console) -> None:
    from scorers.v15_timing import score_v15_timing

    summary = score_v15_timing(rep.reference_audio, out=rep.scores)
    overall = summary.categories.get("all")
    if overall is not None:
        console.print(f"  v1.5 timing: {overall.timed_overlap_sessions} timed overlap sessions of "
                      f"{overall.pairs} pairs")


def _step(name: str, fn, console: Console, rerun: str) -> bool:
    try:
        fn()
        return True
    except FdbError as exc:
        console.print(f"[red]WARNING[/]: {name} failed: {exc.one_line()}")
    except Exception:  # a phase failure must not hide the other dataset's results
        console.print(f"[red]WARNING[/]: {name} failed:\n{traceback.format_exc()}")
    console.print(f"  fix the cause, then rerun: {rerun}")
    return False


def run_asr(run_name: str, repeat: int, console: Console, retry_failed: bool = False) -> bool:
    """Transcribe and score one repeat. Returns True when every step succeeded."""
    run = _run(run_name)
    rep = run.repeat(repeat)
    rerun = f"python -m fdb asr --run-name {run_name} --repeat {repeat}"
    has_v10 = (rep.v10_reference / "manifest.json").exists()
    has_v15 = (rep.reference_audio / "reference-manifest.json").exists()
    if not (has_v10 or has_v15):
        raise FdbError(f"{rep.root} has no exported recording (no v10/reference/manifest.json or "
                       "reference-audio/reference-manifest.json)",
                       "generate it first, or delete the repeat and generate it again")
    ok = True
    if has_v10:
        counts: dict[str, int] = {}
        ok &= _step("the v1.0 ASR", lambda: counts.update(_v10_asr(rep, console, retry_failed)), console, rerun)
        console.print(f"v1.0 ASR: {counts}")
        if counts:
            ok &= _step("v1.0 unified scoring", lambda: _v10_scores(run, rep, console), console, rerun)
    if has_v15:
        ok &= _step("v1.5 timing", lambda: _v15_timing(rep, console), console, rerun)
        ok &= _step("the v1.5 ASR", lambda: _v15_asr(rep, console, retry_failed), console, rerun)
    return ok


def run_judge(run_name: str, repeat: int, console: Console) -> bool:
    """The judge step of --all-stages, with the judge the environment configures (JUDGE,
    JUDGE_CONFIG / JUDGE_URL, OPENAI_API_KEY); without one every label stays `pending`."""
    from judges import judge_repeat, resolve_judge
    from judges.console import RichProgress, print_summary

    run = _run(run_name)
    rep = run.repeat(repeat)
    settings = load_settings()
    checkout = settings.work / "Full-Duplex-Bench"
    choice = resolve_judge(work=settings.work, reference_source=checkout if checkout.exists() else None)
    if choice.settings is None:
        console.print(f"judge: {choice.reason}")
    with RichProgress(console) as progress:
        summary = judge_repeat(rep.root, choice.settings, progress=progress, pending_reason=choice.reason)
    print_summary(console, summary)
    if not summary.ok:
        console.print(f"rerun: python -m fdb judge --run-name {run_name} --repeat {repeat} --retry-failed")
    return summary.ok


def run_aggregate(run_name: str, console: Console, show: bool = True) -> Path:
    from reports.headline import headline
    from reports.results import write_results

    run = _run(run_name)
    _, data = write_results(run)
    if show:
        print(headline(run, data), flush=True)
    else:
        console.print(f"RESULTS.md: {run.results_md}")
    return run.results_md
