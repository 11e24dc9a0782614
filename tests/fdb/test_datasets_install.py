"""`python -m fdb setup` and fdb.datasets.install: official trees are linked, verified and pinned;
without them the synthetic set stands in; the readiness table; reruns are safe."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from fdb.datasets.install import install_official, link_tree
from fdb.datasets.pinning import read_revision, tree_revision
from fdb.errors import FdbError
from tests.conftest import EXAMPLES, REPO, needs_examples

LAYOUT = {
    "synthetic_pause_handling": "pause_handling_example",
    "candor_turn_taking": "smooth_turn_taking_example",
    "synthetic_user_interruption": "user_interruption_example",
}

pytestmark = needs_examples


def _wav(path: Path, seconds: float = 1.0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(path, np.zeros(int(16000 * seconds), dtype=np.int16), 16000, subtype="PCM_16")


@pytest.fixture
def trees(tmp_path: Path) -> dict[str, Path]:
    """Official-layout v1.0 (the reference examples, copied), v1.5 and Seed-TTS trees."""
    v10 = tmp_path / "official" / "v1.0"
    for subset, example in LAYOUT.items():
        shutil.copytree(EXAMPLES / example / "1", v10 / subset / "1")
    v15 = tmp_path / "official" / "v1.5"
    pair = v15 / "user_backchannel" / "1"
    _wav(pair / "input.wav", 3.0)
    _wav(pair / "clean_input.wav", 3.0)
    (pair / "metadata.json").write_text(
        json.dumps({"context_text": "", "current_turn_text": "Hi.", "timestamps": [1.0, 1.5]})
    )
    seed = tmp_path / "official" / "seedtts_testset"
    _wav(seed / "en" / "prompt-wavs" / "p.wav")
    (seed / "en" / "meta.lst").write_text("p-t|Prompt.|prompt-wavs/p.wav|Target.\n")
    return {"v1.0": v10, "v1.5": v15, "seed-tts": seed}


def test_install_links_verifies_and_pins(tmp_path: Path, trees) -> None:
    dataset_dir = tmp_path / "work" / "dataset"
    status = install_official("v1.0", trees["v1.0"], dataset_dir)
    link = dataset_dir / "v1.0"
    assert link.is_symlink() and link.resolve() == trees["v1.0"].resolve()
    assert status.source == "official" and status.counts == dict.fromkeys(LAYOUT, 1)
    assert (
        status.revision
        == read_revision(dataset_dir / "v1.0.revision")
        == tree_revision(trees["v1.0"])
    )
    assert any(n == f"linked to {trees['v1.0'].resolve()}" for n in status.notes)
    assert any("3 samples where the official v1.0 has 727" in n for n in status.notes)
    again = install_official("v1.0", None, dataset_dir)  # rerun: found at the link, unchanged
    assert again.revision == status.revision and not any("changed" in n for n in again.notes)
    (trees["v1.0"] / "candor_turn_taking" / "1" / "turn_taking.json").write_text("[]")
    broken = install_official("v1.0", trees["v1.0"], dataset_dir)
    assert any("content changed since the last setup" in n for n in broken.notes)
    assert [p.sample_id for p in broken.errors] == ["candor_turn_taking/1"]
    seed = install_official("seed-tts", trees["seed-tts"], dataset_dir)
    assert seed.counts == {"en/meta.lst": 1} and (dataset_dir / "seed-tts.revision").is_file()
    assert install_official("v1.5", None, dataset_dir).source == "missing"


def test_link_refusals(tmp_path: Path, trees) -> None:
    with pytest.raises(FdbError, match="does not exist"):
        link_tree(tmp_path / "nowhere", tmp_path / "dataset" / "v1.0")
    real = tmp_path / "dataset" / "v1.5"
    shutil.copytree(trees["v1.5"], real)
    with pytest.raises(FdbError, match="already holds a dataset tree") as err:
        link_tree(trees["v1.5"], real)
    assert "remove or rename" in err.value.hint
    assert link_tree(real, real) == real  # the user's own tree at the place: used in place
    assert link_tree(None, real) == real
    other = tmp_path / "dataset" / "v1.0"
    other.parent.mkdir(exist_ok=True)
    other.symlink_to(tmp_path / "gone", target_is_directory=True)  # a stale link is replaced
    assert link_tree(trees["v1.0"], other).resolve() == trees["v1.0"].resolve()


def _setup(
    work: Path, args: list[str], extra_env: dict | None = None
) -> subprocess.CompletedProcess:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("FDB10_DATASET", "FDB_DATASET", "SEED_TTS_DATASET")
    }
    env.update(FDB_WORK=str(work), COLUMNS="200", **(extra_env or {}))
    return subprocess.run(
        [sys.executable, "-m", "fdb", "setup", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_setup_with_official_trees_by_option_and_variable(tmp_path: Path, trees) -> None:
    work = tmp_path / "work"
    args = ["--fdb-v10", str(trees["v1.0"]), "--seed-tts", str(trees["seed-tts"])]
    done = _setup(work, args, {"FDB_DATASET": str(trees["v1.5"])})
    assert done.returncode == 0, done.stderr
    for key in ("v1.0", "v1.5", "seed-tts"):
        assert (work / "dataset" / key).is_symlink() and read_revision(
            work / "dataset" / f"{key}.revision"
        )
    assert not (work / "dataset" / "synthetic").exists()  # all three official: nothing synthesized
    out = done.stderr
    assert "fdb readiness" in out and "FDB v1.0" in out and "Seed-TTS" in out and "official" in out
    for role in ("VAD", "ASR weights", "TTS voice", "LLM weights"):
        assert role in out
    assert out.rstrip().endswith("ready")
    again = _setup(work, [])  # safe to rerun: the links are found again
    assert again.returncode == 0, again.stderr
    assert read_revision(work / "dataset" / "v1.0.revision") == tree_revision(trees["v1.0"])
    bad = _setup(work, ["--fdb-v15", str(tmp_path / "missing")])
    assert bad.returncode == 2 and bad.stderr.startswith("ERROR: the dataset path")


def test_setup_falls_back_to_the_synthetic_set(tmp_path: Path) -> None:
    from fdb.datasets.synthetic import SynthSizes, ensure_synthetic
    from tests.fdb.test_datasets_synth_config import FakeTts

    work = tmp_path / "work"
    synthetic = ensure_synthetic(
        work, tts=FakeTts(), sizes=SynthSizes.build(1, 1, 2)
    )  # setup reuses it
    done = _setup(work, [])
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("synthetic:") >= 3 and "fdb-synth-" in done.stderr
    assert not (work / "dataset" / "v1.0").exists()
    with pytest.raises(
        FdbError, match="synthetic dataset, not an official tree"
    ):  # never passed off
        install_official("v1.0", synthetic / "v1.0", work / "dataset")
    assert not (work / "dataset" / "v1.0").exists()


def test_runs_find_the_seed_tts_tree(tmp_path: Path, trees, monkeypatch) -> None:
    from fdb.datasets.synthetic import SynthSizes, ensure_synthetic
    from runs.datasets import resolve_seedtts
    from tests.fdb.test_datasets_pinning import _settings
    from tests.fdb.test_datasets_synth_config import FakeTts

    work = tmp_path / "work"
    settings = _settings(work)
    monkeypatch.delenv("SEED_TTS_DATASET", raising=False)
    ensure_synthetic(work, tts=FakeTts(), sizes=SynthSizes.build(0, 0, 1))
    assert resolve_seedtts(settings).source == "synthetic"
    assert resolve_seedtts(settings).root == work / "dataset" / "synthetic" / "seedtts"
    install_official("seed-tts", trees["seed-tts"], work / "dataset")
    assert resolve_seedtts(settings).source == "official"
    monkeypatch.setenv("SEED_TTS_DATASET", str(trees["seed-tts"]))
    assert resolve_seedtts(settings).root == trees["seed-tts"]
    monkeypatch.setenv("SEED_TTS_DATASET", str(tmp_path / "none"))
    with pytest.raises(FdbError, match="Seed-TTS dataset root"):
        resolve_seedtts(settings)
