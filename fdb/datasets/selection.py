"""Sample selection, exactly as the runbook's "Choosing samples" rules (never random).

Each subset (v1.5: category) takes its first N samples in numeric id order (1, 2, ..., 10, 11),
so the same options always give the same samples and a smaller N is a prefix of a larger one.
N is an int or ``"all"``; 0 leaves the subset out, and ``per_subset=0`` with no override and no
explicit id leaves the whole dataset out. ``NAME=N`` overrides one subset. An explicit list of
``NAME/ID`` (from repeated options and/or an ids file) selects exactly those samples and cannot
be combined with counts. All functions here are pure except ``read_ids_file``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from fdb.datasets.types import DATASET_SUBSETS, DatasetName
from fdb.errors import FdbError
from fdb.io import validation_summary

DEFAULT_PER_SUBSET = 12
Count = int | Literal["all"]
Catalog = Mapping[str, Sequence[str]]  # subset -> sample ids (digit strings)


def parse_count(text: str | int, what: str = "count") -> Count:
    """``"all"`` or a non-negative integer; anything else is an ``FdbError``."""
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    elif isinstance(text, str) and text.strip().lower() == "all":
        return "all"
    elif isinstance(text, str) and text.strip().isdigit():
        value = int(text.strip())
    else:
        raise FdbError(f"{what} {text!r} is not a count", "give a whole number >= 0, or all")
    if value < 0:
        raise FdbError(f"{what} {value} is negative", "give a whole number >= 0, or all")
    return value


def parse_sample_id(text: str, dataset: DatasetName) -> str:
    """Check ``NAME/ID`` (a known subset and a digit-only id) and return it stripped."""
    name, sep, sample = text.strip().partition("/")
    if not sep or not (sample.isascii() and sample.isdigit()):
        raise FdbError(f"sample id {text!r} is not NAME/ID", "write it like candor_turn_taking/37")
    _check_subset(name, dataset)
    return f"{name}/{sample}"


def parse_subset_count(text: str, dataset: DatasetName) -> tuple[str, Count]:
    """``NAME=N`` -> (NAME, N) with NAME a known subset of ``dataset``."""
    name, sep, value = text.partition("=")
    if not sep:
        raise FdbError(f"subset count {text!r} is not NAME=N", "write it like icc_backchannel=all")
    name = name.strip()
    _check_subset(name, dataset)
    return name, parse_count(value, f"count for {name}")


def _check_subset(name: str, dataset: DatasetName) -> None:
    known = DATASET_SUBSETS[dataset]
    if name not in known:
        raise FdbError(f"unknown {dataset} subset '{name}'", f"use one of: {', '.join(known)}")


def _sort_key(sample_id: str, dataset: DatasetName) -> tuple[int, int, str]:
    name, _, sample = sample_id.partition("/")
    return DATASET_SUBSETS[dataset].index(name), int(sample), sample


def canonical_order(sample_ids: Iterable[str], dataset: DatasetName) -> list[str]:
    """Dedupe and order ids by subset (the dataset's subset order), then numerically."""
    return sorted(dict.fromkeys(sample_ids), key=lambda sid: _sort_key(sid, dataset))


class SelectionSpec(BaseModel):
    """The selection options of one dataset, as a run records them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    dataset: DatasetName
    per_subset: Count | None = None  # None: DEFAULT_PER_SUBSET, unless sample_ids are given
    subset_counts: dict[str, Count] = Field(default_factory=dict)
    sample_ids: list[str] = Field(default_factory=list)  # exact NAME/ID list, canonical order
    ids_file: str | None = None  # where (part of) sample_ids came from; informational

    @field_validator("per_subset")
    @classmethod
    def _per_subset(cls, value: Count | None) -> Count | None:
        return None if value is None else parse_count(value, "per-subset count")

    @field_validator("subset_counts")
    @classmethod
    def _counts(cls, value: dict[str, Count], info: ValidationInfo) -> dict[str, Count]:
        dataset = info.data.get("dataset", "v1.0")
        for name in value:
            _check_subset(name, dataset)
        return {name: parse_count(n, f"count for {name}") for name, n in sorted(value.items())}

    @field_validator("sample_ids")
    @classmethod
    def _ids(cls, value: list[str], info: ValidationInfo) -> list[str]:
        dataset = info.data.get("dataset", "v1.0")
        return canonical_order((parse_sample_id(s, dataset) for s in value), dataset)

    @model_validator(mode="after")
    def _exclusive(self) -> SelectionSpec:
        if self.sample_ids and (self.per_subset is not None or self.subset_counts):
            raise ValueError(
                f"{self.dataset}: explicit sample ids select exactly those samples; "
                "drop the per-subset and subset counts, or drop the ids"
            )
        return self

    @classmethod
    def from_options(
        cls,
        dataset: DatasetName,
        per_subset: str | int | None = None,
        subset_counts: Iterable[str] = (),
        sample_ids: Iterable[str] = (),
        ids_file: Path | None = None,
    ) -> SelectionSpec:
        """Build a spec from CLI-style strings (``NAME=N``, ``NAME/ID``, an ids file path)."""
        counts = dict(parse_subset_count(text, dataset) for text in subset_counts)
        ids = [parse_sample_id(text, dataset) for text in sample_ids]
        if ids_file is not None:
            ids += read_ids_file(ids_file, dataset)
        if ids and (per_subset is not None or counts):
            flag = "--v10" if dataset == "v1.0" else "--v15"
            count_opt = f"{flag}-per-subset" if per_subset is not None else f"{flag}-subset-count"
            ids_opt = f"{flag}-sample-id" if sample_ids else f"{flag}-sample-ids-file"
            raise FdbError(
                f"{count_opt} and {ids_opt} exclude each other: explicit sample ids select exactly "
                "those samples",
                f"drop {flag}-per-subset and {flag}-subset-count, or drop "
                f"{flag}-sample-id and {flag}-sample-ids-file",
            )
        try:
            return cls(
                dataset=dataset,
                per_subset=None
                if per_subset is None
                else parse_count(
                    per_subset, f"{'--v10' if dataset == 'v1.0' else '--v15'}-per-subset"
                ),
                subset_counts=counts,
                sample_ids=ids,
                ids_file=None if ids_file is None else str(ids_file),
            )
        except ValueError as exc:  # pydantic.ValidationError is a ValueError
            text = validation_summary(exc) if isinstance(exc, ValidationError) else str(exc)
            raise FdbError(
                f"invalid {dataset} selection: {text}", "see the runbook's 'Choosing samples'"
            ) from exc

    @property
    def default_count(self) -> Count:
        """The per-subset count for subsets without an override."""
        return DEFAULT_PER_SUBSET if self.per_subset is None else self.per_subset

    def count_for(self, subset: str) -> Count:
        """How many samples ``subset`` takes under the count rules."""
        return self.subset_counts.get(subset, self.default_count)

    @property
    def leaves_out(self) -> bool:
        """True when the options select nothing from this dataset (it need not be installed)."""
        if self.sample_ids:
            return False
        return all(self.count_for(name) == 0 for name in DATASET_SUBSETS[self.dataset])

    def subsets_to_load(self) -> list[str] | None:
        """Subsets a loader must provide; None means every subset present in the tree."""
        if self.sample_ids:
            return list(dict.fromkeys(sid.partition("/")[0] for sid in self.sample_ids))
        if self.default_count != 0:  # a non-zero default takes whatever subsets exist
            return None
        return [name for name, n in self.subset_counts.items() if n != 0]

    def normalized(self) -> dict:
        """The options that decide the selection (the ids file's path is left out)."""
        per_subset = self.per_subset
        if per_subset is None and not self.sample_ids:
            per_subset = DEFAULT_PER_SUBSET
        return {
            "dataset": self.dataset,
            "per_subset": per_subset,
            "subset_counts": dict(self.subset_counts),
            "sample_ids": list(self.sample_ids),
        }


def same_selection(a: SelectionSpec, b: SelectionSpec) -> bool:
    """True when two specs select the same samples from the same tree (repeat check)."""
    return a.normalized() == b.normalized()


def select(spec: SelectionSpec, catalog: Catalog) -> list[str]:
    """The ordered ``NAME/ID`` list the spec selects from ``catalog`` (subset -> ids)."""
    if spec.sample_ids:
        return _select_explicit(spec, catalog)
    chosen: list[str] = []
    for name in spec.subset_counts:
        if spec.subset_counts[name] != 0 and name not in catalog:
            raise FdbError(
                f"{spec.dataset} subset '{name}' is not in this dataset tree",
                f"present subsets: {', '.join(catalog) or 'none'}",
            )
    for name in DATASET_SUBSETS[spec.dataset]:
        if name not in catalog:
            continue
        count = spec.count_for(name)
        ids = sorted(catalog[name], key=lambda s: (int(s), s))
        taken = ids if count == "all" else ids[:count]
        chosen += [f"{name}/{sample}" for sample in taken]
    return chosen


def _select_explicit(spec: SelectionSpec, catalog: Catalog) -> list[str]:
    for sample_id in spec.sample_ids:
        name, _, sample = sample_id.partition("/")
        if name not in catalog:
            raise FdbError(
                f"sample {sample_id}: subset '{name}' is not in this dataset tree",
                f"present subsets: {', '.join(catalog) or 'none'}",
            )
        if sample not in catalog[name]:
            ids = sorted(catalog[name], key=lambda s: (int(s), s))
            have = f"ids {ids[0]}..{ids[-1]}" if ids else "no samples"
            raise FdbError(
                f"unknown {spec.dataset} sample id {sample_id}",
                f"{name} has {have} ({len(ids)} samples)",
            )
    return list(spec.sample_ids)


def read_ids_file(path: Path, dataset: DatasetName) -> list[str]:
    """One ``NAME/ID`` per line; blank lines and ``#`` comments are ignored."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise FdbError(
            f"cannot read the sample ids file {path} ({exc.strerror})",
            "pass an existing file such as runs/RUN/repeat-1/sample-ids.txt",
        ) from exc
    ids = []
    for number, line in enumerate(lines, start=1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        try:
            ids.append(parse_sample_id(text, dataset))
        except FdbError as exc:
            raise FdbError(f"{path}:{number}: {exc.message}", exc.hint) from exc
    return ids


def format_ids(sample_ids: Sequence[str]) -> str:
    """The sample-ids.txt text: one ``NAME/ID`` per line (empty when the dataset is left out)."""
    return "".join(f"{sid}\n" for sid in sample_ids)


def count_by_subset(sample_ids: Iterable[str]) -> dict[str, int]:
    """How many ids each subset contributes, in first-seen order (for the generate summary)."""
    counts: dict[str, int] = {}
    for sid in sample_ids:
        name = sid.partition("/")[0]
        counts[name] = counts.get(name, 0) + 1
    return counts


def require_some_selection(v10_ids: Sequence[str], v15_ids: Sequence[str]) -> None:
    """The runbook's rule: leaving both datasets out of a run is an error."""
    if not v10_ids and not v15_ids:
        raise FdbError(
            "the selection leaves both v1.0 and v1.5 out of the run",
            "give --v10-per-subset or --v15-per-subset a count above 0, or sample ids",
        )
