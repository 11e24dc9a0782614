"""Content pinning for dataset trees: a per-file inventory and one revision hash per tree.

The revision is the sha256 of the sorted lines ``<relative posix path>\\0<file sha256>\\n`` over
every regular file under the root (symlinks are followed, so a tree of links to the official
files pins the same content as a copy). Hidden entries (names starting with ``.``, such as an
interrupted atomic write's temp file or ``.DS_Store``) are left out. A revision file holds the
hex digest on one line; fdb's synthetic trees prefix it with ``fdb-synth-`` so a synthetic
revision can never be mistaken for an official one.

Runs pin the files they read with ``sample_inventory`` (the files of the selected sample folders
only) and compare it later with ``inventory_changes``.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from fdb.errors import FdbError
from fdb.io import atomic_write_text, sha256_file


def _files(root: Path) -> list[tuple[str, Path]]:
    """(relative posix path, absolute path) of every non-hidden regular file, sorted."""
    out: list[tuple[str, Path]] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        for name in filenames:
            path = Path(dirpath) / name
            if name.startswith(".") or not path.is_file():
                continue
            out.append((path.relative_to(root).as_posix(), path))
    return sorted(out)


def inventory(root: Path) -> dict[str, str]:
    """Map each file's relative posix path to its sha256, in sorted path order."""
    root = Path(root)
    if not root.is_dir():
        raise FdbError(
            f"cannot pin {root}: it is not a directory",
            "check the dataset path (or run `python -m fdb setup`)",
        )
    return {rel: sha256_file(path) for rel, path in _files(root)}


def revision_of(files: dict[str, str]) -> str:
    """The tree revision of an inventory (see the module docstring)."""
    digest = hashlib.sha256()
    for rel in sorted(files):
        digest.update(f"{rel}\0{files[rel]}\n".encode())
    return digest.hexdigest()


def tree_revision(root: Path) -> str:
    """sha256 over the sorted relative paths and file sha256s under ``root``."""
    return revision_of(inventory(root))


def write_revision(root: Path, dest_file: Path, prefix: str = "") -> str:
    """Compute ``root``'s revision, write ``prefix + revision`` atomically to ``dest_file`` and
    return what it wrote."""
    revision = prefix + tree_revision(root)
    atomic_write_text(dest_file, revision + "\n")
    return revision


def read_revision(revision_file: Path) -> str | None:
    """The revision stored in a revision file, or None when the file is missing or empty."""
    try:
        text = Path(revision_file).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    return text.split()[0] if text else None


def sample_inventory(root: Path, sample_ids: list[str]) -> dict[str, str]:
    """sha256 of every file in each selected ``<subset>/<id>`` folder, keyed by its path relative
    to ``root`` (``"candor_turn_taking/1/input.wav"``). A missing folder contributes nothing."""
    root = Path(root)
    files: dict[str, str] = {}
    for sample_id in sample_ids:
        folder = root / sample_id
        if not folder.is_dir():
            continue
        for rel, path in _files(folder):
            files[f"{sample_id}/{rel}"] = sha256_file(path)
    return dict(sorted(files.items()))


def inventory_changes(pinned: dict[str, str], current: dict[str, str]) -> list[str]:
    """What differs between two inventories, one phrase per file, in path order."""
    changes = []
    for rel in sorted(set(pinned) | set(current)):
        before, now = pinned.get(rel), current.get(rel)
        if before == now:
            continue
        if now is None:
            changes.append(f"{rel} is missing (pinned sha256 {before[:12]}…)")
        elif before is None:
            changes.append(f"{rel} is new (sha256 {now[:12]}…)")
        else:
            changes.append(f"{rel} changed (sha256 {before[:12]}… is now {now[:12]}…)")
    return changes
