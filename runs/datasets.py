"""Which dataset trees a run reads: the official ones when installed, else fdb's synthetic set."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from fdb.datasets.synthetic import ensure_synthetic, install_synthetic, synthetic_complete
from fdb.errors import FdbError
from fdb.settings import Settings

ENV_ROOT = {"v1.0": "FDB10_DATASET", "v1.5": "FDB_DATASET", "seed-tts": "SEED_TTS_DATASET"}


@dataclass(frozen=True)
class DatasetTree:
    dataset: str  # v1.0 | v1.5
    root: Path
    source: str  # official | synthetic | user


def prepare_synthetic(
    settings: Settings, force: bool = False, console: Console | None = None, progress=None
) -> Path:
    """Create (or reuse) $FDB_WORK/dataset/synthetic and return it; ``force`` regenerates it
    (into a staging directory first, so the old one stays until the new one is complete)."""
    dest = settings.dataset_dir / "synthetic"
    if console is not None and (force or not synthetic_complete(dest)):
        console.print(
            "generating fdb's synthetic FDB v1.0/v1.5 and Seed-TTS datasets (Piper voices, "
            "< 1 min)…"
        )
    if force:
        install_synthetic(dest, progress=progress)
        return dest
    return ensure_synthetic(settings.work, progress=progress)


def resolve_tree(
    dataset: str, settings: Settings, explicit: Path | None, console: Console | None = None
) -> DatasetTree:
    """An explicit --*-dataset-root, else $FDB10_DATASET / $FDB_DATASET, else the official tree
    at $FDB_WORK/dataset/<v>, else the synthetic one (generated on demand)."""
    env = os.environ.get(ENV_ROOT[dataset])
    for candidate, source in ((explicit, "user"), (Path(env) if env else None, "user")):
        if candidate is not None:
            if not candidate.is_dir():
                raise FdbError(
                    f"the {dataset} dataset root {candidate} does not exist",
                    f"point it at an official Full-Duplex-Bench {dataset} tree, "
                    "or unset it to use the synthetic set",
                )
            return DatasetTree(dataset, candidate, source)
    official = settings.dataset_dir / dataset
    if official.is_dir():
        return DatasetTree(dataset, official, "official")
    synthetic = prepare_synthetic(settings, console=console) / dataset
    return DatasetTree(dataset, synthetic, "synthetic")


def resolve_seedtts(settings: Settings, explicit: Path | None = None) -> DatasetTree:
    """The Seed-TTS root: explicit, else $SEED_TTS_DATASET, else $FDB_WORK/dataset/seed-tts
    (linked by setup), else the synthetic list (generated on demand)."""
    env = os.environ.get(ENV_ROOT["seed-tts"])
    for candidate in (explicit, Path(env) if env else None):
        if candidate is not None:
            if not candidate.is_dir():
                raise FdbError(
                    f"the Seed-TTS dataset root {candidate} does not exist",
                    "point it at the unpacked seedtts_testset/, "
                    "or unset it to use the synthetic list",
                )
            return DatasetTree("seed-tts", candidate, "user")
    official = settings.dataset_dir / "seed-tts"
    if official.is_dir():
        return DatasetTree("seed-tts", official, "official")
    return DatasetTree("seed-tts", prepare_synthetic(settings) / "seedtts", "synthetic")
