"""`generate`: select, check --url (or start the bundled server), record, stop it,
export the windows."""

from __future__ import annotations

import asyncio
import json
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from fdb.datasets.official import list_ids, load_v10, load_v15
from fdb.datasets.pinning import read_revision, sample_inventory, tree_revision
from fdb.datasets.selection import (
    SelectionSpec,
    count_by_subset,
    format_ids,
    require_some_selection,
    select,
)
from fdb.dialects import check_bundled_dialect, get_dialect
from fdb.errors import FdbError
from fdb.io import atomic_write_text, redact_url
from fdb.layout import RepeatPaths, RunPaths
from fdb.provenance import current as provenance
from fdb.run_manifest import (
    DatasetUse,
    RepeatServer,
    RunManifest,
    ServerReport,
    ServerUse,
    check_compatible,
    check_files,
    check_same_server,
    load_manifest,
    load_repeat_server,
    save_manifest,
    save_repeat_server,
)
from fdb.session_records import SessionRecord
from fdb.settings import Settings, load_settings
from recorders.batch import SessionJob, record_many
from recorders.eventloop import run as run_loop
from recorders.export import export_v10, export_v15
from runs.datasets import DatasetTree, resolve_tree
from runs.gpus import check_capacity, parse_gpus, plan_servers, shard_server
from runs.logstream import RecordLog
from runs.options import DatasetChoice, GenerateOptions
from runs.server import ServerFleet
from runs.server_probe import describe, probe_server
from runs.urlcheck import check_url

V15_VARIANTS = (("overlap", "input_wav"), ("clean", "clean_input_wav"))


@dataclass
class Selected:
    dataset: str
    tree: DatasetTree
    spec: SelectionSpec
    ids: list[str]
    samples: list = field(default_factory=list)  # V10Sample | V15Pair, in id order
    problems: list[str] = field(default_factory=list)
    revision: str | None = None
    files: dict[str, str] = field(default_factory=dict)  # pinned inventory of the selected samples


def _spec(dataset: str, choice: DatasetChoice) -> SelectionSpec:
    return SelectionSpec.from_options(
        dataset, choice.per_subset, choice.subset_counts, choice.sample_ids, choice.sample_ids_file
    )


def _revision(tree: DatasetTree) -> str:
    stored = read_revision(tree.root.parent / f"{tree.root.name}.revision")
    return stored or tree_revision(tree.root)


def select_dataset(
    dataset: str, choice: DatasetChoice, root: Path | None, settings: Settings, console: Console
) -> Selected | None:
    spec = _spec(dataset, choice)
    if spec.leaves_out:
        return None
    tree = resolve_tree(dataset, settings, root, console)
    ids = select(spec, list_ids(tree.root, dataset, spec.subsets_to_load()))
    loader = load_v10 if dataset == "v1.0" else load_v15
    deadline = settings.session_timeout_s if dataset == "v1.5" else settings.v10_session_timeout_s
    loaded, problems = loader(
        tree.root, sorted({i.split("/")[0] for i in ids}), strict=False, max_input_s=deadline
    )
    by_id = {s.sample_id: s for group in loaded.values() for s in group}
    chosen = Selected(
        dataset, tree, spec, ids, revision=_revision(tree), files=sample_inventory(tree.root, ids)
    )
    bad = {p.sample_id: p for p in problems}
    for sample_id in ids:
        if sample_id in by_id:
            chosen.samples.append(by_id[sample_id])
        elif sample_id in bad:
            chosen.problems.append(bad[sample_id].one_line())
    return chosen


def _jobs(
    sel: Selected, rep: RepeatPaths, urls: list[str], opts: GenerateOptions, timeout_s: float
) -> list:
    """Session jobs in id order; sample k goes to shard k mod --num-shards,
    shard i to server i mod n."""
    base = rep.recording if sel.dataset == "v1.5" else rep.v10_recording
    jobs = []
    for index, sample in enumerate(sel.samples):
        shard_index = index % opts.num_shards
        url = urls[shard_server(shard_index, len(urls))]
        variants = V15_VARIANTS if sel.dataset == "v1.5" else (("main", "input_wav"),)
        for variant, attr in variants:
            jobs.append(
                SessionJob(
                    url=url,
                    audio=getattr(sample, attr),
                    out_dir=base / f"shard-{shard_index}" / sample.sample_id / variant,
                    sample_id=sample.sample_id,
                    variant=variant,
                    profile=opts.profile,
                    turn_detection=opts.turn_detection,
                    model=opts.model,
                    settings=opts.session,
                    timeout_s=timeout_s,
                    extra_meta={
                        "dataset": sel.dataset,
                        "dataset_source": sel.tree.source,
                        "shard": shard_index,
                    },
                )
            )
    return jobs


