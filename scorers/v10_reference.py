"""The reference columns next to the unified v1.0 metrics: ``official.json`` (official rules,
clean-room) and ``evaluator.json`` (the original evaluator), each shown only when it was
computed from the same manifest.json and asr.json as the unified numbers (spec "Run": if
either hash differs, the column is left out and a line says which input changed)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from fdb.io import read_json, sha256_file
from scorers.v10_evaluator import EvaluatorSummary
from scorers.v10_official import OfficialSummary


@dataclass
class ReferenceColumns:
    official: OfficialSummary | None = None
    evaluator: EvaluatorSummary | None = None
    notes: list[str] = field(default_factory=list)


def _changed(name: str, doc_manifest: str, doc_asr: str, manifest_sha: str, asr_sha: str) -> str | None:
    changed = [what for what, a, b in (("manifest.json", doc_manifest, manifest_sha), ("asr.json", doc_asr, asr_sha))
               if a != b]
    if not changed:
        return None
    return f"{name} left out: {' and '.join(changed)} changed since it was written (rerun it on this tree)"


def load_reference(tree: Path, manifest_sha: str, asr_sha: str) -> ReferenceColumns:
    """The reference files of ``tree`` that match the given input hashes, and notes for the rest."""
    columns = ReferenceColumns()
    for name, model, attr in (("official.json", OfficialSummary, "official"),
                              ("evaluator.json", EvaluatorSummary, "evaluator")):
        path = Path(tree) / name
        if not path.exists():
            continue
        try:
            doc = model.model_validate(read_json(path))
        except ValueError as exc:
            columns.notes.append(f"{name} left out: it does not parse ({str(exc).splitlines()[0]})")
            continue
        note = _changed(name, doc.manifest_sha256, doc.asr_sha256, manifest_sha, asr_sha)
        if note:
            columns.notes.append(note)
        else:
            setattr(columns, attr, doc)
    return columns


def current_reference(tree: Path) -> ReferenceColumns | None:
    """``load_reference`` against the tree's current manifest.json and asr.json (None when
    either is missing)."""
    tree = Path(tree)
    if not all((tree / name).exists() for name in ("manifest.json", "asr.json")):
        return None
    return load_reference(tree, sha256_file(tree / "manifest.json"), sha256_file(tree / "asr.json"))
