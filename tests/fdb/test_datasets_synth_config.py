"""The synthetic generator's assembly with a fast fake TTS: whole-tree determinism, seeds, sizes,
the ICC monologue, staging and refusals, and the `dataset synth` verb on the real voice."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fdb.datasets.official import load_v10, load_v15
from fdb.datasets.pinning import inventory, read_revision
from fdb.datasets.seedtts import load_seedtts
from fdb.datasets.synth_v10 import ICC_TARGET_S
from fdb.datasets.synthetic import (
    SynthSizes,
    ensure_synthetic,
    generate_synthetic,
    install_synthetic,
    synthetic_complete,
)
from fdb.datasets.types import V10_SUBSETS, V15_CATEGORIES
from fdb.errors import FdbError
from tests.conftest import REPO


class FakeTts:
    """Deterministic tone bursts (one per word) with silent margins: fast, no model."""

    rate = 22050

    def __init__(self) -> None:
        self.calls = 0

    def synthesize(self, text: str) -> np.ndarray:
        self.calls += 1
        t = np.arange(int(0.2 * self.rate)) / self.rate
        word = 0.5 * np.sin(2 * np.pi * (180 + 10 * len(text) % 90) * t)
        gap = np.zeros(int(0.03 * self.rate))
        parts = [np.zeros(int(0.05 * self.rate))]
        for _ in text.split():
            parts += [word, gap]
        parts.append(np.zeros(int(0.08 * self.rate)))
        return np.concatenate(parts).astype(np.float32)


def _generate(root: Path, sizes: SynthSizes, seed: int = 7) -> Path:
    generate_synthetic(root, sizes=sizes, seed=seed, tts=FakeTts())
    return root


SMALL = SynthSizes.build(2, 1, 3)


def test_same_seed_same_bytes_whole_tree(tmp_path: Path) -> None:
    first = _generate(tmp_path / "a", SMALL)
    second = _generate(tmp_path / "b", SMALL)
    assert inventory(first) == inventory(second)  # README.md, synthetic.json, revisions included
    assert {p.name for p in first.iterdir()} == {
        "README.md",
        "synthetic.json",
        "v1.0",
        "v1.5",
        "seedtts",
        "v1.0.revision",
        "v1.5.revision",
        "seedtts.revision",
    }
    meta = json.loads((first / "synthetic.json").read_text())
    assert (
        meta["seed"] == 7
        and meta["synthetic"]
        and meta["revisions"]["v1.0"].startswith("fdb-synth-")
    )
    assert (
        meta["tts"]["voices"]["other"]["length_scale"] == 1.0
    )  # a single fake backend: pitch only


def test_another_seed_moves_the_draws_only(tmp_path: Path) -> None:
    a = _generate(tmp_path / "a", SMALL, seed=1)
    b = _generate(tmp_path / "b", SMALL, seed=2)
    pause = "v1.0/synthetic_pause_handling/1/pause.json"
    assert (a / pause).read_bytes() != (b / pause).read_bytes()
    assert read_revision(a / "v1.0.revision") != read_revision(b / "v1.0.revision")
    assert (a / "seedtts/en/meta.lst").read_bytes() == (b / "seedtts/en/meta.lst").read_bytes()
    with pytest.raises(FdbError, match="negative"):
        generate_synthetic(tmp_path / "c", sizes=SMALL, seed=-1, tts=FakeTts())


def test_a_larger_set_extends_a_smaller_one(tmp_path: Path) -> None:
    small = inventory(_generate(tmp_path / "a", SMALL))
    big = inventory(_generate(tmp_path / "b", SynthSizes.build(3, 2, 4)))
    samples = [
        rel for rel in small if rel.startswith(("v1.0/", "v1.5/", "seedtts/en/prompt-wavs/"))
    ]
    assert samples and all(big[rel] == small[rel] for rel in samples)


def test_sizes_per_part_and_the_icc_monologue(tmp_path: Path) -> None:
    sizes = SynthSizes.build(0, 0, 2, ["icc_backchannel=2", "talking_to_other=1", "seedtts=1"])
    assert (
        sizes.v10["icc_backchannel"] == 2
        and sizes.v15["talking_to_other"] == 1
        and sizes.seedtts == 1
    )
    root = _generate(tmp_path / "s", sizes)
    v10 = load_v10(root / "v1.0")
    assert list(v10) == list(V10_SUBSETS) and [s.id for s in v10["icc_backchannel"]] == ["0", "1"]
    assert all(not v10[name] for name in V10_SUBSETS if name != "icc_backchannel")
    for icc in v10["icc_backchannel"]:
        assert icc.annotation is None and ICC_TARGET_S[0] <= icc.duration_s <= ICC_TARGET_S[1] + 6
        words = json.loads((icc.dir / "transcription.json").read_text())[0]["item"]
        assert len(words) > 60 and words[-1]["timestamp"][1] < icc.duration_s
        assert [w["timestamp"][0] for w in words] == sorted(w["timestamp"][0] for w in words)
    assert {k: len(v) for k, v in load_v15(root / "v1.5").items()} == {
        c: int(c == "talking_to_other") for c in V15_CATEGORIES
    }
    assert load_seedtts(root / "seedtts").counts == {"en/meta.lst": 1}


@pytest.mark.parametrize(
    ("counts", "needle"),
    [
        (["bogus=1"], "unknown synthetic part 'bogus'"),
        (["icc_backchannel"], "not NAME=N"),
        (["icc_backchannel=-1"], "not NAME=N"),
        (["seedtts=x"], "not NAME=N"),
    ],
)
def test_bad_sizes_are_errors(counts: list[str], needle: str) -> None:
    with pytest.raises(FdbError, match=needle):
        SynthSizes.build(counts=counts)
    with pytest.raises(FdbError, match=">= 0"):
        SynthSizes.build(v10_per_subset=-1)


def test_ensure_synthetic_generates_once_and_repairs(tmp_path: Path) -> None:
    tts = FakeTts()
    root = ensure_synthetic(tmp_path, tts=tts, v10_per_subset=1, v15_per_category=1)
    assert root == tmp_path / "dataset" / "synthetic" and synthetic_complete(root)
    assert not [p for p in (tmp_path / "dataset").iterdir() if p.name.startswith(".")]
    calls = tts.calls
    assert ensure_synthetic(tmp_path, tts=tts, v10_per_subset=1, v15_per_category=1) == root
    assert tts.calls == calls  # complete: nothing regenerated
    revision = read_revision(root / "v1.0.revision")
    wav = root / "v1.0" / "candor_turn_taking" / "1" / "input.wav"
    wav.write_bytes(wav.read_bytes()[:-2] + b"\x01\x00")
    assert not synthetic_complete(root)
    ensure_synthetic(tmp_path, tts=tts, v10_per_subset=1, v15_per_category=1)
    assert tts.calls > calls and read_revision(root / "v1.0.revision") == revision
    assert synthetic_complete(root)


def test_foreign_directories_are_refused(tmp_path: Path) -> None:
    (tmp_path / "v1.0").mkdir()
    with pytest.raises(FdbError, match="not fdb's synthetic data"):
        generate_synthetic(tmp_path, sizes=SMALL, tts=FakeTts())
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    with pytest.raises(FdbError, match="not fdb's synthetic dataset"):
        install_synthetic(other, FakeTts(), sizes=SMALL)
    assert (other / "notes.txt").read_text() == "keep me"


def test_dataset_synth_verb(tmp_path: Path) -> None:
    pytest.importorskip("piper")
    out = tmp_path / "synth"
    args = [
        sys.executable,
        "-m",
        "fdb",
        "dataset",
        "synth",
        "--out",
        str(out),
        "--v10-per-subset",
        "0",
        "--v15-per-category",
        "0",
        "--seedtts-rows",
        "1",
        "--count",
        "candor_turn_taking=1",
        "--seed",
        "3",
    ]
    env = dict(os.environ, COLUMNS="160", FDB_WORK=str(tmp_path / "work"))
    done = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "v1.0/candor_turn_taking" in done.stderr and "revision fdb-synth-" in done.stderr
    assert synthetic_complete(out) and json.loads((out / "synthetic.json").read_text())["seed"] == 3
    assert [s.id for s in load_v10(out / "v1.0")["candor_turn_taking"]] == ["1"]
    bad = subprocess.run(
        [*args[:7], "--count", "nope=1"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and bad.stderr.startswith("ERROR: unknown synthetic part 'nope'")