def _record_logs(rep: RepeatPaths, opts: GenerateOptions) -> dict[tuple[str, int], RecordLog]:
    debug = opts.log_level.lower() == "debug"
    logs = {}
    for dataset, directory in (("v1.5", rep.logs), ("v1.0", rep.v10_logs)):
        for shard in range(opts.num_shards):
            logs[(dataset, shard)] = RecordLog(directory, shard, echo=debug)
    return logs


def _record(
    jobs: list, opts: GenerateOptions, rep: RepeatPaths, console: Console, fleet: ServerFleet | None
) -> list:
    """Record every shard at once, each shard one session at a time (shard i on server i mod n)."""
    logs = _record_logs(rep, opts)
    columns = (
        TextColumn("[bold]recording"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[last]}"),
    )
    shards: dict[int, list] = {}
    for job in jobs:
        shards.setdefault(job.extra_meta["shard"], []).append(job)
    with Progress(*columns, console=console, transient=False) as bar:
        task = bar.add_task("sessions", total=len(jobs), last="")
        finished = [0]

        def tick(_done: int, _total: int, record) -> None:
            finished[0] += 1
            verdict = record.verdict.status if record.status == "ok" else record.status
            logs[(record.extra["dataset"], record.extra["shard"])].write(
                f"{record.sample_id} [{record.variant}] {record.status} {verdict} "
                f"{record.failure or ''}"
            )
            bar.update(
                task,
                completed=finished[0],
                last=f"{record.sample_id} [{record.variant}] {record.status}",
            )
            if fleet is not None:
                fleet.check_alive()

        async def all_shards() -> list:
            parts = await asyncio.gather(
                *(record_many(shards[k], concurrency=1, progress=tick) for k in sorted(shards))
            )
            return [record for part in parts for record in part]

        return run_loop(all_shards())


def _export(sel: Selected, rep: RepeatPaths, num_shards: int):
    if sel.dataset == "v1.5":
        shards = [rep.recording / f"shard-{k}" for k in range(num_shards)]
        return export_v15(shards, sel.samples, rep.reference_audio, dataset_revision=sel.revision)
    shards = [rep.v10_recording / f"shard-{k}" for k in range(num_shards)]
    return export_v10(shards, sel.samples, rep.v10_reference, dataset_revision=sel.revision)


def _manifest(opts: GenerateOptions, selections: list[Selected], settings: Settings) -> RunManifest:
    return RunManifest(
        run_name=opts.run_name,
        datasets={
            s.dataset: DatasetUse(
                dataset=s.dataset,
                root=str(s.tree.root),
                source=s.tree.source,
                revision=s.revision,
                declared_revision=opts.declared_revision(s.dataset),
                selection=s.spec.normalized(),
                sample_ids=s.ids,
                files=s.files,
            )
            for s in selections
        },
        server=ServerUse(
            url=redact_url(opts.url) if opts.url else None,
            system=None if opts.url else opts.system,
            model=opts.model,
            turn_detection=opts.turn_detection,
            profile=opts.profile,
            session=opts.session,
            server_revision=opts.server_revision,
            model_revision=opts.model_revision,
        ),
        num_shards=opts.num_shards,
        gpus=len(opts.gpus.split(",")) if opts.gpus else 1,
        judge=settings.judge,
        settings=settings.recorded(),
        provenance=provenance().model_dump(mode="json"),
    )


def with_report(manifest: RunManifest, report: ServerReport | None) -> RunManifest:
    """The manifest with what the server reported: ``reported``, and ``system`` / ``model`` where
    the options left them open."""
    if report is None:
        return manifest
    server = manifest.server.model_copy(
        update={
            "reported": report,
            "system": manifest.server.system or report.system,
            "model": manifest.server.model or report.model,
        }
    )
    return manifest.model_copy(update={"server": server})


