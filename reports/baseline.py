"""Where observations come from: ``observe`` reads any output fdb writes (a run, a sweep, a
tts-bench; reports/baseline_run.py, reports/baseline_sources.py) or a frozen baseline file into
one :class:`reports.observations.Observations`, and ``freeze`` writes it to a file
(``fdb baseline freeze``; docs/gating.md, "Frozen baselines")."""

from __future__ import annotations

import json
from pathlib import Path

from fdb.errors import FdbError
from fdb.io import atomic_write_json
from fdb.provenance import current
from fdb.settings import load_settings
from reports import baseline_run
from reports import baseline_sources as sources
from reports.observations import BASELINE_SCHEMA, Observations, read_frozen


def _json_schema(path: Path) -> str | None:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value.get("schema") if isinstance(value, dict) else None


def resolve(source: str | Path) -> Path:
    """A path as given, or a run name under $FDB_WORK/runs."""
    path = Path(source)
    if path.exists():
        return path

    runs = load_settings().runs_dir / str(source)
    if runs.is_dir():
        return runs
    raise FdbError(
        f"{source} does not exist (neither a path nor a run under $FDB_WORK/runs)",
        "pass a run directory or name, a sweep or tts-bench --output, or a frozen baseline file",
    )


def observe(source: str | Path) -> Observations:
    """The observations of any output fdb writes, or of a frozen baseline file."""
    path = resolve(source)
    if path.is_file():
        schema = _json_schema(path)
        if schema == BASELINE_SCHEMA:
            return read_frozen(path)
        if schema and schema.startswith("fdb-serving-"):
            return sources.observe_sweep(path.parent).sealed()
        if schema and schema.startswith("fdb-tts-bench-"):
            return sources.observe_tts(path.parent).sealed()
        raise FdbError(
            f"{path} is neither a frozen baseline, a serving.json nor a tts.json",
            "pass a run directory, a sweep or tts-bench --output, or a frozen baseline file",
        )
    run_schema = _json_schema(path / "run.json") if (path / "run.json").is_file() else None
    if (path / "tts.json").is_file() or (run_schema or "").startswith("fdb-tts-bench-"):
        return sources.observe_tts(path).sealed()
    if (path / "serving.json").is_file() or any(path.glob("concurrency-*/level.json")):
        return sources.observe_sweep(path).sealed()
    if run_schema is not None or any(path.glob("repeat-*")):
        return baseline_run.observe_run(path).sealed()
    raise FdbError(
        f"{path} holds no fdb output (no run.json, serving.json or tts.json)",
        "pass a run directory, a sweep or tts-bench --output, or a frozen baseline file",
    )


def freeze(source: str | Path, out: Path) -> Observations:
    """Write the observations of ``source`` to ``out`` (atomically), hashed."""
    observed = observe(source)
    frozen = observed.model_copy(update={"provenance": current().model_dump(mode="json")}).sealed()
    atomic_write_json(out, frozen.dump())
    return frozen
