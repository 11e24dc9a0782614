"""fdb's synthetic datasets: small, license-free trees in the official layouts.

``generate_synthetic(root)`` writes ``root/v1.0/<subset>/<id>/`` (all five subsets),
``root/v1.5/<category>/<id>/`` (all four categories) and ``root/seedtts/en/meta.lst`` with its
wavs, spoken by Piper voices derived from joe (``synth_voices``), plus ``README.md``,
``synthetic.json`` and one revision file per tree (``v1.0.revision``, ``v1.5.revision``,
``seedtts.revision``) holding ``fdb-synth-<sha256 of the tree>``. The same seed and sizes give
the same bytes on every run; a larger set extends a smaller one.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from pydantic import BaseModel, Field, field_validator

from fdb.datasets.pinning import read_revision, tree_revision, write_revision
from fdb.datasets.synth_readme import README_MARKER, readme
from fdb.datasets.synth_v10 import FIRST_ID, V10_BUILDERS
from fdb.datasets.synth_v15 import seedtts_list, v15_pair
from fdb.datasets.synth_voices import SynthContext, VoiceBank
from fdb.datasets.types import V10_SUBSETS, V15_CATEGORIES
from fdb.errors import FdbError
from fdb.io import atomic_write_json, atomic_write_text

SEED = 20250617
SYNTH_PREFIX = "fdb-synth-"
SYNTH_SCHEMA = "fdb-synthetic-1"
TREES = ("v1.0", "v1.5", "seedtts")
SEEDTTS_PART = "seedtts"
Progress = Callable[[str], None]  # called with "v1.0/<subset>/<id>" after each sample


class SynthSizes(BaseModel):
    """How many samples each part gets (0 writes an empty subset folder)."""

    v10: dict[str, int] = Field(default_factory=lambda: dict.fromkeys(V10_SUBSETS, 3))
    v15: dict[str, int] = Field(default_factory=lambda: dict.fromkeys(V15_CATEGORIES, 2))
    seedtts: int = 8

    @field_validator("v10", "v15")
    @classmethod
    def _counts(cls, value: dict[str, int]) -> dict[str, int]:
        if any(n < 0 for n in value.values()):
            raise ValueError("sample counts must be >= 0")
        return value

    @classmethod
    def build(
        cls,
        v10_per_subset: int = 3,
        v15_per_category: int = 2,
        seedtts_rows: int = 8,
        counts: Iterable[str] = (),
    ) -> SynthSizes:
        """Uniform counts, then ``NAME=N`` overrides (a v1.0 subset, a v1.5 category or seedtts)."""
        sizes = {
            "v10": dict.fromkeys(V10_SUBSETS, v10_per_subset),
            "v15": dict.fromkeys(V15_CATEGORIES, v15_per_category),
            "seedtts": seedtts_rows,
        }
        for text in counts:
            name, sep, value = text.partition("=")
            name = name.strip()
            if not sep or not value.strip().isdigit():
                raise FdbError(f"count {text!r} is not NAME=N", "write it like icc_backchannel=1")
            part = "v10" if name in V10_SUBSETS else "v15" if name in V15_CATEGORIES else None
            if part is None and name != SEEDTTS_PART:
                known = ", ".join((*V10_SUBSETS, *V15_CATEGORIES, SEEDTTS_PART))
                raise FdbError(f"unknown synthetic part '{name}'", f"use one of: {known}")
            if part is None:
                sizes["seedtts"] = int(value)
            else:
                sizes[part][name] = int(value)
        if min([*sizes["v10"].values(), *sizes["v15"].values(), sizes["seedtts"]]) < 0:
            raise FdbError("sample counts must be >= 0", "pass counts of 0 or more")
        return cls(**sizes)

    def total(self) -> int:
        return sum(self.v10.values()) + sum(self.v15.values()) + self.seedtts


class SyntheticReport(BaseModel):
    """What ``generate_synthetic`` wrote."""

    root: Path
    seed: int
    revisions: dict[str, str]  # "v1.0" / "v1.5" / "seedtts" -> "fdb-synth-<hash>"
    samples: dict[str, int]  # "v1.0/<subset>", "v1.5/<category>", "seedtts/en" -> count
    input_seconds: dict[str, float]  # same keys -> total audio duration
    elapsed_s: float
    tts: dict[str, object]

    @property
    def v10_revision(self) -> str:
        return self.revisions["v1.0"]

    @property
    def v15_revision(self) -> str:
        return self.revisions["v1.5"]


def generate_synthetic(
    root: Path,
    v10_per_subset: int = 3,
    v15_per_category: int = 2,
    tts=None,
    *,
    sizes: SynthSizes | None = None,
    seed: int = SEED,
    progress: Progress | None = None,
    voices: VoiceBank | None = None,
) -> SyntheticReport:
    """Write the synthetic trees, their revision files, README.md and synthetic.json under ``root``.

    ``sizes`` (default: ``v10_per_subset`` per v1.0 subset, ``v15_per_category`` per v1.5
    category, 8 Seed-TTS rows). ``tts``: None uses the Piper voices of ``synth_voices``; any
    backend with ``rate`` and ``synthesize(text)`` is used for every voice instead; ``voices``
    passes a ``VoiceBank`` directly. Existing synthetic trees under ``root`` are replaced; a
    ``root`` holding other data is refused.
    """
    sizes = sizes or SynthSizes.build(v10_per_subset, v15_per_category)
    if seed < 0:
        raise FdbError(f"seed {seed} is negative", "pass a seed >= 0")
    began = time.perf_counter()
    root = Path(root)
    if voices is None:
        voices = VoiceBank.piper() if tts is None else VoiceBank(tts)
    ctx = SynthContext(voices=voices, seed=seed)
    _prepare_root(root)
    atomic_write_text(root / "README.md", readme(sizes.model_dump(), seed))
    tick = progress or (lambda _label: None)
    samples, seconds_ = _write_fdb_trees(ctx, root, sizes, tick)
    samples["seedtts/en"] = sizes.seedtts
    seconds_["seedtts/en"] = round(seedtts_list(ctx, sizes.seedtts, root / SEEDTTS_PART, tick), 3)
    revisions = {
        tree: write_revision(root / tree, root / f"{tree}.revision", prefix=SYNTH_PREFIX)
        for tree in TREES
    }
    identity = voices.identity()
    atomic_write_json(
        root / "synthetic.json",
        {
            "schema": SYNTH_SCHEMA,
            "synthetic": True,
            "label": "fdb synthetic dataset (not Full-Duplex-Bench"
            " or Seed-TTS data; never mix its numbers with official ones)",
            "seed": seed,
            "sizes": sizes.model_dump(),
            "samples": samples,
            "revisions": revisions,
            "tts": identity,
        },
    )
    return SyntheticReport(
        root=root,
        seed=seed,
        revisions=revisions,
        samples=samples,
        input_seconds=seconds_,
        elapsed_s=round(time.perf_counter() - began, 3),
        tts=identity,
    )


def _write_fdb_trees(
    ctx: SynthContext, root: Path, sizes: SynthSizes, tick: Progress
) -> tuple[dict[str, int], dict[str, float]]:
    samples: dict[str, int] = {}
    seconds_: dict[str, float] = {}
    jobs = [("v1.0", name, V10_BUILDERS[name], sizes.v10.get(name, 0)) for name in V10_SUBSETS]
    jobs += [("v1.5", name, None, sizes.v15.get(name, 0)) for name in V15_CATEGORIES]
    for tree, name, build, count in jobs:
        first = FIRST_ID.get(name, 1) if tree == "v1.0" else 1
        folder = root / tree / name
        folder.mkdir(parents=True, exist_ok=True)
        durations = []
        for number in range(first, first + count):
            sample_dir = folder / str(number)
            sample_dir.mkdir()
            if build is None:
                durations.append(v15_pair(ctx, name, number, sample_dir))
            else:
                durations.append(build(ctx, number, sample_dir))
            tick(f"{tree}/{name}/{number}")
        samples[f"{tree}/{name}"], seconds_[f"{tree}/{name}"] = count, round(sum(durations), 3)
    return samples, seconds_


def _prepare_root(root: Path) -> None:
    """Remove earlier synthetic trees and revisions (a dataset is complete only once its revision
    files are written again); refuse a root whose trees are not marked synthetic."""
    trees = [root / tree for tree in TREES]
    if any(t.exists() for t in trees) and not is_synthetic(root):
        raise FdbError(
            f"{root} already holds v1.0/, v1.5/ or seedtts/ trees that are not fdb's synthetic "
            "data",
            "choose an empty directory for the synthetic dataset",
        )
    for tree in trees:
        if tree.exists():
            shutil.rmtree(tree)
    root.mkdir(parents=True, exist_ok=True)
    for tree in TREES:
        (root / f"{tree}.revision").unlink(missing_ok=True)
    (root / "synthetic.json").unlink(missing_ok=True)


def is_synthetic(root: Path) -> bool:
    """True when ``root`` carries the synthetic dataset's README marker."""
    try:
        return README_MARKER in (Path(root) / "README.md").read_text(encoding="utf-8")
    except OSError:
        return False