def _probe(url: str, opts: GenerateOptions) -> ServerReport:
    return probe_server(url, headers=dict(get_dialect(opts.profile).client.headers))


def _prepare(
    opts: GenerateOptions, settings: Settings, console: Console
) -> tuple[RunPaths, RepeatPaths, list[Selected]]:
    """Check everything that can be checked before a repeat is spent (options, selection, the
    run's earlier repeats, the --url server), then write the run manifest and the selection."""
    run = RunPaths.of(settings.runs_dir, opts.run_name)
    rep = run.repeat(opts.repeat)
    if rep.holds_recording():
        raise FdbError(
            f"{rep.root} already holds a recording",
            "use the next --repeat, or delete the directory to redo it "
            "(--export-only cuts the windows again when only the export was interrupted)",
        )
    if opts.num_shards < 1:
        raise FdbError(f"--num-shards {opts.num_shards} is not allowed", "use 1 or more shards")
    if opts.url and opts.gpus:
        raise FdbError(
            "--gpus starts bundled model servers, but --url names your own server",
            "drop --gpus, or drop --url to let generate start one server per GPU",
        )
    if not opts.url:
        check_bundled_dialect(opts.system, opts.profile)
    v15 = select_dataset("v1.5", opts.v15, opts.v15_root, settings, console)
    v10 = select_dataset("v1.0", opts.v10, opts.v10_root, settings, console)
    require_some_selection(v10.ids if v10 else [], v15.ids if v15 else [])
    selections = [s for s in (v15, v10) if s is not None]
    manifest = _manifest(opts, selections, settings)
    previous = load_manifest(run)
    if previous is not None:
        check_compatible(previous, manifest, rep)
    _warn_declared(selections, opts, console)
    report = None
    if opts.url:  # a typo or a dead server costs nothing: checked before anything is written
        check_url(opts.url, opts.profile)
        report = _probe(opts.url, opts)
        if previous is not None:
            check_same_server(previous, report)
    if previous is None:
        save_manifest(run, with_report(manifest, report))
    rep.root.mkdir(parents=True, exist_ok=True)
    atomic_write_text(rep.sample_ids, format_ids(v15.ids) if v15 else "")
    if v10:
        atomic_write_text(rep.v10_sample_ids, format_ids(v10.ids))
    if report is not None:
        save_repeat_server(
            rep,
            RepeatServer(
                server_revision=opts.server_revision,
                model_revision=opts.model_revision,
                servers=[report],
            ),
        )
    return run, rep, selections


def _warn_declared(selections: list[Selected], opts: GenerateOptions, console: Console) -> None:
    """A declared dataset revision that contradicts the tree's own .revision file is recorded as
    given, with a warning: the label is the user's, the file is what the tree says."""
    for sel in selections:
        declared = opts.declared_revision(sel.dataset)
        stored = read_revision(sel.tree.root.parent / f"{sel.tree.root.name}.revision")
        if declared and stored and declared != stored:
            console.print(
                f"[yellow]WARNING[/]: --dataset-revision {escape(declared)} for {sel.dataset} "
                f"differs from {escape(str(sel.tree.root))}.revision ({escape(stored)}); "
                "both are recorded in run.json"
            )


def _print_selection(selections: list[Selected], console: Console) -> None:
    for sel in selections:
        counts = ", ".join(f"{k}: {v}" for k, v in count_by_subset(sel.ids).items())
        console.print(
            escape(
                f"{sel.dataset} ({sel.tree.source}, {sel.tree.root}): "
                f"{len(sel.ids)} selected — {counts}"
            )
        )
        for problem in sel.problems:  # dataset text: [brackets] in it are not rich markup
            console.print(
                f"[yellow]WARNING[/]: not recorded, the dataset sample is broken: {escape(problem)}"
            )


