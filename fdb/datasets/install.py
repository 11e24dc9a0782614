"""What ``python -m fdb setup`` does with the official trees: find, link, verify and pin them.

An official tree given by path (``--fdb-v10``, ``--fdb-v15``, ``--seed-tts`` or their
environment variables) is linked at ``$FDB_WORK/dataset/{v1.0,v1.5,seed-tts}`` (a symlink, so
nothing is copied and later runs find it there); a tree the user put at that place directly is
used as it is. Either way it is loaded in full (every sample's WAV headers and annotations, every
list row and wav path) and its content hash is written to ``$FDB_WORK/dataset/<name>.revision``.
Rerunning repeats the checks and rewrites the revision, noting when the content changed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from fdb.datasets.official import list_ids, load_v10, load_v15
from fdb.datasets.pinning import read_revision, write_revision
from fdb.datasets.seedtts import load_seedtts
from fdb.datasets.synthetic import is_synthetic
from fdb.datasets.types import SampleProblem
from fdb.errors import FdbError

TREE_LABEL = {"v1.0": "FDB v1.0", "v1.5": "FDB v1.5", "seed-tts": "Seed-TTS"}
OFFICIAL_TOTAL = {
    "v1.0": 727,
    "v1.5": 498,
}  # v1.5: 99 backchannel pairs listed, 98 seen in the archive


class TreeStatus(BaseModel):
    """One dataset's state after setup (a row of the readiness table)."""

    key: str  # v1.0 | v1.5 | seed-tts
    source: Literal["official", "synthetic", "missing"]
    root: Path | None = None
    counts: dict[str, int] = Field(default_factory=dict)  # subset / list -> samples
    problems: list[SampleProblem] = Field(default_factory=list)
    revision: str | None = None
    notes: list[str] = Field(default_factory=list)

    @property
    def label(self) -> str:
        return TREE_LABEL[self.key]

    @property
    def errors(self) -> list[SampleProblem]:
        return [p for p in self.problems if p.kind == "error"]

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def link_tree(given: Path | None, link: Path) -> Path | None:
    """Point ``link`` at ``given`` and return the tree to verify: ``link`` when it now holds a
    tree, None when no tree is given or installed. Refuses to replace a real directory."""
    if given is None:
        return link if link.is_dir() else None
    given = Path(given).expanduser()
    if not given.is_dir():
        raise FdbError(
            f"the dataset path {given} does not exist or is not a directory",
            "pass the unpacked official tree, or leave the option and its variable unset",
        )
    if link.exists() and given.resolve() == link.resolve():
        return link
    if link.is_symlink():
        link.unlink()
    elif link.exists():
        raise FdbError(
            f"{link} already holds a dataset tree, so {given} cannot be linked there",
            f"remove or rename {link}, or drop the option to keep using it",
        )
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(given.resolve(), target_is_directory=True)
    return link


def _verify(key: str, tree: Path) -> tuple[dict[str, int], list[SampleProblem]]:
    """Load a tree in full; (samples per subset or list, problems)."""
    if key == "seed-tts":
        loaded, problems = load_seedtts(tree, strict=False)
        return loaded.counts, problems
    loader = load_v10 if key == "v1.0" else load_v15
    loaded, problems = loader(tree, strict=False)
    return {name: len(items) for name, items in loaded.items()}, problems


def _refuse_synthetic(tree: Path) -> None:
    """fdb's synthetic trees must never pass for official ones (their README marks them)."""
    if is_synthetic(Path(tree).expanduser().resolve().parent):
        raise FdbError(
            f"{tree} is part of fdb's synthetic dataset, not an official tree",
            "leave the option out: runs use the synthetic set by themselves when no official tree "
            "is set up",
        )


def install_official(key: str, given: Path | None, dataset_dir: Path) -> TreeStatus:
    """Link (when given), verify and pin one official tree; ``missing`` when there is none."""
    link = Path(dataset_dir) / key
    if given is not None and Path(given).is_dir():
        _refuse_synthetic(given)
    tree = link_tree(given, link)
    if tree is None:
        return TreeStatus(key=key, source="missing")
    _refuse_synthetic(tree)
    counts, problems = _verify(key, tree)
    revision_file = Path(dataset_dir) / f"{key}.revision"
    before = read_revision(revision_file)
    revision = write_revision(tree, revision_file)
    notes = [f"linked to {os.readlink(link)}"] if link.is_symlink() else []
    if before is not None and before != revision:
        notes.append(f"content changed since the last setup ({before[:12]}… -> {revision[:12]}…)")
    total = sum(counts.values())
    if key in OFFICIAL_TOTAL and total != OFFICIAL_TOTAL[key]:
        notes.append(f"{total} samples where the official {key} has {OFFICIAL_TOTAL[key]}")
    return TreeStatus(
        key=key,
        source="official",
        root=tree,
        counts=counts,
        problems=problems,
        revision=revision,
        notes=notes,
    )


def synthetic_status(key: str, synthetic_root: Path) -> TreeStatus:
    """The readiness row of the synthetic stand-in for ``key`` (counted from folder names)."""
    if key == "seed-tts":
        tree = synthetic_root / "seedtts"
        counts = load_seedtts(tree).counts
        revision = read_revision(synthetic_root / "seedtts.revision")
    else:
        tree = synthetic_root / key
        counts = {name: len(ids) for name, ids in list_ids(tree, key).items()}  # type: ignore[arg-type]
        revision = read_revision(synthetic_root / f"{key}.revision")
    return TreeStatus(
        key=key,
        source="synthetic",
        root=tree,
        counts=counts,
        revision=revision,
        notes=["synthetic: smoke tests only, never mixed with official numbers"],
    )
