"""`sweep`: record the same cohort at rising concurrency, one level after another, each level (and
each repeat of it) in a fresh client process (``python -m runs.sweep LEVEL_DIR/level.json``), then
one serving row per level (scorers/serving.py), serving.json, SERVING.md and serving.png
(reports/serving.py).

A level's failed sessions are part of the result: the sweep goes on to the next level. With
``--search`` the levels are not given but found: doubling from 1 until a level misses the targets
(or ``--max-concurrency``), then bisecting between the last passing and the first failing level.
With ``--repeats N`` every level is recorded N times (``concurrency-C/repeat-K/``); its row pools
the repeats' sessions and meets the targets only when every repeat does; serving.json keeps each
repeat's own row beside it (``repeat_rows``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

from pydantic import BaseModel, Field
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from fdb.dialects import check_bundled_dialect, get_dialect
from fdb.errors import FdbError
from fdb.io import atomic_write_bytes, atomic_write_json, atomic_write_text, read_json, redact_url
from fdb.provenance import current, redact_command
from fdb.records.serving import ServingRow, SweepCapacity, SweepReport
from fdb.run_manifest import ServerProvenance
from fdb.settings import load_settings
from fdb.tables import write_tables
from recorders.batch import SessionJob, record_many
from recorders.eventloop import run as run_loop
from reports.serving import plot_png, render, serving_table, tables, warnings
from runs.generate import V15_VARIANTS, select_dataset
from runs.gpus import read_max_sessions
from runs.server import ManagedServer
from runs.server_probe import describe, probe_server
from runs.sweep_args import RecordOptions
from scorers.serving import capacity, combine_repeats, level_row, load_level

CLIENT_SCHEMA = "fdb-sweep-client-1"
URL_ENV = (
    "FDB_SWEEP_URL"  # the level's URL as given (level.json keeps it with its secrets redacted)
)


class SweepOptions(BaseModel):
    output: Path
    concurrency: list[int] = Field(default_factory=lambda: [1, 2, 4, 8])
    dataset: str = "v1.5"
    record: RecordOptions = RecordOptions()
    playback_reserve_ms: float = 80.0
    repeats: int = 1
    search: bool = False
    max_concurrency: int = 64

    @property
    def top_level(self) -> int:
        return self.max_concurrency if self.search else max(self.concurrency)


class LevelJob(BaseModel):
    audio: Path
    out: str  # relative to the level directory
    sample_id: str
    variant: str


class LevelSpec(BaseModel):
    """level.json: what one recording of a level does; the child process reads it. ``url`` has its
    secrets redacted: the child gets the URL itself through the environment (URL_ENV)."""

    concurrency: int
    repeat: int = 1
    url: str
    dataset: str
    profile: str
    turn_detection: dict | None = None
    model: str | None = None
    instructions: str | None = None
    timeout_s: float = 90.0
    max_sessions: int | None = None  # the server's, as /v1/realtime/capabilities reported it
    server: ServerProvenance | None = (
        None  # revisions declared and what the server reported before the sweep
    )
    record_args: list[str] = Field(default_factory=list)
    jobs: list[LevelJob] = Field(default_factory=list)


class ClientStats(BaseModel):
    """client.json: what the level's client process (the load generator) itself used."""

    schema_: str = Field(CLIENT_SCHEMA, alias="schema")
    cpu_s: float
    wall_s: float
    cpu_share: float  # cpu_s / wall_s: 1.0 is one core busy the whole time
    load_1m: float | None = None  # the host's 1-minute load average at the end
    cpus: int | None = None


def parse_levels(text: str) -> list[int]:
    """ "1,2,4" -> [1, 2, 4]: positive, strictly rising."""
    try:
        levels = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise FdbError(
            f"--concurrency {text!r} is not a list of integers", "e.g. --concurrency 1,2,4,8"
        ) from None
    if not levels or any(n < 1 for n in levels) or levels != sorted(set(levels)):
        raise FdbError(
            f"--concurrency {text!r} must be rising positive integers", "e.g. --concurrency 1,2,4,8"
        )
    return levels


def search_capacity(meets: Callable[[int], bool], max_level: int, start: int = 1) -> list[int]:
    """Levels to run, in order, to find the capacity: double from ``start`` until a level misses
    (or ``max_level``, itself run last), then bisect between the last passing and the first failing
    level. ``meets(level)`` records a level and says whether it met the targets."""
    if not 1 <= start <= max_level:
        raise FdbError(
            f"--max-concurrency {max_level} is below the first level {start}",
            "raise --max-concurrency",
        )
    visited, level, passed = [], start, 0
    while True:
        visited.append(level)
        if not meets(level):
            failed = level
            break
        passed = level
        if level >= max_level:
            return visited
        level = min(level * 2, max_level)
    while failed - passed > 1:
        middle = (passed + failed) // 2
        visited.append(middle)
        if meets(middle):
            passed = middle
        else:
            failed = middle
    return visited