def is_synthetic_revision(revision: str | None) -> bool:
    return bool(revision) and revision.startswith(SYNTH_PREFIX)


def synthetic_complete(root: Path) -> bool:
    """True when ``root`` is a finished synthetic dataset whose trees match their revisions."""
    root = Path(root)
    if not is_synthetic(root) or not (root / "synthetic.json").is_file():
        return False
    for tree in TREES:
        stored = read_revision(root / f"{tree}.revision")
        if (
            stored is None
            or not (root / tree).is_dir()
            or SYNTH_PREFIX + tree_revision(root / tree) != stored
        ):
            return False
    return True


def install_synthetic(
    dest: Path,
    tts=None,
    *,
    sizes: SynthSizes | None = None,
    seed: int = SEED,
    progress: Progress | None = None,
) -> SyntheticReport:
    """Generate into a hidden sibling of ``dest`` and rename it into place, so a killed run never
    leaves a half-written dataset that looks complete. A ``dest`` holding other data is refused."""
    dest = Path(dest)
    if dest.exists() and (not dest.is_dir() or (any(dest.iterdir()) and not is_synthetic(dest))):
        raise FdbError(
            f"{dest} holds files that are not fdb's synthetic dataset",
            "move them away or choose another --out, then rerun",
        )
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = dest.parent / f".{dest.name}.tmp-{os.getpid()}"
    if staging.exists():
        shutil.rmtree(staging)
    report = generate_synthetic(staging, tts=tts, sizes=sizes, seed=seed, progress=progress)
    if dest.exists():
        shutil.rmtree(dest)
    os.replace(staging, dest)
    return report.model_copy(update={"root": dest})


def ensure_synthetic(
    work: Path,
    tts=None,
    v10_per_subset: int = 3,
    v15_per_category: int = 2,
    *,
    sizes: SynthSizes | None = None,
    seed: int = SEED,
    progress: Progress | None = None,
) -> Path:
    """Return ``work/dataset/synthetic``, generating it first when missing or incomplete (a
    complete one is reused whatever its sizes)."""
    dest = Path(work) / "dataset" / "synthetic"
    if not synthetic_complete(dest):
        sizes = sizes or SynthSizes.build(v10_per_subset, v15_per_category)
        install_synthetic(dest, tts, sizes=sizes, seed=seed, progress=progress)
    return dest