def generate(opts: GenerateOptions, console: Console | None = None) -> Outcome:
    """Record one repeat and export it (the summary is printed). A call that fails before it
    recorded a session leaves the run as it found it (``_Before``)."""
    console = console or Console(stderr=True)
    settings = load_settings()
    plans = None if opts.url else plan_servers(parse_gpus(opts.gpus), opts.num_shards)
    run = RunPaths.of(settings.runs_dir, opts.run_name)
    before = _Before.of(run, run.repeat(opts.repeat))
    try:
        run, rep, selections = _prepare(opts, settings, console)
        target = (
            f"server {escape(redact_url(opts.url))}"
            if opts.url
            else f"model port {plans[0].port if plans else settings.server_port}"
        )
        console.print(
            f"Job GPU {settings.gpu}: {target}, judge port "
            f"{settings.judge_port} (nccl {settings.judge_port + 1}), run {escape(str(run.root))}, "
            f"repeat {rep.number}"
        )
        if opts.url:
            _print_server(load_repeat_server(rep), console)
        _print_selection(selections, console)
        records = _serve_and_record(opts, settings, plans, rep, selections, console)
    except BaseException as exc:
        before.undo(exc, settings)
        raise
    for sel in selections:  # the inputs must still be the files the run pinned before export
        check_files(
            sel.dataset,
            str(sel.tree.root),
            sel.files,
            sample_inventory(sel.tree.root, sel.ids),
            "the recording started",
        )
    return _finish(selections, rep, records, opts.num_shards, console)


def _serve_and_record(
    opts: GenerateOptions,
    settings: Settings,
    plans,
    rep: RepeatPaths,
    selections: list[Selected],
    console: Console,
) -> list:
    fleet = None if opts.url else ServerFleet(plans, opts, settings, rep)
    try:
        if fleet is not None:
            console.print(
                "starting the bundled server(s) "
                + ", ".join(f"{p.name} ({opts.system}) on :{p.port}" for p in plans)
                + " …"
            )
            fleet.start()
            _record_bundled(fleet.ws_urls, opts, rep, console)
        urls = fleet.ws_urls if fleet is not None else [opts.url]
        server = load_repeat_server(
            rep
        )  # what the server reported at the start (no second request)
        check_capacity(
            opts.num_shards,
            len(urls),
            server.servers[0].max_sessions if server and server.servers else None,
        )
        jobs = []
        for sel in selections:
            timeout = (
                settings.session_timeout_s
                if sel.dataset == "v1.5"
                else settings.v10_session_timeout_s
            )
            jobs += _jobs(sel, rep, urls, opts, timeout)
        return _record(jobs, opts, rep, console, fleet)
    finally:
        if fleet is not None:
            fleet.stop()


def _record_bundled(
    urls: list[str], opts: GenerateOptions, rep: RepeatPaths, console: Console
) -> None:
    """repeat-N/server.json for the bundled server(s), and, for a new run, what the first one
    reported in run.json."""
    reports = [_probe(url, opts) for url in urls]
    save_repeat_server(
        rep,
        RepeatServer(
            server_revision=opts.server_revision,
            model_revision=opts.model_revision,
            servers=reports,
        ),
    )
    run = RunPaths(rep.root.parent)
    manifest = load_manifest(run)
    earlier = [r for r in run.repeats() if r.number != rep.number and r.holds_recording()]
    if manifest is not None and manifest.server.reported is None and not earlier:
        save_manifest(run, with_report(manifest, reports[0]))
    _print_server(load_repeat_server(rep), console)


def _print_server(record: RepeatServer | None, console: Console) -> None:
    for report in record.servers if record else []:
        console.print(escape(f"server {report.url} reports: {describe(report)}"))


