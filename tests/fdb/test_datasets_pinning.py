"""Tree revisions and inventories."""

from __future__ import annotations

from pathlib import Path

import pytest

from fdb.datasets.pinning import inventory, read_revision, tree_revision, write_revision
from fdb.errors import FdbError
from fdb.io import sha256_bytes


def _tree(root: Path) -> Path:
    (root / "a" / "10").mkdir(parents=True)
    (root / "a" / "2").mkdir(parents=True)
    (root / "a" / "10" / "input.wav").write_bytes(b"\x00\x01" * 100)
    (root / "a" / "2" / "pause.json").write_text("[]")
    return root


def test_inventory_and_revision(tmp_path: Path) -> None:
    root = _tree(tmp_path / "t")
    inv = inventory(root)
    assert list(inv) == ["a/10/input.wav", "a/2/pause.json"]
    assert inv["a/2/pause.json"] == sha256_bytes(b"[]")
    rev = tree_revision(root)
    assert len(rev) == 64 and rev == tree_revision(root)
    (root / "a" / ".pause.json.tmp").write_text("half")  # hidden files are ignored
    assert tree_revision(root) == rev


def test_one_byte_or_one_name_changes_the_revision(tmp_path: Path) -> None:
    root = _tree(tmp_path / "t")
    rev = tree_revision(root)
    wav = root / "a" / "10" / "input.wav"
    data = bytearray(wav.read_bytes())
    data[57] ^= 1
    wav.write_bytes(bytes(data))
    changed = tree_revision(root)
    assert changed != rev
    (root / "a" / "2").rename(root / "a" / "3")
    assert tree_revision(root) not in (rev, changed)


def test_links_pin_the_same_content_as_copies(tmp_path: Path) -> None:
    real = _tree(tmp_path / "real")
    linked = tmp_path / "linked" / "a"
    linked.mkdir(parents=True)
    for sample in ("10", "2"):
        (linked / sample).symlink_to(real / "a" / sample, target_is_directory=True)
    assert tree_revision(linked.parent) == tree_revision(real)


def test_write_and_read_revision(tmp_path: Path) -> None:
    root = _tree(tmp_path / "t")
    rev = write_revision(root, tmp_path / "t.revision")
    assert (tmp_path / "t.revision").read_text() == rev + "\n"
    assert read_revision(tmp_path / "t.revision") == rev
    assert read_revision(tmp_path / "none.revision") is None
    with pytest.raises(FdbError, match="not a directory"):
        tree_revision(tmp_path / "nowhere")
