"""Typed records for the files that cross package boundaries (see docs/formats.md), with their
readers: every phase writes through them and every later phase (and reports) reads through them.

Here: the export manifest (``fdb-export-1``) and the v1.0 ASR receipt (``fdb-asr-1``). The
result records live in the submodules: ``v10`` (unified.json, unified-samples.jsonl),
``v10_reference`` (official.json, evaluator.json), ``v15`` (v1.5 timing), ``listening``,
``judge`` (behavior, semantic, relevance, judge.json), ``serving`` (sweep rows, capacity) and
``tts`` (tts-bench rows, Seed-TTS quality). The recorded sessions' records are in
``fdb.session_records`` and ``fdb.tts_records``."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from fdb.errors import FdbError

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

    def select(self, only: list[str] | None, where: str = "the manifest") -> list[ExportSample]:
        """The samples named by ``only`` ("category/id", in the manifest's order), or all of them
        without it; a name the manifest does not hold raises FdbError naming it."""
        if not only:
            return list(self.samples)
        held = {s.sample_id for s in self.samples}
        unknown = [sid for sid in only if sid not in held]
        if unknown:
            raise FdbError(f"{where} holds no sample {unknown[0]}"
                           + (f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else ""),
                           "pass --only category/id for samples of that export")
        wanted = set(only)
        return [s for s in self.samples if s.sample_id in wanted]


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
