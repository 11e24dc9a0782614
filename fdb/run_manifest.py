"""run.json: what every repeat of a run must share (selection, datasets, server, shards), and
the server's provenance: the revisions the user declared (--server-revision, --model-revision,
--dataset-revision) and what the server reported about itself (``ServerReport``: GET
/v1/realtime/capabilities, /v1/models and /health, each probe ``ok``, ``absent`` or ``failed``
with a one-line reason; a value nobody reported is null)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from fdb.datasets.pinning import inventory_changes
from fdb.errors import FdbError
from fdb.io import atomic_write_json, load_record
from fdb.layout import RepeatPaths, RunPaths
from fdb.models.scoring import ScoringBackends
from fdb.session_settings import SessionSettings

RUN_SCHEMA = "fdb-run-1"
SERVER_REPORT_SCHEMA = "fdb-server-report-1"
REPEAT_SERVER_SCHEMA = "fdb-repeat-server-1"
REPEAT_SERVER_FILE = "server.json"  # repeat-N/server.json: the server(s) of that repeat


class Probe(BaseModel):
    """One GET of a self-report endpoint. ``ok``: HTTP 200 with a JSON body (kept, secrets
    redacted); ``absent``: the server does not have the endpoint (404, 405, 501); ``failed``:
    any other answer, or none, with a one-line ``reason`` (never payload bytes)."""

    path: str
    status: Literal["ok", "absent", "failed"]
    http_status: int | None = None
    reason: str | None = None
    body: Any = None


class ServerReport(BaseModel):
    """What a server said about itself, probed once before recording. ``system``, ``model``,
    ``service_nodes`` and ``max_sessions`` come from /v1/realtime/capabilities (``system`` and
    ``model`` from /health when capabilities is missing or does not say), ``models`` are the ids
    /v1/models lists, ``backends`` the model backends /health names (fdb's server: role -> name,
    version, checkpoint sha256); each is null when no probe reported it."""

    schema_: str = Field(SERVER_REPORT_SCHEMA, alias="schema")
    url: str  # the base URL probed, secrets redacted
    system: str | None = None
    model: str | None = None
    service_nodes: dict[str, Any] | None = (
        None  # role -> what the server says of that node (kind, model, ...)
    )
    models: list[str] | None = None
    backends: dict[str, Any] | None = None
    max_sessions: int | None = None
    probes: list[Probe] = Field(default_factory=list)

    model_config = {"populate_by_name": True}

    def identity(self) -> tuple:
        """What tells one server from another (not how the probes went)."""
        return (self.system, self.model, self.service_nodes, self.models, self.backends)

    def probe(self, path: str) -> Probe | None:
        return next((p for p in self.probes if p.path == path), None)


class ServerProvenance(BaseModel):
    """Who produced a sweep's or a tts-bench's numbers: the server's URL (secrets redacted; null
    for the bundled one), the revisions the user declared, and what the server reported."""

    url: str | None = None
    bundled_system: str | None = None  # the bundled system started for the measurement, else null
    server_revision: str | None = None
    model_revision: str | None = None
    dataset_revision: str | None = None
    reported: ServerReport | None = None


class RepeatServer(BaseModel):
    """repeat-N/server.json: the revisions declared and each server's report for that repeat
    (one per bundled model server with --gpus; the --url server otherwise)."""

    schema_: str = Field(REPEAT_SERVER_SCHEMA, alias="schema")
    server_revision: str | None = None
    model_revision: str | None = None
    servers: list[ServerReport] = Field(default_factory=list)

    model_config = {"populate_by_name": True}


class DatasetUse(BaseModel):
    dataset: str
    root: str
    source: str  # official | synthetic | user
    revision: str | None  # the tree's .revision file, else fdb's content hash of the tree
    declared_revision: str | None = None  # --dataset-revision: the user's label, recorded as given
    selection: dict  # SelectionSpec.normalized()
    sample_ids: list[str]
    files: dict[str, str] = Field(
        default_factory=dict
    )  # "subset/id/name" -> sha256 (pinning.sample_inventory)


class ServerUse(BaseModel):
    url: str | None  # None: the bundled server, started by generate; secrets in the query redacted
    system: (
        str | None
    )  # the bundled system, else what the --url server reports (null when it does not say)
    model: str | None  # --model (sent in session.update), else what the server reports, else null
    turn_detection: dict | None
    profile: str = "turn-based"
    session: SessionSettings | None = (
        None  # instructions, voice, sampling, reference audio (by sha256)
    )
    server_revision: str | None = None  # --server-revision, as given
    model_revision: str | None = None  # --model-revision, as given
    reported: ServerReport | None = (
        None  # what the server said about itself at the run's first repeat
    )


class RunManifest(BaseModel):
    schema_: str = Field(RUN_SCHEMA, alias="schema")
    run_name: str
    datasets: dict[str, DatasetUse]  # "v1.0" / "v1.5"; absent = left out
    server: ServerUse
    num_shards: int
    gpus: int = 1  # bundled model servers (one per --gpus index)
    judge: str | None = None  # JUDGE at generate time
    settings: dict[str, str] = Field(
        default_factory=dict
    )  # MODEL_PATH, MODEL_REVISION, JUDGE_MODEL_PATH when set
    scoring: ScoringBackends | None = (
        None  # the ASR/MOS/speaker backends the first `fdb asr` chose; null before
    )
    provenance: dict[str, object] = Field(default_factory=dict)

    model_config = {"populate_by_name": True}


def load_manifest(run: RunPaths) -> RunManifest | None:
    """The run's run.json, or None before its first repeat. A damaged file (truncated, wrong types,
    a missing field) is one FdbError naming it: fdb cannot rebuild what the repeats shared."""
    if not run.manifest.exists():
        return None
    return load_record(
        run.manifest,
        RunManifest,
        f"run manifest ({RUN_SCHEMA})",
        "run.json records what every repeat of the run shares and cannot be rebuilt: "
        "restore it from a copy, or record into a new --run-name",
    )


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
            raise FdbError(
                f"{repeat.root} selects different {label} than the earlier repeats",
                "pass the same options, or use a new run name",
            )
        if (
            old
            and cur
            and old.declared_revision
            and cur.declared_revision
            and old.declared_revision != cur.declared_revision
        ):
            raise FdbError(
                f"--dataset-revision {cur.declared_revision} for {dataset} differs from the run's "
                f"{old.declared_revision}",
                "keep the settings fixed across repeats, or use a new run name",
            )
    if previous.judge and new.judge and previous.judge != new.judge:
        raise FdbError(
            f"JUDGE={new.judge} differs from the run's JUDGE={previous.judge}",
            "keep the judge fixed across repeats, or use a new run name",
        )
    if previous.gpus != new.gpus:
        raise FdbError(
            f"--gpus lists {new.gpus} GPU(s), the run's earlier repeats used {previous.gpus}",
            "keep the settings fixed across repeats, or use a new run name",
        )
    if previous.num_shards != new.num_shards:
        raise FdbError(
            f"--num-shards {new.num_shards} differs from the run's {previous.num_shards}",
            "keep the settings fixed across repeats, or use a new run name",
        )
    old_server, server = previous.server, new.server
    if (old_server.url, old_server.profile) != (server.url, server.profile) or (
        server.url is None and old_server.system != server.system
    ):
        raise FdbError(
            "the server differs from the earlier repeats of this run",
            "use the same --url/--system, or use a new run name",
        )
    if old_server.session != server.session:
        raise FdbError(
            "the session settings (--instructions, --voice, --sampling, --reference-audio) differ "
            "from the earlier repeats of this run",
            "pass the same settings, or use a new run name",
        )
    for flag, old, cur in (
        ("--server-revision", old_server.server_revision, server.server_revision),
        ("--model-revision", old_server.model_revision, server.model_revision),
    ):
        if old and cur and old != cur:
            raise FdbError(
                f"{flag} {cur} differs from the run's {old}",
                "a new server or model is a new run: use a new run name",
            )


def check_same_server(previous: RunManifest, report: ServerReport | None) -> None:
    """A --url server that now reports another system or model than at the run's first repeat is
    another server (a probe that says nothing proves nothing either way)."""
    old = previous.server.reported
    if old is None or report is None:
        return
    for what, before, now in (
        ("system", old.system, report.system),
        ("model", old.model, report.model),
    ):
        if before and now and before != now:
            raise FdbError(
                f"the server at {report.url} reports {what} {now!r}, the run's earlier repeats "
                f"recorded {before!r}",
                "record that server into a new --run-name",
            )


def _refuse_dataset_change(
    dataset: str, earlier_left_out: bool, repeat: RepeatPaths, run_name: str
) -> None:
    other = "v1.5" if dataset == "v1.0" else "v1.0"
    flag = "--v10-per-subset 0" if dataset == "v1.0" else "--v15-per-subset 0"
    if earlier_left_out:
        raise FdbError(
            f"{repeat.root} is a {other}-only repeat: the earlier repeats of {run_name} left "
            f"{dataset} out",
            f"continue with {flag} added, or use a new run name",
        )
    raise FdbError(
        f"{repeat.root} would have {dataset} left out, unlike the earlier repeats of {run_name}",
        "pass the same selection options as before, or use a new run name",
    )


def check_files(
    dataset: str, root: str, pinned: dict[str, str], current: dict[str, str], since: str
) -> None:
    """Refuse to continue when a selected sample's file differs from the pinned inventory."""
    changes = inventory_changes(pinned, current)
    if changes:
        more = f" (and {len(changes) - 1} more)" if len(changes) > 1 else ""
        raise FdbError(
            f"{dataset} dataset file {root}/{changes[0]} since {since}{more}",
            "restore the dataset files the run pinned in run.json, or use a new run name",
        )


def save_manifest(run: RunPaths, manifest: RunManifest) -> None:
    atomic_write_json(run.manifest, manifest.model_dump(mode="json", by_alias=True))


def repeat_server_path(repeat: RepeatPaths) -> Path:
    return repeat.root / REPEAT_SERVER_FILE


def save_repeat_server(repeat: RepeatPaths, record: RepeatServer) -> None:
    atomic_write_json(repeat_server_path(repeat), record.model_dump(mode="json", by_alias=True))


def load_repeat_server(repeat: RepeatPaths) -> RepeatServer | None:
    """repeat-N/server.json, or None for a repeat recorded before fdb wrote it."""
    path = repeat_server_path(repeat)
    if not path.exists():
        return None
    return load_record(
        path,
        RepeatServer,
        f"repeat server record ({REPEAT_SERVER_SCHEMA})",
        "it is rewritten only by recording the repeat again; delete it to leave the repeat's "
        "server unreported",
    )
