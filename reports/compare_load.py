"""What `fdb compare` reads of a run, through the outputs' own typed records.

Per repeat: ``scores/summary.json`` (TimingSummary), ``scores/intervals.jsonl``
(SessionIntervals), ``v10/reference/unified.json`` (UnifiedResult, only when
``reports.v10.load_unified`` finds it current) with ``unified-samples.jsonl`` (sample rows),
the judges' behavior and semantic summaries (``judge.json``, else the one ``judge-*/`` and
``semantic-*/`` directory) and ``listening/summary.json`` (ListeningSummary). A missing file is
"not measured"; a file that does not parse is an error naming it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from pydantic import BaseModel, ValidationError

from fdb.errors import FdbError
from fdb.io import sha256_file
from fdb.layout import RepeatPaths, RunPaths
from fdb.records.judge import BehaviorSummary, JudgeSummary, SemanticSummary
from fdb.records.listening import ListeningSummary
from fdb.records.serving import Capacity, SweepReport
from fdb.records.v10 import SampleRow, UnifiedResult, sample_row
from fdb.records.v15 import SessionIntervals, TimingSummary
from fdb.run_manifest import RunManifest
from reports.v10 import load_unified

JUDGED = ("complete", "has_failures")  # statuses whose labels or grades are measurements
SCORE_FIX = "rescore the repeat (python -m fdb asr --run-name RUN --repeat N), or leave the run out"


@dataclass
class RepeatData:
    number: int
    timing: TimingSummary | None = None
    intervals: list[SessionIntervals] = field(default_factory=list)
    unified: UnifiedResult | None = None
    unified_problem: str | None = None  # why unified.json is not used (missing, stale, ...)
    v10_rows: list[SampleRow] = field(default_factory=list)
    behavior: BehaviorSummary | None = None  # only a judged one (complete / has_failures)
    semantic: SemanticSummary | None = None
    listening: ListeningSummary | None = None
    notes: list[str] = field(default_factory=list)


@dataclass
class System:
    name: str
    root: Path
    manifest: RunManifest
    repeats: list[RepeatData]
    inputs: dict[str, str]  # file relative to the run -> sha256
    capacity: Capacity | None = None
    sweep: Path | None = None


class _Reader:
    """Reads files of one run, hashing each file it uses."""

    def __init__(self, root: Path):
        self.root = root
        self.inputs: dict[str, str] = {}

    def use(self, path: Path) -> None:
        self.inputs[str(path.relative_to(self.root))] = sha256_file(path)

    def model(self, model: type[BaseModel], path: Path, fix: str = SCORE_FIX):
        if not path.is_file():
            return None
        self.use(path)
        try:
            return model.model_validate_json(path.read_bytes())
        except ValidationError as exc:
            raise FdbError(f"{path}: {_first_error(exc)}", fix) from exc

    def rows(self, path: Path, parse: Callable[[dict], BaseModel]) -> list:
        """Each line of a JSONL file through ``parse``; an unreadable line is an error naming the
        file."""
        if not path.is_file():
            return []
        self.use(path)
        try:
            return [
                parse(json.loads(line))
                for line in path.read_text(encoding="utf-8").splitlines()
                if line.strip()
            ]
        except ValidationError as exc:
            raise FdbError(f"{path}: {_first_error(exc)}", SCORE_FIX) from exc
        except ValueError as exc:
            raise FdbError(f"{path} is not valid JSON lines ({exc})", SCORE_FIX) from exc


def _first_error(exc: ValidationError) -> str:
    first = exc.errors()[0]
    return f"{'.'.join(str(p) for p in first['loc']) or 'the file'}: {first['msg']}"


def resolve_run(source: str, runs_dir: Path) -> Path:
    """A run directory from a path or a run name ($FDB_WORK/runs/NAME); refused without run.json."""
    path = Path(source)
    if not path.is_dir() and not path.is_absolute() and (runs_dir / source).is_dir():
        path = runs_dir / source
    if not (path / "run.json").is_file():
        raise FdbError(
            f"{path} is not a run directory (no run.json)",
            "pass a run directory written by `python -m fdb generate`, "
            f"or a run name under {runs_dir}",
        )
    return path


def load_system(name: str, root: Path) -> System:
    reader = _Reader(root)
    manifest = reader.model(
        RunManifest, root / "run.json", "pass a run directory written by `python -m fdb generate`"
    )
    repeats = [_repeat(reader, rep) for rep in RunPaths(root).repeats()]
    return System(
        name=name,
        root=root,
        manifest=manifest,
        repeats=repeats,
        inputs=dict(sorted(reader.inputs.items())),
    )


def _repeat(reader: _Reader, rep: RepeatPaths) -> RepeatData:
    data = RepeatData(number=rep.number)
    data.timing = reader.model(TimingSummary, rep.scores / "summary.json")
    data.intervals = reader.rows(rep.scores / "intervals.jsonl", SessionIntervals.model_validate)
    _unified(reader, rep, data)
    _judges(reader, rep, data)
    data.listening = reader.model(ListeningSummary, rep.root / "listening" / "summary.json")
    return data


def _unified(reader: _Reader, rep: RepeatPaths, data: RepeatData) -> None:
    path = rep.v10_reference / "unified.json"
    if not path.is_file() and not (rep.v10_reference / "manifest.json").is_file():
        return  # this repeat left v1.0 out
    data.unified, data.unified_problem = load_unified(rep)
    if data.unified_problem is not None:
        data.notes.append(
            f"repeat-{rep.number}: v1.0 unified metrics not used ({data.unified_problem})"
        )
        return
    for name in ("manifest.json", "asr.json", "unified.json"):
        reader.use(rep.v10_reference / name)
    data.v10_rows = reader.rows(
        rep.v10_reference / "unified-samples.jsonl", partial(sample_row, fix=SCORE_FIX)
    )


def _judges(reader: _Reader, rep: RepeatPaths, data: RepeatData) -> None:
    """The judge step's summaries: judge.json when it holds judged ones,
    else the one task directory."""
    summary = reader.model(JudgeSummary, rep.root / "judge.json", "rerun `python -m fdb judge`")
    behavior = summary.behavior if summary else None
    semantic = summary.semantic if summary else None
    if behavior is None or behavior.status not in JUDGED:
        behavior = _task_dir(reader, rep, "judge-*", BehaviorSummary, data) or behavior
    if semantic is None or semantic.status not in JUDGED:
        semantic = _task_dir(reader, rep, "semantic-*", SemanticSummary, data) or semantic
    data.behavior = behavior if behavior is not None and behavior.status in JUDGED else None
    data.semantic = semantic if semantic is not None and semantic.status in JUDGED else None


def _task_dir(
    reader: _Reader, rep: RepeatPaths, pattern: str, model: type[BaseModel], data: RepeatData
):
    found = sorted(p for p in rep.root.glob(f"{pattern}/summary.json") if p.is_file())
    if len(found) > 1:
        data.notes.append(
            f"repeat-{rep.number}: several {pattern} directories and no judged judge.json; "
            "their labels are not used (rerun `python -m fdb judge` to name the current one)"
        )
        return None
    return reader.model(model, found[0], "rerun `python -m fdb judge`") if found else None


def load_capacity(system: System, directory: Path) -> None:
    path = directory / "serving.json"
    report = SweepReport.load(
        path, "rebuild the sweep report (python -m fdb sweep report), or pass another sweep"
    )
    if report is None:
        raise FdbError(
            f"{path} is missing: --sweep {system.name}={directory} is not a finished sweep",
            "pass the --output directory of a finished `python -m fdb sweep`",
        )
    system.capacity = report.capacity
    system.sweep = directory
    system.inputs[f"sweep:{path}"] = sha256_file(path)