def plan_jobs(opts: SweepOptions, console: Console) -> list[LevelJob]:
    """The cohort every level records: two sessions per v1.5 pair, one per v1.0 sample."""
    record = opts.record
    selected = select_dataset(
        opts.dataset, record.choice, record.dataset_root, load_settings(), console
    )
    if selected is None or not selected.samples:
        raise FdbError(
            f"the selection leaves no {opts.dataset} sample to record", "raise --per-subset"
        )
    console.print(
        f"{opts.dataset} ({selected.tree.source}, {selected.tree.root}): "
        f"{len(selected.samples)} selected"
    )
    variants = V15_VARIANTS if opts.dataset == "v1.5" else (("main", "input_wav"),)
    return [
        LevelJob(
            audio=getattr(sample, attr),
            out=f"{sample.sample_id}/{variant}",
            sample_id=sample.sample_id,
            variant=variant,
        )
        for sample in selected.samples
        for variant, attr in variants
    ]


def level_dir(output: Path, concurrency: int) -> Path:
    return output / f"concurrency-{concurrency}"


def recording_dir(output: Path, concurrency: int, repeat: int, repeats: int) -> Path:
    """concurrency-C/ for a single recording, concurrency-C/repeat-K/ when a level is repeated."""
    return (
        level_dir(output, concurrency) / f"repeat-{repeat}"
        if repeats > 1
        else level_dir(output, concurrency)
    )


def recordings(directory: Path) -> list[Path]:
    """The recordings of a level: its repeat-K/ folders in order, else the level folder itself."""
    found = [
        d for d in directory.glob("repeat-*") if d.is_dir() and re.fullmatch(r"repeat-\d+", d.name)
    ]
    return sorted(found, key=lambda d: int(d.name.split("-")[1])) or [directory]


