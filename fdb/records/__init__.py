"""Typed records for the files that cross package boundaries (see docs/formats.md), with their
readers: every phase writes through them and every later phase (and reports) reads through them.

Here: the export manifest (``fdb-export-1``), the ASR receipts ``asr.json`` (v1.0 ``fdb-asr-1``,
v1.5 ``fdb-v1.5-asr-1``) and the official-schema ASR transcript (``output.json``). The
result records live in the submodules: ``v10`` (unified.json, unified-samples.jsonl),
``v10_reference`` (official.json, evaluator.json), ``v15`` (v1.5 timing), ``listening``,
``judge`` (behavior, semantic, relevance, judge.json), ``serving`` (sweep rows, capacity) and
``tts`` (tts-bench run.json and tts.json, their rows, Seed-TTS quality). The recorded sessions'
records are in ``fdb.session_records`` and ``fdb.tts_records``."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal, Self, TypeVar

from pydantic import BaseModel, Field, ValidationError

from fdb.errors import FdbError
from fdb.io import Record, read_json, read_jsonl, sha256_file

EXPORT_SCHEMA = "fdb-export-1"
ASR_SCHEMA = "fdb-asr-1"
V15_ASR_SCHEMA = "fdb-v1.5-asr-1"
ASR_FIX = (
    "rerun the asr phase, which writes the receipt again: python -m fdb asr --run-name RUN "
    "(or python -m fdb score transcribe --tree DIR)"
)


Model = TypeVar("Model", bound=BaseModel)


def load_record(model: type[Model], path: Path, fix: str) -> Model | None:
    """``path`` read as ``model``; None when the file does not exist. A file that is not valid
    JSON or not such a record is an FdbError naming the file and its first bad field (``fix``
    says what to do). Not ``fdb.io.load_record``, which reads the run layout's own files (run.json,
    server.json): there a missing file is an error and the message names the record's kind."""
    path = Path(path)
    if not path.exists():
        return None
    try:
        return model.model_validate(read_json(path))
    except ValidationError as exc:
        first = exc.errors()[0]
        raise FdbError(
            f"{path}: {'.'.join(str(p) for p in first['loc'])}: {first['msg']}", fix
        ) from exc
    except ValueError as exc:
        raise FdbError(f"{path} is not valid JSON ({str(exc).splitlines()[0]})", fix) from exc


def load_rows(model: type[Model], path: Path, fix: str) -> list[Model]:
    """The lines of a JSONL file as ``model`` records, in file order; no rows when the file does
    not exist. A line that is not such a record is an FdbError naming the file (``fix`` says what
    to do)."""
    path = Path(path)
    if not path.exists():
        return []
    try:
        return read_jsonl(path, model)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise FdbError(
            f"{path}: {'.'.join(str(p) for p in first['loc'])}: {first['msg']}", fix
        ) from exc
    except ValueError as exc:
        raise FdbError(f"{path} is not valid JSON lines ({str(exc).splitlines()[0]})", fix) from exc


class FileRecord(Record):
    """A record that is one JSON file, read back by :meth:`load` (``load_record``): None when the
    file does not exist, an FdbError naming it, its first bad field and ``fix`` (by default the
    class's ``FIX``) when it is not JSON or not such a record. A record whose missing file is an
    error (``TtsRun``, ``TtsReport``) overrides ``load``."""

    FIX: ClassVar[str]  # what to do about a damaged file, unless the caller knows better

    @classmethod
    def load(cls, path: Path, fix: str | None = None) -> Self | None:
        return load_record(cls, path, cls.FIX if fix is None else fix)


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


class ExportManifest(FileRecord):
    """An export's manifest.json (``fdb-export-1``): every sample of the tree, its eligibility
    and files."""

    FIX = (
        "cut the windows again from the recording "
        "(python -m fdb generate --run-name RUN --repeat N --export-only)"
    )
    schema_: str = Field(EXPORT_SCHEMA, alias="schema")
    dataset: Literal["v1.0", "v1.5"]
    dataset_revision: str | None = None
    trace_format: str | None = "realtime-turn-based-pcm16-v1"  # null: no session was recorded
    samples: list[ExportSample]
    provenance: dict[str, object] = Field(default_factory=dict)

    model_config = {"populate_by_name": True}

    def select(self, only: list[str] | None, where: str = "the manifest") -> list[ExportSample]:
        """The samples named by ``only`` ("category/id", in the manifest's order), or all of them
        without it; a name the manifest does not hold raises FdbError naming it."""
        if not only:
            return list(self.samples)
        held = {s.sample_id for s in self.samples}
        unknown = [sid for sid in only if sid not in held]
        if unknown:
            raise FdbError(
                f"{where} holds no sample {unknown[0]}"
                + (f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else ""),
                "pass --only category/id for samples of that export",
            )
        wanted = set(only)
        return [s for s in self.samples if s.sample_id in wanted]


