"""What the judges read from a repeat (docs/formats.md), as typed records.

v1.5: ``sample-ids.txt`` (the selection) and ``reference-audio/reference-manifest.json``; each
eligible pair's folder holds the four ASR transcripts (official schema ``{"text", "chunks"}``)
and ``metadata.json``. v1.0: ``v10/sample-ids.txt`` and ``v10/reference/manifest.json``; each
eligible interruption sample holds ``output.json`` and ``interrupt.json``.

Every selected sample is returned, whatever its state: an ineligible one keeps the export's
reasons, and one whose transcripts are missing or unreadable is marked, never dropped.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from fdb.datasets.types import INTERRUPTION, V15_CATEGORIES
from fdb.errors import FdbError
from fdb.records import ExportManifest, ExportSample, OfficialTranscript

TRANSCRIPTS = ("clean_input", "input", "clean_output", "output")  # <name>.json


class PairInput(BaseModel):
    sample_id: str
    category: str
    id: str
    eligible: bool
    reasons: list[str] = Field(default_factory=list)
    transcripts: dict[str, OfficialTranscript] = Field(default_factory=dict)
    missing: list[str] = Field(default_factory=list)  # transcript files missing or unreadable
    metadata: dict[str, Any] | None = None

    @property
    def ready(self) -> bool:
        return self.eligible and not self.missing


class InterruptInput(BaseModel):
    sample_id: str
    id: str
    eligible: bool
    reasons: list[str] = Field(default_factory=list)
    output: OfficialTranscript | None = None
    interrupt: dict[str, Any] | None = None  # interrupt.json[0]
    missing: list[str] = Field(default_factory=list)


def id_key(sample_id: str) -> tuple:
    cat, _, ident = sample_id.partition("/")
    order = V15_CATEGORIES.index(cat) if cat in V15_CATEGORIES else len(V15_CATEGORIES)
    return (order, cat, int(ident) if ident.isdigit() else float("inf"), ident)


def _read_ids(path: Path) -> list[str] | None:
    if not path.exists():
        return None
    return [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _manifest(path: Path) -> ExportManifest:
    fix = (
        f"delete {path.parent} and cut the windows again from the recording with "
        f"{_export_only(path)}"
    )
    try:
        manifest = ExportManifest.load(path, fix)
    except FdbError as exc:  # the record's reason, under the judges' own wording
        why = exc.message.removeprefix(f"{path}: ").removeprefix(f"{path} ")
        raise FdbError(f"{path} is not a valid export manifest: {why}", fix) from exc
    if manifest is None:
        raise FdbError(
            f"{path} is missing",
            "generate recorded this dataset but did not finish its "
            f"export; the recording is kept: cut the windows again with {_export_only(path)}",
        )
    return manifest


def _export_only(manifest: Path) -> str:
    """The command that recovers the interrupted export of the repeat holding ``manifest``."""
    repeat = next(
        (p for p in manifest.parents if p.name.startswith("repeat-") and p.name[7:].isdigit()), None
    )
    if repeat is None:
        return "python -m fdb generate --run-name NAME --repeat N --export-only"
    return (
        f"python -m fdb generate --run-name {repeat.parent.name} --repeat {repeat.name[7:]} "
        "--export-only"
    )


def transcript_or_none(path: Path) -> OfficialTranscript | None:
    """An official ASR transcript, or None when the file is missing, unreadable or not of that
    schema."""
    try:
        return OfficialTranscript.load(path)
    except (OSError, FdbError):
        return None


def _json_or_none(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def _selection(
    ids_file: Path, manifest_path: Path, subset: str | None = None
) -> tuple[list[str], ExportManifest] | None:
    """Selected ids (sample-ids.txt, else the manifest's) and the manifest; None when left out."""
    ids = _read_ids(ids_file)
    if ids is not None and subset is not None:
        ids = [i for i in ids if i.partition("/")[0] == subset]
    if not ids and not manifest_path.exists():
        return None
    manifest = _manifest(manifest_path)
    listed = [s.sample_id for s in manifest.samples if subset is None or s.subset == subset]
    ids = ids or listed
    return (ids, manifest) if ids else None


def load_v15_pairs(repeat_dir: Path) -> list[PairInput] | None:
    """Every selected v1.5 pair, in category then numeric id order; None when v1.5 is left out."""
    tree = Path(repeat_dir) / "reference-audio"
    found = _selection(Path(repeat_dir) / "sample-ids.txt", tree / "reference-manifest.json")
    if found is None:
        return None
    ids, manifest = found
    by_id = {s.sample_id: s for s in manifest.samples}
    return [_pair(tree, sid, by_id.get(sid)) for sid in sorted(set(ids), key=id_key)]


def load_v15_tree_pairs(tree: Path, only: list[str] | None = None) -> list[PairInput]:
    """The pairs of an exported reference-audio tree (``only``: just these "category/id"), in
    category then numeric id order; every one, whatever its state, as ``load_v15_pairs``."""
    path = Path(tree) / "reference-manifest.json"
    chosen = _manifest(path).select(only, str(path))
    return [
        _pair(Path(tree), s.sample_id, s) for s in sorted(chosen, key=lambda s: id_key(s.sample_id))
    ]


def _pair(tree: Path, sample_id: str, sample: ExportSample | None) -> PairInput:
    category, _, ident = sample_id.partition("/")
    if sample is None:
        return PairInput(
            sample_id=sample_id,
            category=category,
            id=ident,
            eligible=False,
            reasons=["not in reference-manifest.json"],
        )
    pair = PairInput(
        sample_id=sample_id,
        category=sample.subset,
        id=sample.id,
        eligible=sample.eligible,
        reasons=list(sample.reasons),
    )
    if not sample.eligible:
        return pair
    folder = tree / sample.subset / sample.id
    for name in TRANSCRIPTS:
        obj = transcript_or_none(folder / f"{name}.json")
        if obj is None:
            pair.missing.append(f"{name}.json")
        else:
            pair.transcripts[name] = obj
    meta = _json_or_none(folder / "metadata.json")
    pair.metadata = meta if isinstance(meta, dict) else None
    return pair


def load_interruptions(repeat_dir: Path) -> list[InterruptInput] | None:
    """Every selected v1.0 interruption sample; None when the repeat has none."""
    tree = Path(repeat_dir) / "v10" / "reference"
    found = _selection(
        Path(repeat_dir) / "v10" / "sample-ids.txt", tree / "manifest.json", INTERRUPTION
    )
    if found is None:
        return None
    ids, manifest = found
    by_id = {s.sample_id: s for s in manifest.samples}
    out = []
    for sid in sorted(set(ids), key=id_key):
        sample = by_id.get(sid)
        ident = sid.partition("/")[2]
        if sample is None:
            out.append(
                InterruptInput(
                    sample_id=sid, id=ident, eligible=False, reasons=["not in manifest.json"]
                )
            )
            continue
        item = InterruptInput(
            sample_id=sid, id=ident, eligible=sample.eligible, reasons=list(sample.reasons)
        )
        if sample.eligible:
            folder = tree / sample.subset / sample.id
            item.output = transcript_or_none(folder / "output.json")
            annotation = _json_or_none(folder / "interrupt.json")
            ok = isinstance(annotation, list) and annotation and isinstance(annotation[0], dict)
            item.interrupt = annotation[0] if ok else None
            item.missing = [
                n
                for n, v in (("output.json", item.output), ("interrupt.json", item.interrupt))
                if v is None
            ]
        out.append(item)
    return out
