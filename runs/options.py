"""Typed options of the runbook verbs (what a run records and compares between repeats)."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, Field

from fdb.dialects import get_dialect
from fdb.errors import FdbError
from fdb.session_settings import SessionSettings

DEFAULT_TURN_DETECTION = {"type": "server_vad", "silence_duration_ms": 500}


class DatasetChoice(BaseModel):
    """What to select from one dataset (the runbook's --v15-* / --v10-* options)."""

    per_subset: str | None = None  # an integer or "all"; None = the default 12
    subset_counts: list[str] = Field(default_factory=list)  # NAME=N
    sample_ids: list[str] = Field(default_factory=list)  # NAME/ID
    sample_ids_file: Path | None = None


class GenerateOptions(BaseModel):
    run_name: str
    repeat: int = 1
    v15: DatasetChoice = DatasetChoice()
    v10: DatasetChoice = DatasetChoice()
    url: str | None = None
    model: str | None = None
    system: str = "embedded-cascade"
    profile: str = "turn-based"  # the recorder's protocol dialect (fdb/dialects)
    turn_detection: dict | None = Field(default_factory=lambda: dict(DEFAULT_TURN_DETECTION))
    session: SessionSettings | None = None  # --instructions, --voice, --sampling, --reference-audio
    num_shards: int = 1
    gpus: str | None = None  # --gpus 0,1: one bundled model server per listed GPU
    all_stages: bool = False
    log_level: str = "info"
    v15_root: Path | None = None
    v10_root: Path | None = None
    server_revision: str | None = (
        None  # --server-revision: the server's source revision, as the user declares it
    )
    model_revision: str | None = None  # --model-revision: the served model snapshot
    dataset_revision: str | None = None  # --dataset-revision: the label of every selected dataset
    v15_dataset_revision: str | None = (
        None  # --v15-dataset-revision / --v10-dataset-revision: per dataset
    )
    v10_dataset_revision: str | None = None

    def declared_revision(self, dataset: str) -> str | None:
        """The revision label the user gave for ``dataset``
        (its own option before --dataset-revision)."""
        own = self.v15_dataset_revision if dataset == "v1.5" else self.v10_dataset_revision
        return own or self.dataset_revision


def parse_turn_detection(raw: str | None, profile: str = "turn-based") -> dict | None:
    """--turn-detection checked by the profile: required (server_vad 500 ms by default) for the
    turn-based and legacy dialects, refused for native ones."""
    dialect = get_dialect(profile)
    if raw is None and dialect.turn_detection.required:
        return dict(DEFAULT_TURN_DETECTION)
    if raw is not None:
        try:
            json.loads(raw)
        except json.JSONDecodeError as exc:
            raise FdbError(
                f"--turn-detection is not JSON: {exc}",
                'pass e.g. \'{"type": "server_vad", "silence_duration_ms": 500}\'',
            ) from exc
    return dialect.validate_turn_detection(raw)


def revision_option(value: str | None, option: str) -> str | None:
    """A revision label as given (surrounding blanks dropped); an empty one is refused, since
    `$(cat missing-file)` gives one and would record nothing without saying so."""
    if value is None:
        return None
    value = value.strip()
    if not value or any(not c.isprintable() for c in value) or len(value) > 200:
        raise FdbError(
            f"{option} {value!r} is not a revision",
            f"pass a commit hash or tag, e.g. {option} 3e799c45 (an empty value often means the "
            "command or file that should give it failed)",
        )
    return value
