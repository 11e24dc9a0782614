"""Typed options of the runbook verbs (what a run records and compares between repeats)."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, Field

from fdb.errors import FdbError

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
    profile: str = "turn-based"  # the recorder's protocol dialect (fdb/profiles.py)
    turn_detection: dict | None = Field(default_factory=lambda: dict(DEFAULT_TURN_DETECTION))
    num_shards: int = 1
    gpus: str | None = None  # --gpus 0,1: one bundled model server per listed GPU
    all_stages: bool = False
    log_level: str = "info"
    v15_root: Path | None = None
    v10_root: Path | None = None


def parse_turn_detection(raw: str | None, profile: str = "turn-based") -> dict | None:
    """--turn-detection checked by the profile: required (server_vad 500 ms by default) for the
    turn-based and legacy dialects, refused for native ones."""
    from fdb.profiles import get_profile

    dialect = get_profile(profile)
    if raw is None and dialect.turn_detection_required:
        return dict(DEFAULT_TURN_DETECTION)
    if raw is not None:
        try:
            json.loads(raw)
        except json.JSONDecodeError as exc:
            raise FdbError(f"--turn-detection is not JSON: {exc}",
                           'pass e.g. \'{"type": "server_vad", "silence_duration_ms": 500}\'') from exc
    return dialect.validate_turn_detection(raw)
