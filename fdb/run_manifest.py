"""run.json: what every repeat of a run must share (selection, datasets, server, shards)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from fdb.datasets.pinning import inventory_changes
from fdb.errors import FdbError
from fdb.io import atomic_write_json, load_record
from fdb.layout import RepeatPaths, RunPaths

RUN_SCHEMA = "fdb-run-1"


class DatasetUse(BaseModel):
    dataset: str
    root: str
    source: str  # official | synthetic | user
    revision: str | None
    selection: dict  # SelectionSpec.normalized()
    sample_ids: list[str]
    files: dict[str, str] = Field(default_factory=dict)  # "subset/id/name" -> sha256 (pinning.sample_inventory)


class ServerUse(BaseModel):
    url: str | None  # None: the bundled server, started by generate
    system: str | None
    model: str | None
    turn_detection: dict | None
    profile: str = "turn-based"


class RunManifest(BaseModel):
    schema_: str = Field(RUN_SCHEMA, alias="schema")
    run_name: str
    datasets: dict[str, DatasetUse]  # "v1.0" / "v1.5"; absent = left out
    server: ServerUse
    num_shards: int
    gpus: int = 1  # bundled model servers (one per --gpus index)
    judge: str | None = None  # JUDGE at generate time
    settings: dict[str, str] = Field(default_factory=dict)  # MODEL_PATH, MODEL_REVISION, JUDGE_MODEL_PATH when set
    provenance: dict[str, object] = Field(default_factory=dict)

    model_config = {"populate_by_name": True}


def load_manifest(run: RunPaths) -> RunManifest | None:
    """The run's run.json, or None before its first repeat. A damaged file (truncated, wrong types,
    a missing field) is one FdbError naming it: fdb cannot rebuild what the repeats shared."""
    if not run.manifest.exists():
        return None
    return load_record(run.manifest, RunManifest, f"run manifest ({RUN_SCHEMA})",
                       "run.json records what every repeat of the run shares and cannot be rebuilt: "
                       "restore it from a copy, or record into a new --run-name")


def check_compatible(previous: RunManifest, new: RunManifest, repeat: RepeatPaths) -> None:
    """Every repeat of a run must use the same selection, datasets, shards and server system."""
    for dataset in ("v1.5", "v1.0"):
        old, cur = previous.datasets.get(dataset), new.datasets.get(dataset)
        label = "pairs" if dataset == "v1.5" else f"{dataset} samples"
        if (old is None) != (cur is None):
            _refuse_dataset_change(dataset, old is None, repeat, new.run_name)
        if old and cur and old.sample_ids == cur.sample_ids and old.files and cur.files:
            check_files(dataset, cur.root, old.files, cur.files, f"run {new.run_name} started")
        elif old and cur and (old.sample_ids != cur.sample_ids or old.revision != cur.revision):
            raise FdbError(f"{repeat.root} selects different {label} than the earlier repeats",
                           "pass the same options, or use a new run name")
    if previous.judge and new.judge and previous.judge != new.judge:
        raise FdbError(f"JUDGE={new.judge} differs from the run's JUDGE={previous.judge}",
                       "keep the judge fixed across repeats, or use a new run name")
    if previous.gpus != new.gpus:
        raise FdbError(f"--gpus lists {new.gpus} GPU(s), the run's earlier repeats used {previous.gpus}",
                       "keep the settings fixed across repeats, or use a new run name")
    if previous.num_shards != new.num_shards:
        raise FdbError(f"--num-shards {new.num_shards} differs from the run's {previous.num_shards}",
                       "keep the settings fixed across repeats, or use a new run name")
    if (previous.server.url, previous.server.system, previous.server.profile) != (
            new.server.url, new.server.system, new.server.profile):
        raise FdbError("the server differs from the earlier repeats of this run",
                       "use the same --url/--system, or use a new run name")


def _refuse_dataset_change(dataset: str, earlier_left_out: bool, repeat: RepeatPaths, run_name: str) -> None:
    other = "v1.5" if dataset == "v1.0" else "v1.0"
    flag = "--v10-per-subset 0" if dataset == "v1.0" else "--v15-per-subset 0"
    if earlier_left_out:
        raise FdbError(f"{repeat.root} is a {other}-only repeat: the earlier repeats of {run_name} left "
                       f"{dataset} out", f"continue with {flag} added, or use a new run name")
    raise FdbError(f"{repeat.root} would have {dataset} left out, unlike the earlier repeats of {run_name}",
                   "pass the same selection options as before, or use a new run name")


def check_files(dataset: str, root: str, pinned: dict[str, str], current: dict[str, str], since: str) -> None:
    """Refuse to continue when a selected sample's file differs from the pinned inventory."""
    changes = inventory_changes(pinned, current)
    if changes:
        more = f" (and {len(changes) - 1} more)" if len(changes) > 1 else ""
        raise FdbError(f"{dataset} dataset file {root}/{changes[0]} since {since}{more}",
                       "restore the dataset files the run pinned in run.json, or use a new run name")


def save_manifest(run: RunPaths, manifest: RunManifest) -> None:
    atomic_write_json(run.manifest, manifest.model_dump(mode="json", by_alias=True))
