"""Typed records for the files that cross package boundaries (see docs/formats.md)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

EXPORT_SCHEMA = "fdb-export-1"
ASR_SCHEMA = "fdb-asr-1"


class ExportSample(BaseModel):
    sample_id: str  # "subset/id"
    subset: str
    id: str
    eligible: bool
    reasons: list[str] = Field(default_factory=list)
    T_s: float | None = None
    input_samples: int | None = None
    files: dict[str, str] = Field(default_factory=dict)  # name -> sha256
    barge_in_cuts: int = 0
    verdict: Literal["pass", "fail", "missing"] = "pass"


class ExportManifest(BaseModel):
    schema_: str = Field(EXPORT_SCHEMA, alias="schema")
    dataset: Literal["v1.0", "v1.5"]
    dataset_revision: str | None = None
    trace_format: str | None = "realtime-turn-based-pcm16-v1"  # null: no session was recorded
    samples: list[ExportSample]
    provenance: dict[str, object] = Field(default_factory=dict)

    model_config = {"populate_by_name": True}

    def dump(self) -> dict:
        return self.model_dump(mode="json", by_alias=True)


class AsrSampleReceipt(BaseModel):
    sample_id: str
    status: Literal["ok", "failed", "skipped"]
    error: str | None = None
    cut_at_s: float | None = None
    output_wav_sha256: str | None = None
    output_json_sha256: str | None = None
    words: int | None = None


class AsrReceipt(BaseModel):
    schema_: str = Field(ASR_SCHEMA, alias="schema")
    backend: dict[str, object]
    manifest_sha256: str
    samples: list[AsrSampleReceipt]
    provenance: dict[str, object] = Field(default_factory=dict)

    model_config = {"populate_by_name": True}

    def dump(self) -> dict:
        return self.model_dump(mode="json", by_alias=True)
