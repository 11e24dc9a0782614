"""The ``declared`` counts of a score: how many samples the dataset a tree was exported from
holds per subset (``fdb score v10`` and ``fdb score v15``; one home, so neither imports the
other)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from fdb.errors import FdbError

if TYPE_CHECKING:
    from fdb.layout import RunPaths

TREE_IN_REPEAT = {"v1.0": "v10/reference", "v1.5": "reference-audio"}


def run_of_tree(tree: Path, dataset: str = "v1.0") -> RunPaths | None:
    """The run whose ``repeat-N/v10/reference`` (v1.0) or ``repeat-N/reference-audio`` (v1.5)
    is ``tree`` (RunPaths, when its run.json exists), else None."""
    # lazy: keeps `fdb --help` fast; loaded when the command runs
    from fdb.layout import RunPaths

    tree = Path(tree).resolve()
    repeat = tree.parent.parent if dataset == "v1.0" else tree.parent
    number = repeat.name.removeprefix("repeat-")
    if not (number.isdigit() and int(number) >= 1 and repeat.name == f"repeat-{number}"):
        return None
    run = RunPaths(repeat.parent)
    rep = run.repeat(int(number))
    if (
        rep.v10_reference if dataset == "v1.0" else rep.reference_audio
    ) != tree or not run.manifest.is_file():
        return None
    return run


def _tree_samples(tree: Path, dataset: str) -> list:
    if dataset == "v1.0":
        # lazy: keeps `fdb --help` fast; loaded when the command runs
        from scorers.v10_tree import load_tree

        return load_tree(tree).manifest.samples
    # lazy: keeps `fdb --help` fast; loaded when the command runs
    from fdb.records import load_v15_manifest

    return load_v15_manifest(tree)[0].samples


def declared_for(
    tree: Path, dataset_root: Path | None, dataset: str = "v1.0"
) -> tuple[dict[str, int] | None, str | None]:
    """The dataset's subset sizes for the ``declared`` counts, and a note when they are not known.

    ``dataset_root`` (--dataset-root) is counted like the run path counts its dataset, after
    checking that it holds every sample of the tree; otherwise a tree inside a run takes the
    run's own source (``runs.phases.declared_counts``: the dataset root in run.json). Without
    either, declared is null (n/a): never the selected count."""
    # lazy: keeps `fdb --help` fast; loaded when the command runs
    from fdb.datasets.official import list_ids
    from runs.phases import declared_counts

    hint = (
        f"pass --dataset-root DIR, the {dataset} dataset the tree was exported from, to count its "
        "samples"
    )
    if dataset_root is not None:
        ids = list_ids(Path(dataset_root), dataset)
        missing = [
            s.sample_id for s in _tree_samples(tree, dataset) if s.id not in ids.get(s.subset, ())
        ]
        if missing:
            raise FdbError(
                f"--dataset-root {dataset_root} does not hold {len(missing)} sample(s) of the tree "
                f"(first: {missing[0]})",
                f"pass the {dataset} dataset root the tree was exported from",
            )
        return {name: len(found) for name, found in ids.items()}, None
    run = run_of_tree(tree, dataset)
    if run is None:
        return (
            None,
            f"declared n/a: {tree} is not a run's repeat-N/{TREE_IN_REPEAT[dataset]}; {hint}",
        )
    found = declared_counts(run, dataset)
    if found is None:
        return (
            None,
            f"declared n/a: {run.manifest} names no {dataset} dataset root that still exists; "
            f"{hint}",
        )
    return found, None
