"""Which dataset trees a run reads: the official ones when installed, else fdb's synthetic set."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from fdb.datasets.types import DATASET_SUBSETS
from fdb.errors import FdbError
from fdb.settings import Settings

ENV_ROOT = {"v1.0": "FDB10_DATASET", "v1.5": "FDB_DATASET"}


@dataclass(frozen=True)
class DatasetTree:
    dataset: str  # v1.0 | v1.5
    root: Path
    source: str  # official | synthetic | user


def prepare_synthetic(settings: Settings, force: bool = False, console: Console | None = None) -> Path:
    """Create (or reuse) $FDB_WORK/dataset/synthetic and return it."""
    import shutil

    from fdb.datasets.synthetic import ensure_synthetic

    dest = settings.dataset_dir / "synthetic"
    if force and dest.exists():
        shutil.rmtree(dest)
    if console is not None and not dest.exists():
        console.print("generating fdb's synthetic FDB v1.0/v1.5 datasets (Piper voice, ~30 s)…")
    return ensure_synthetic(settings.work)


def resolve_tree(dataset: str, settings: Settings, explicit: Path | None, console: Console | None = None) -> DatasetTree:
    """An explicit --*-dataset-root, else $FDB10_DATASET / $FDB_DATASET, else the official tree
    at $FDB_WORK/dataset/<v>, else the synthetic one (generated on demand)."""
    env = os.environ.get(ENV_ROOT[dataset])
    for candidate, source in ((explicit, "user"), (Path(env) if env else None, "user")):
        if candidate is not None:
            if not candidate.is_dir():
                raise FdbError(f"the {dataset} dataset root {candidate} does not exist",
                               f"point it at an official Full-Duplex-Bench {dataset} tree, or unset it to use the synthetic set")
            return DatasetTree(dataset, candidate, source)
    official = settings.dataset_dir / dataset
    if official.is_dir():
        return DatasetTree(dataset, official, "official")
    synthetic = prepare_synthetic(settings, console=console) / dataset
    return DatasetTree(dataset, synthetic, "synthetic")


def describe_datasets(settings: Settings) -> list[str]:
    lines = []
    for dataset in ("v1.0", "v1.5"):
        official = settings.dataset_dir / dataset
        if official.is_dir():
            present = [s for s in DATASET_SUBSETS[dataset] if (official / s).is_dir()]
            lines.append(f"official {dataset}: {official} ({len(present)} of {len(DATASET_SUBSETS[dataset])} subsets)")
        else:
            lines.append(
                f"official {dataset}: not installed at {official} (generate uses the synthetic set; "
                f"download the Full-Duplex-Bench {dataset} archive there to use it)"
            )
    return lines