def run_level(spec: LevelSpec, directory: Path, console: Console, url: str | None = None) -> int:
    """Record one level in a fresh client process (against ``url``, else ``spec.url``); returns
    its exit code."""
    if any(directory.rglob("session.json")):
        raise FdbError(
            f"{directory} already holds a recording",
            "use another --output, or delete it to redo the sweep",
        )
    directory.mkdir(parents=True, exist_ok=True)
    spec_path = directory / "level.json"
    atomic_write_json(spec_path, spec.model_dump(mode="json", by_alias=True))
    label = f"{spec.concurrency} at once" + (f", repeat {spec.repeat}" if spec.repeat > 1 else "")
    columns = (
        TextColumn(f"[bold]{label}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[last]}"),
    )
    with open(directory / "record.log", "ab") as log, Progress(*columns, console=console) as bar:
        task = bar.add_task("sessions", total=len(spec.jobs), last="")
        proc = subprocess.Popen(
            [sys.executable, "-m", "runs.sweep", str(spec_path)],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env={**os.environ, URL_ENV: url or spec.url},
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            try:
                done = json.loads(line)
            except json.JSONDecodeError:
                continue
            bar.update(task, completed=done["done"], last=f"{done['label']} {done['status']}")
        return proc.wait()


def _record_level(spec_path: Path) -> None:
    """The child process: record every job of the level, ``concurrency`` at a time, then write
    client.json with this process's CPU share (the load generator's own load)."""
    spec = LevelSpec.model_validate(read_json(spec_path))
    root = spec_path.parent
    url = os.environ.get(URL_ENV) or spec.url
    jobs = [
        SessionJob(
            url=url,
            audio=job.audio,
            out_dir=root / job.out,
            sample_id=job.sample_id,
            variant=job.variant,
            profile=spec.profile,
            turn_detection=spec.turn_detection,
            model=spec.model,
            instructions=spec.instructions,
            timeout_s=spec.timeout_s,
            extra_meta={"dataset": spec.dataset, "concurrency": spec.concurrency},
        )
        for job in spec.jobs
    ]

    def tick(done: int, total: int, record) -> None:
        label = f"{record.sample_id} [{record.variant}]"
        print(
            json.dumps({"done": done, "total": total, "label": label, "status": record.status}),
            flush=True,
        )

    cpu0, wall0 = time.process_time(), time.monotonic()
    run_loop(record_many(jobs, concurrency=spec.concurrency, progress=tick))
    cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    stats = ClientStats(
        cpu_s=round(cpu, 3),
        wall_s=round(wall, 3),
        cpu_share=round(cpu / wall, 3) if wall > 0 else 0.0,
        load_1m=round(os.getloadavg()[0], 2),
        cpus=os.cpu_count(),
    )
    atomic_write_json(root / "client.json", stats.model_dump(mode="json", by_alias=True))


def _level_spec(directory: Path) -> dict | None:
    for candidate in (directory / "level.json", directory / "repeat-1" / "level.json"):
        if candidate.is_file():
            return read_json(candidate)
    return None


def level_concurrency(directory: Path) -> int:
    spec = _level_spec(directory)
    if spec is not None:
        return int(spec["concurrency"])
    found = re.search(r"concurrency-(\d+)$", directory.name)
    if found:
        return int(found.group(1))
    raise FdbError(
        f"{directory} names no concurrency", "name it concurrency-N or keep its level.json"
    )


def _client_cpu(directory: Path) -> float | None:
    path = directory / "client.json"
    return ClientStats.model_validate(read_json(path)).cpu_share if path.is_file() else None


def measure_level(directory: Path, profile: str = "turn-based", reserve_ms: float = 80.0):
    """The serving row of one recorded level directory (its repeats combined)."""
    return measure_level_repeats(directory, profile, reserve_ms)[0]


def measure_level_repeats(directory: Path, profile: str = "turn-based", reserve_ms: float = 80.0):
    """(the level's row with its repeats combined, each repeat's own row in repeat order)."""
    if not directory.is_dir():
        raise FdbError(f"{directory} is not a recorded level", "pass --run DIR/concurrency-N")
    concurrency = level_concurrency(directory)
    per_repeat = [(load_level(d), _client_cpu(d)) for d in recordings(directory)]
    rows = [
        level_row(concurrency, sessions, profile, reserve_ms, cpu) for sessions, cpu in per_repeat
    ]
    pooled = (
        rows[0]
        if len(rows) == 1
        else level_row(
            concurrency, [s for sessions, _ in per_repeat for s in sessions], profile, reserve_ms
        )
    )
    row = combine_repeats(pooled, rows)
    spec = _level_spec(directory)
    return row.model_copy(
        update={"server_max_sessions": spec.get("max_sessions") if spec else None}
    ), rows


def report(
    levels: list[Path], output: Path, reserve_ms: float = 80.0, profile: str = "turn-based"
) -> dict:
    """serving.json at ``output``, SERVING.md, tables/*.csv and serving.png next to it, from level
    directories."""
    found = sorted(
        ((*measure_level_repeats(d, profile, reserve_ms), d) for d in levels),
        key=lambda found: found[0].concurrency,
    )
    rows = [row for row, _, _ in found]
    cap = capacity(rows)
    published = tables(
        rows
    )  # SERVING.md's tables: its Markdown, tables/*.csv and serving.json "tables"
    server, differ = level_servers([directory for _, _, directory in found])
    record = SweepReport(
        playback_reserve_ms=reserve_ms,
        capacity=SweepCapacity(**dict(cap), sentence=cap.line()),
        client_limited_levels=[r.concurrency for r in rows if r.client_limited],
        warnings=warnings(rows) + differ,
        server=server.model_dump(mode="json", by_alias=True) if server else None,
        levels={str(row.concurrency): str(directory) for row, _, directory in found},
        rows=rows,
        repeat_rows={str(row.concurrency): repeats for row, repeats, _ in found},
        provenance=current().model_dump(mode="json"),
        tables=[table.dump() for table in published],
    )
    data = record.dump()
    atomic_write_json(output, data)
    atomic_write_text(
        output.parent / "SERVING.md",
        render(rows, cap, found=published, server=server, extra_warnings=differ),
    )
    write_tables(output.parent / "tables", published)
    atomic_write_bytes(output.parent / "serving.png", plot_png(rows))
    return data


def level_servers(levels: list[Path]) -> tuple[ServerProvenance | None, list[str]]:
    """(the server provenance of the first level whose level.json has one, a warning for each level
    whose server reported another identity or declared other revisions)."""
    found = []
    for directory in levels:
        for recording in recordings(directory):
            path = recording / "level.json"
            if path.is_file():
                spec = LevelSpec.model_validate(read_json(path))
                if spec.server is not None:
                    found.append((spec.concurrency, spec.server))
    if not found:
        return None, []
    first = found[0][1]

    def key(server: ServerProvenance) -> tuple:
        return (
            server.server_revision,
            server.model_revision,
            server.dataset_revision,
            server.reported.identity() if server.reported else None,
        )

    differ = sorted(
        {
            f"level {level}'s server provenance differs from level {found[0][0]}'s "
            "(see its level.json)"
            for level, server in found
            if key(server) != key(first)
        }
    )
    return first, differ


def summary_table(data: dict) -> Table:
    published = serving_table([ServingRow.model_validate(row) for row in data["rows"]])
    headers, cells = published.headers(), published.cells()
    keep = [
        k for k in range(len(headers)) if any(line[k] != "-" for line in cells)
    ]  # drop empty columns
    table = Table(*(headers[k] for k in keep), title=data["capacity"]["line"])
    for line in cells:
        table.add_row(*(line[k] for k in keep))
    return table


@contextlib.contextmanager
def _serving(opts: SweepOptions, console: Console) -> Iterator[tuple[str, Callable[[], None]]]:
    """(url, check_alive): --url as given, or the bundled server with max_sessions = the top
    level."""
    if opts.record.url is not None:
        yield opts.record.url, lambda: None
        return
    server = bundled_server(opts)
    console.print(
        f"starting the bundled server {opts.record.system} on :{server.port} "
        f"(max_sessions {opts.top_level}) …"
    )
    server.start()
    try:
        yield server.ws_url, server.check_alive
    finally:
        server.stop()


def bundled_server(opts: SweepOptions):
    """The bundled server of a sweep (not started): SERVER_PORT, max_sessions = the top level,
    its launch.yaml and log under DIR/logs/."""
    check_bundled_dialect(opts.record.system, opts.record.profile)
    config = atomic_write_text(
        opts.output / "logs" / "launch.yaml",
        f"system: {opts.record.system}\nmax_sessions: {opts.top_level}\n",
    )
    return ManagedServer(
        system=opts.record.system,
        host="127.0.0.1",
        port=load_settings().server_port,
        config=config,
        log_path=opts.output / "logs" / "model-server.log",
    )


def _server_provenance(url: str, opts: SweepOptions, console: Console) -> ServerProvenance:
    """What the sweep records of its server: the declared revisions and the server's report."""
    record = opts.record
    report = probe_server(url, headers=dict(get_dialect(record.profile).client.headers))
    console.print(f"server {escape(redact_url(url))} reports: {escape(describe(report))}")
    return ServerProvenance(
        url=None if record.url is None else redact_url(record.url),
        bundled_system=record.system if record.url is None else None,
        server_revision=record.server_revision,
        model_revision=record.model_revision,
        dataset_revision=record.dataset_revision,
        reported=report,
    )


def _warn_over(level: int, max_sessions: int | None, console: Console) -> None:
    if max_sessions is not None and level > max_sessions:
        console.print(
            f"[yellow]WARNING[/]: level {level} exceeds the server's max_sessions {max_sessions}: "
            f"sessions beyond {max_sessions} at once are refused with 503 by design"
        )


def sweep(
    opts: SweepOptions,
    console: Console | None = None,
    around_level: Callable[[int], AbstractContextManager] | None = None,
) -> dict:
    """Record every level (or search for the capacity), then write the report. ``around_level(n)``
    is entered around each recording of level n (the capacity benchmark samples server memory)."""
    console = console or Console(stderr=True)
    settings = load_settings()
    jobs = plan_jobs(opts, console)
    timeout = opts.record.timeout_s or (
        settings.session_timeout_s if opts.dataset == "v1.5" else settings.v10_session_timeout_s
    )
    recorded: list[int] = []
    with _serving(opts, console) as (url, check_alive):
        server = _server_provenance(url, opts, console)
        max_sessions = server.reported.max_sessions if server.reported else read_max_sessions(url)

        def measure(level: int) -> bool:
            _warn_over(level, max_sessions, console)
            for repeat in range(1, opts.repeats + 1):
                spec = LevelSpec(
                    concurrency=level,
                    repeat=repeat,
                    url=redact_url(url),
                    dataset=opts.dataset,
                    profile=opts.record.profile,
                    turn_detection=opts.record.turn_detection,
                    model=opts.record.model,
                    instructions=opts.record.instructions,
                    timeout_s=timeout,
                    max_sessions=max_sessions,
                    server=server,
                    record_args=redact_command(list(opts.record.args)),
                    jobs=jobs,
                )
                where = recording_dir(opts.output, level, repeat, opts.repeats)
                with around_level(level) if around_level else contextlib.nullcontext():
                    rc = run_level(spec, where, console, url=url)
                if rc != 0:
                    console.print(
                        f"[yellow]WARNING[/]: the level {level} client exited with code {rc} "
                        f"(log: {where / 'record.log'}); going on"
                    )
                check_alive()
            recorded.append(level)
            row = measure_level(
                level_dir(opts.output, level), opts.record.profile, opts.playback_reserve_ms
            )
            verdict = (
                "meets the targets"
                if row.meets_targets
                else "misses: " + "; ".join(row.missed_targets)
            )
            console.print(f"level {level}: {verdict}")
            return row.meets_targets

        if opts.search:
            search_capacity(measure, opts.max_concurrency)
        else:
            for level in opts.concurrency:
                measure(level)
    levels = [level_dir(opts.output, n) for n in sorted(set(recorded))]
    data = report(
        levels, opts.output / "serving.json", opts.playback_reserve_ms, opts.record.profile
    )
    console.print(summary_table(data))
    for line in data["warnings"]:
        console.print(f"[yellow]WARNING[/]: {line}")
    return data


if __name__ == "__main__":
    _record_level(Path(sys.argv[1]))
