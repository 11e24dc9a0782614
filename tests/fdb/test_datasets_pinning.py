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


def test_sample_inventory_covers_only_the_selected_folders(tmp_path: Path) -> None:
    from fdb.datasets.pinning import inventory_changes, sample_inventory

    root = _tree(tmp_path / "t")
    pinned = sample_inventory(root, ["a/10", "a/99"])  # a missing folder contributes nothing
    assert pinned == {"a/10/input.wav": sha256_bytes(b"\x00\x01" * 100)}
    (root / "a" / "2" / "pause.json").write_text("[1]")  # not selected: no change
    assert sample_inventory(root, ["a/10"]) == pinned
    (root / "a" / "10" / "input.wav").write_bytes(b"\x00")
    (root / "a" / "10" / "extra.json").write_text("{}")
    changes = inventory_changes(pinned, sample_inventory(root, ["a/10"]))
    assert changes[0].startswith("a/10/extra.json is new")
    assert changes[1].startswith("a/10/input.wav changed (sha256 ")
    assert inventory_changes(pinned, {})[0].startswith("a/10/input.wav is missing")
    assert inventory_changes(pinned, dict(pinned)) == []


def _settings(work: Path):
    from fdb.settings import Settings

    return Settings(
        work=work,
        judge="qwen",
        gpu=0,
        server_port=1,
        judge_port=2,
        session_timeout_s=90.0,
        v10_session_timeout_s=230.0,
    )


def test_a_repeat_refuses_changed_dataset_files(tmp_path: Path) -> None:
    """runs.generate pins the selected samples' files in run.json; a later repeat whose inputs
    changed stops with an error naming the file (the recording itself needs no server here)."""
    import json

    from rich.console import Console

    from fdb.datasets.synthetic import SynthSizes, generate_synthetic
    from runs.generate import _prepare
    from runs.options import DatasetChoice, GenerateOptions
    from tests.fdb.test_datasets_synth_config import FakeTts

    data = tmp_path / "data"
    generate_synthetic(data, sizes=SynthSizes.build(2, 0, 0), tts=FakeTts())
    choice = DatasetChoice(per_subset="0", subset_counts=["candor_turn_taking=2"])

    def prepare(repeat: int, v10: DatasetChoice = choice):
        opts = GenerateOptions(
            run_name="pin",
            repeat=repeat,
            v15=DatasetChoice(per_subset="0"),
            v10=v10,
            v10_root=data / "v1.0",
        )
        return _prepare(opts, _settings(tmp_path / "work"), Console(stderr=True, quiet=True))

    run, rep, _ = prepare(1)
    assert rep.sample_ids.read_text() == ""  # v1.5 left out
    assert rep.v10_sample_ids.read_text() == "candor_turn_taking/1\ncandor_turn_taking/2\n"
    with pytest.raises(FdbError, match="selects different v1.0 samples"):
        prepare(2, DatasetChoice(per_subset="0", subset_counts=["candor_turn_taking=1"]))
    use = json.loads(run.manifest.read_text())["datasets"]["v1.0"]
    assert use["revision"].startswith("fdb-synth-")
    assert sorted(use["files"]) == [
        f"candor_turn_taking/{i}/{name}"
        for i in (1, 2)
        for name in ("input.wav", "transcription.json", "turn_taking.json")
    ]
    prepare(2)  # unchanged inputs: fine
    (data / "v1.0" / "candor_turn_taking" / "2" / "turn_taking.json").write_text(
        '[{"timestamp": [1, 2]}]'
    )
    with pytest.raises(FdbError) as err:
        prepare(3)
    assert "candor_turn_taking/2/turn_taking.json changed (sha256" in err.value.message
    assert "since run pin started" in err.value.message and "restore" in err.value.hint