def load_v15_manifest(tree: Path) -> tuple[ExportManifest, str]:
    """``reference-manifest.json`` (a v1.5 ``fdb-export-1`` manifest) and its sha256."""
    path = tree / "reference-manifest.json"
    fix = "point --tree at a v1.5 reference-audio export"
    manifest = ExportManifest.load(path, fix)
    if manifest is None:
        raise FdbError(f"{path} is missing", fix)
    if manifest.dataset != "v1.5":
        raise FdbError(f"{path} is a {manifest.dataset} export, not v1.5")
    return manifest, sha256_file(path)


def asr_backend(tree: Path) -> dict | None:
    """The backend identity that ``tree/asr.json`` (a v1.0 or v1.5 ASR receipt) records; None
    without a receipt or an identity in it. A damaged receipt is an FdbError naming it."""
    head = AsrReceiptHead.load(Path(tree) / "asr.json")
    return (head.backend or None) if head is not None else None


TRANSCRIPT_FIX = (
    "delete it and rerun the asr phase (`python -m fdb asr --run-name RUN`), which transcribes "
    "the sample again"
)


class TranscriptChunk(BaseModel):
    """One word of an official ASR transcript: its text and [start, end] in seconds (end None:
    the recognizer gave none)."""

    text: str
    timestamp: tuple[float, float | None]


class OfficialTranscript(FileRecord):
    """An ASR transcript in the official schema, as the asr phases write it (v1.0
    ``<subset>/<id>/output.json``, v1.5 ``input.json``, ``output.json`` ...): the words joined
    by single spaces and one chunk per word, in order."""

    FIX = TRANSCRIPT_FIX

    text: str
    chunks: list[TranscriptChunk]


class AsrSampleReceipt(BaseModel):
    sample_id: str
    status: Literal["ok", "failed", "skipped"]
    error: str | None = None
    cut_at_s: float | None = None
    output_wav_sha256: str | None = None
    output_json_sha256: str | None = None
    words: int | None = None


class AsrReceipt(FileRecord):
    """A v1.0 tree's ``asr.json`` (``fdb-asr-1``): what ``scorers.asr_phase`` wrote for each
    sample of ``manifest.json``."""

    FIX = ASR_FIX

    schema_: str = Field(ASR_SCHEMA, alias="schema")
    backend: dict[str, object]
    manifest_sha256: str
    samples: list[AsrSampleReceipt]
    provenance: dict[str, object] = Field(default_factory=dict)

    model_config = {"populate_by_name": True}


class V15AsrFile(BaseModel):
    """One WAV of a v1.5 pair: its transcript ``<stem>.json``."""

    status: Literal["ok", "failed"]
    error: str | None = None
    wav_sha256: str | None = None
    json_sha256: str | None = None
    words: int | None = None


class V15AsrPair(BaseModel):
    sample_id: str
    status: Literal["ok", "failed", "skipped"]
    error: str | None = None
    files: dict[str, V15AsrFile] = Field(default_factory=dict)  # keyed by WAV name


class V15AsrReceipt(FileRecord):
    """A v1.5 ``reference-audio`` tree's ``asr.json`` (``fdb-v1.5-asr-1``): what
    ``scorers.asr_v15`` wrote for each pair of ``reference-manifest.json``, per WAV."""

    FIX = ASR_FIX

    schema_: str = Field(V15_ASR_SCHEMA, alias="schema")
    backend: dict[str, object]
    manifest_sha256: str
    samples: list[V15AsrPair]
    provenance: dict[str, object] = Field(default_factory=dict)

    model_config = {"populate_by_name": True}


class AsrReceiptHead(FileRecord):
    """What every ``asr.json`` names, whatever its version (v1.0, v1.5, a receipt written
    before either schema): the backend that transcribed the tree. For readers that need only the
    identity and do not know which tree they read."""

    FIX = ASR_FIX

    schema_: str | None = Field(None, alias="schema")
    backend: dict[str, object] | None = None

    model_config = {"populate_by_name": True}