@dataclass(frozen=True)
class _Before:
    """What a generate call found of its run before it wrote anything. If it then fails before
    a session is recorded (a busy port, a server that never became ready or exited while
    starting, too many shards, an interrupt), ``undo`` removes what the call created (the run
    manifest of a new run, the repeat directory, its selection files) and never anything that
    existed before. The server logs it wrote move to $FDB_WORK/logs/RUN-repeat-N-NAME.log, and
    the error's hint is rewritten to point there."""

    run: RunPaths
    rep: RepeatPaths
    paths: frozenset[
        Path
    ]  # the runs folder, run.root, run.json and everything under the repeat, where they existed

    @classmethod
    def of(cls, run: RunPaths, rep: RepeatPaths) -> _Before:
        found = {p for p in (run.root.parent, run.root, run.manifest, rep.root) if p.exists()}
        if (
            rep.root.is_dir() and not rep.holds_recording()
        ):  # a recorded repeat is refused, never undone
            found.update(rep.root.rglob("*"))
        return cls(run, rep, frozenset(found))

    def undo(self, exc: BaseException, settings: Settings) -> None:
        if self.rep.holds_recording():  # a recording is never thrown away here
            return
        created = [
            p
            for p in (self.rep.root.rglob("*") if self.rep.root.is_dir() else [])
            if p not in self.paths
        ]
        moved = self._keep_logs(
            [p for p in created if p.suffix == ".log" and p.is_file()], settings
        )
        for path in sorted(created, key=lambda p: len(p.parts), reverse=True):
            _remove(path)
        for path in (self.rep.root, self.run.manifest, self.run.root, self.run.root.parent):
            if path not in self.paths:
                _remove(path)
        if isinstance(exc, FdbError):
            for old, new in moved.items():
                exc.message = exc.message.replace(str(old), str(new))
                exc.hint = exc.hint.replace(str(old), str(new)) if exc.hint else exc.hint

    def _keep_logs(self, logs: list[Path], settings: Settings) -> dict[Path, Path]:
        moved = {}
        for log in logs:
            target = settings.work / "logs" / f"{self.run.name}-repeat-{self.rep.number}-{log.name}"
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(log, target)
                moved[log] = target
            except OSError:
                continue
        return moved


def _remove(path: Path) -> None:
    """A created file, or a created directory once it is empty (whatever else is in it stays)."""
    try:
        if path.is_dir() and not path.is_symlink():
            path.rmdir()
        else:
            path.unlink()
    except OSError:
        pass


def export_recorded(run_name: str, repeat: int, console: Console | None = None) -> Outcome:
    """Cut the windows again from a repeat whose recording finished (a generate killed or
    failed during export): the selection, shards and pinned inputs come from the run manifest,
    the verdicts from each session.json. Exporting is deterministic, so the result is what the
    uninterrupted generate would have written."""
    console = console or Console(stderr=True)
    settings = load_settings()
    run = RunPaths.of(settings.runs_dir, run_name)
    rep = run.repeat(repeat)
    manifest = load_manifest(run)
    if manifest is None or not rep.holds_recording():
        raise FdbError(
            f"{rep.root} holds no recording to export", "run generate without --export-only first"
        )
    selections, records, missing = [], [], []
    for dataset, use in sorted(manifest.datasets.items(), key=lambda kv: kv[0] != "v1.5"):
        sel = select_dataset(
            dataset, DatasetChoice(sample_ids=use.sample_ids), Path(use.root), settings, console
        )
        check_files(
            dataset,
            use.root,
            use.files,
            sample_inventory(sel.tree.root, sel.ids),
            "the recording started",
        )
        selections.append(sel)
        opts = GenerateOptions(run_name=run_name, repeat=repeat, num_shards=manifest.num_shards)
        for job in _jobs(sel, rep, [""], opts, 0.0):
            path = job.out_dir / "session.json"
            if path.is_file():
                records.append(SessionRecord.model_validate_json(path.read_bytes()))
            else:
                missing.append(job.label)
    if missing:
        raise FdbError(
            f"{rep.root}: {len(missing)} selected session(s) were never recorded, first "
            f"{missing[0]}: the recording itself was interrupted",
            f"delete {rep.root} and run generate again (a recording cannot be resumed)",
        )
    console.print(f"exporting {len(records)} recorded sessions of {rep.root}")
    return _finish(selections, rep, records, manifest.num_shards, console)


FAILED_SHOWN = 3  # failed sessions named in the final message; the rest are counted


