"""`sweep`: record the same cohort at rising concurrency, one level after another, each level in a
fresh client process (``python -m runs.sweep LEVEL_DIR/level.json``), then one serving row per
level (scorers/serving.py), serving.json and SERVING.md (reports/serving.py).

A level's failed sessions are part of the result: the sweep goes on to the next level.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from pathlib import Path

from pydantic import BaseModel, Field
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from fdb.errors import FdbError
from fdb.io import atomic_write_json, atomic_write_text, read_json
from runs.options import DatasetChoice

SERVING_SCHEMA = "fdb-serving-1"


class SweepOptions(BaseModel):
    output: Path
    concurrency: list[int]
    dataset: str = "v1.5"
    url: str | None = None
    system: str = "embedded-cascade"
    choice: DatasetChoice = DatasetChoice()
    dataset_root: Path | None = None
    profile: str = "turn-based"
    turn_detection: dict | None = None
    model: str | None = None
    playback_reserve_ms: float = 80.0


class LevelJob(BaseModel):
    audio: Path
    out: str  # relative to the level directory
    sample_id: str
    variant: str


class LevelSpec(BaseModel):
    """level.json: what one level records; the child process reads it."""

    concurrency: int
    url: str
    dataset: str
    profile: str
    turn_detection: dict | None = None
    model: str | None = None
    timeout_s: float = 90.0
    jobs: list[LevelJob] = Field(default_factory=list)


def parse_levels(text: str) -> list[int]:
    """"1,2,4" -> [1, 2, 4]: positive, strictly rising."""
    try:
        levels = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise FdbError(f"--concurrency {text!r} is not a list of integers", "e.g. --concurrency 1,2,4,8") from None
    if not levels or any(n < 1 for n in levels) or levels != sorted(set(levels)):
        raise FdbError(f"--concurrency {text!r} must be rising positive integers", "e.g. --concurrency 1,2,4,8")
    return levels


def plan_jobs(opts: SweepOptions, console: Console) -> list[LevelJob]:
    """The cohort every level records: two sessions per v1.5 pair, one per v1.0 sample."""
    from fdb.settings import load_settings
    from runs.generate import V15_VARIANTS, select_dataset

    selected = select_dataset(opts.dataset, opts.choice, opts.dataset_root, load_settings(), console)
    if selected is None or not selected.samples:
        raise FdbError(f"the selection leaves no {opts.dataset} sample to record", "raise --per-subset")
    console.print(f"{opts.dataset} ({selected.tree.source}, {selected.tree.root}): {len(selected.samples)} selected")
    variants = V15_VARIANTS if opts.dataset == "v1.5" else (("main", "input_wav"),)
    return [LevelJob(audio=getattr(sample, attr), out=f"{sample.sample_id}/{variant}", sample_id=sample.sample_id,
                     variant=variant)
            for sample in selected.samples for variant, attr in variants]


def level_dir(output: Path, concurrency: int) -> Path:
    return output / f"concurrency-{concurrency}"


def run_level(spec: LevelSpec, directory: Path, console: Console) -> int:
    """Record one level in a fresh client process; returns its exit code."""
    if any(directory.rglob("session.json")):
        raise FdbError(f"{directory} already holds a recording", "use another --output, or delete it to redo the sweep")
    directory.mkdir(parents=True, exist_ok=True)
    spec_path = directory / "level.json"
    atomic_write_json(spec_path, spec.model_dump(mode="json"))
    columns = (TextColumn(f"[bold]{spec.concurrency} at once"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn(), TextColumn("{task.fields[last]}"))
    with open(directory / "record.log", "ab") as log, Progress(*columns, console=console) as bar:
        task = bar.add_task("sessions", total=len(spec.jobs), last="")
        proc = subprocess.Popen([sys.executable, "-m", "runs.sweep", str(spec_path)], stdout=subprocess.PIPE,
                                stderr=log, text=True)
        assert proc.stdout is not None
        for line in proc.stdout:
            try:
                done = json.loads(line)
            except json.JSONDecodeError:
                continue
            bar.update(task, completed=done["done"], last=f"{done['label']} {done['status']}")
        return proc.wait()


def _record_level(spec_path: Path) -> None:
    """The child process: record every job of the level, ``concurrency`` at a time."""
    from recorders.batch import SessionJob, record_many

    spec = LevelSpec.model_validate(read_json(spec_path))
    root = spec_path.parent
    jobs = [SessionJob(url=spec.url, audio=job.audio, out_dir=root / job.out, sample_id=job.sample_id,
                       variant=job.variant, profile=spec.profile, turn_detection=spec.turn_detection,
                       model=spec.model, timeout_s=spec.timeout_s,
                       extra_meta={"dataset": spec.dataset, "concurrency": spec.concurrency})
            for job in spec.jobs]

    def tick(done: int, total: int, record) -> None:
        label = f"{record.sample_id} [{record.variant}]"
        print(json.dumps({"done": done, "total": total, "label": label, "status": record.status}), flush=True)

    asyncio.run(record_many(jobs, concurrency=spec.concurrency, progress=tick))


def level_concurrency(directory: Path) -> int:
    spec = directory / "level.json"
    if spec.is_file():
        return int(read_json(spec)["concurrency"])
    found = re.search(r"concurrency-(\d+)$", directory.name)
    if found:
        return int(found.group(1))
    raise FdbError(f"{directory} names no concurrency", "name it concurrency-N or keep its level.json")


def report(levels: list[Path], output: Path, reserve_ms: float = 80.0, profile: str = "turn-based") -> dict:
    """serving.json at ``output`` and SERVING.md next to it from recorded level directories."""
    from reports.serving import render
    from scorers.serving import capacity, level_row, load_level

    found = []
    for directory in levels:
        if not directory.is_dir():
            raise FdbError(f"{directory} is not a recorded level", "pass --run DIR/concurrency-N")
        found.append((level_row(level_concurrency(directory), load_level(directory), profile, reserve_ms), directory))
    found.sort(key=lambda pair: pair[0].concurrency)
    rows = [row for row, _ in found]
    cap = capacity(rows)
    data = {"schema": SERVING_SCHEMA, "playback_reserve_ms": reserve_ms,
            "capacity": {**cap.model_dump(mode="json"), "line": cap.line()},
            "levels": {str(row.concurrency): str(directory) for row, directory in found},
            "rows": [r.model_dump(mode="json") for r in rows]}
    atomic_write_json(output, data)
    atomic_write_text(output.parent / "SERVING.md", render(rows, cap))
    return data


def summary_table(data: dict) -> Table:
    from reports.serving import COLUMNS, row_cells
    from scorers.serving import ServingRow

    cells = [row_cells(ServingRow.model_validate(row)) for row in data["rows"]]
    keep = [k for k in range(len(COLUMNS)) if any(line[k] != "-" for line in cells)]  # drop empty columns
    table = Table(*(COLUMNS[k] for k in keep), title=data["capacity"]["line"])
    for line in cells:
        table.add_row(*(line[k] for k in keep))
    return table


def sweep(opts: SweepOptions, console: Console | None = None) -> dict:
    """Record every level (starting the bundled server unless --url), then write the report."""
    from fdb.settings import load_settings
    from runs.server import ManagedServer

    console = console or Console(stderr=True)
    settings = load_settings()
    jobs = plan_jobs(opts, console)
    server = None
    if opts.url is None:
        if opts.profile != "turn-based":
            raise FdbError(f"the bundled server speaks turn-based, not {opts.profile}", "pass --url of your server")
        server = ManagedServer(system=opts.system, host="127.0.0.1", port=settings.server_port,
                               log_path=opts.output / "logs" / "model-server.log")
        console.print(f"starting the bundled server {opts.system} on :{settings.server_port} …")
        server.start()
    timeout = settings.session_timeout_s if opts.dataset == "v1.5" else settings.v10_session_timeout_s
    try:
        url = opts.url or server.ws_url
        for level in opts.concurrency:
            spec = LevelSpec(concurrency=level, url=url, dataset=opts.dataset, profile=opts.profile,
                             turn_detection=opts.turn_detection, model=opts.model, timeout_s=timeout, jobs=jobs)
            rc = run_level(spec, level_dir(opts.output, level), console)
            if rc != 0:
                console.print(f"[yellow]WARNING[/]: the level {level} client exited with code {rc} "
                              f"(log: {level_dir(opts.output, level) / 'record.log'}); going on")
            if server is not None:
                server.check_alive()
    finally:
        if server is not None:
            server.stop()
    levels = [level_dir(opts.output, n) for n in opts.concurrency]
    data = report(levels, opts.output / "serving.json", opts.playback_reserve_ms, opts.profile)
    console.print(summary_table(data))
    return data


if __name__ == "__main__":
    _record_level(Path(sys.argv[1]))