@dataclass(frozen=True)
class Outcome:
    """What generate recorded: the printed summary per dataset and the sessions that did not
    pass (the runbook: generate exits 0 only when every selected session passes). A session fails
    when its recording did not complete (record.status other than "ok": no connection, refused,
    disconnected, timed out, an error) or when the server broke the session protocol (verdict
    other than "pass"). Either way it stays in the export and the denominators (ineligible, with
    its reasons). A session the recorder itself paced late passed; it is only ineligible."""

    summary: dict[str, dict]
    failed: list[
        str
    ]  # "sample_id [variant]: status" or "…: protocol fail (violation)", in recording order
    sessions: int
    run_name: str
    repeat: int
    repeat_dir: Path
    logs: list[str] = field(
        default_factory=list
    )  # the record logs of the failed sessions, relative to repeat_dir

    @property
    def ok(self) -> bool:
        return not self.failed

    def failure_line(self) -> str:
        """One line: which sessions failed, that they are counted,
        how to record the repeat again."""
        more = (
            f" and {len(self.failed) - FAILED_SHOWN} more"
            if len(self.failed) > FAILED_SHOWN
            else ""
        )
        return (
            f"{len(self.failed)} of {self.sessions} selected session(s) of {self.repeat_dir} "
            f"failed ({'; '.join(self.failed[:FAILED_SHOWN])}{more}); they stay in the "
            f"denominators. Read {', '.join(self.logs) or 'its record-shard-*.log'} in it, fix the "
            f"server, then record the repeat again: delete {self.repeat_dir} and run the same "
            f"generate, or record the next one with --repeat {self.repeat + 1}"
        )


def _finish(
    selections: list[Selected], rep: RepeatPaths, records: list, num_shards: int, console: Console
) -> Outcome:
    summary: dict[str, dict] = {}
    for sel in selections:
        mine = [r for r in records if r.extra.get("dataset") == sel.dataset]
        verdicts = Counter(r.verdict.status if r.status == "ok" else r.status for r in mine)
        manifest = _export(sel, rep, num_shards)
        eligible = sum(1 for s in manifest.samples if s.eligible)
        key = "eligible_pairs" if sel.dataset == "v1.5" else "eligible_samples"
        per_subset = Counter(s.subset for s in manifest.samples if s.eligible)
        counts = {
            key: eligible,
            "selected": len(sel.ids),
            "per_subset": dict(sorted(per_subset.items())),
        }
        summary[sel.dataset] = {"sessions": dict(sorted(verdicts.items())), **counts}
        console.print(
            f"{sel.dataset}: {json.dumps(dict(sorted(verdicts.items())))} {json.dumps(counts)}",
            markup=False,
            highlight=False,
        )
        for record in mine:
            if record.status != "ok" or record.verdict.status != "pass":
                reason = record.failure or "; ".join(record.verdict.violations[:2])
                console.print(
                    f"  [yellow]{escape(f'{record.sample_id} [{record.variant}]')}[/]: "
                    f"{record.status}: {escape(reason)}"
                )
        for sample in manifest.samples:
            if (
                not sample.eligible and sample.verdict == "pass"
            ):  # recorded fine, cut out of scoring
                console.print(
                    f"  [yellow]{escape(sample.sample_id)}[/]: not eligible: "
                    f"{escape('; '.join(sample.reasons[:2]))}"
                )
    return Outcome(
        summary,
        failed_sessions(records),
        len(records),
        rep.root.parent.name,
        rep.number,
        rep.root,
        _failed_logs(rep, records),
    )


def _failed_logs(rep: RepeatPaths, records: list) -> list[str]:
    """The record-shard logs (relative to the repeat) that name the failed sessions."""
    folders = {"v1.5": rep.logs, "v1.0": rep.v10_logs}
    return sorted(
        {
            str(
                (
                    folders.get(r.extra.get("dataset"), rep.logs)
                    / f"record-shard-{r.extra.get('shard', 0)}.log"
                ).relative_to(rep.root)
            )
            for r in records
            if not _passed(r)
        }
    )


def _passed(record) -> bool:
    return record.status == "ok" and record.verdict.status == "pass"


def failed_sessions(records: list) -> list[str]:
    """The sessions that did not pass (``Outcome``), each with why: the recording's status, or
    the protocol verdict and its first violation."""
    failed = []
    for r in records:
        if r.status != "ok":
            failed.append(f"{r.sample_id} [{r.variant}]: {r.status}")
        elif r.verdict.status != "pass":
            first = (getattr(r.verdict, "violations", None) or [None])[0]
            failed.append(
                f"{r.sample_id} [{r.variant}]: protocol {r.verdict.status}"
                + (f" ({first})" if first else "")
            )
    return failed
