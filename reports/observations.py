"""What a gate compares: the values of one output (a run, a sweep or a tts-bench) as a typed,
hashed record, :class:`Observations`; ``fdb baseline freeze`` writes it to a file so a baseline
survives without its audio (docs/gating.md, "Frozen baselines").

Every metric is a :class:`Series` of one shape:

- ``paired``: one value per sample id (per repeat), compared sample by sample;
- ``binary``: a yes/no per sample id (per repeat), compared with McNemar;
- ``unpaired``: one value per repeat, round or server start (throughput, TTFA of a level);
- ``exact``: one value for the whole output (a sweep's capacity).

A series is named ``metric@key``: the key is a level (``c64``), a subset or category, or
``all``. ``comparability`` holds what must be equal on both sides (dataset revision and
selection, scoring backends, definitions); the gate refuses outputs where it differs.
Live outputs and frozen files go through the same record, so a gate against a frozen baseline
and a gate against the live output it was frozen from decide the same.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from fdb.errors import FdbError

BASELINE_SCHEMA = "fdb-baseline-1"
Kind = Literal["tts", "sweep", "run"]
Shape = Literal["paired", "binary", "unpaired", "exact"]
Better = Literal["lower", "higher"]


class Series(BaseModel):
    metric: str
    key: str
    label: str
    unit: str = ""
    better: Better
    shape: Shape
    values: list[float | None] = Field(default_factory=list)  # unpaired / exact
    samples: dict[str, list[float | None]] = Field(
        default_factory=dict
    )  # paired / binary: per repeat

    @property
    def name(self) -> str:
        return f"{self.metric}@{self.key}"

    def per_sample(self) -> dict[str, float | None]:
        """Each sample's mean over its repeats (None where it has no value)."""
        out = {}
        for sample, values in self.samples.items():
            present = [v for v in values if v is not None]
            out[sample] = sum(present) / len(present) if present else None
        return out

    def single_values(self) -> bool:
        return all(
            len([v for v in values if v is not None]) <= 1 for values in self.samples.values()
        )


class Observations(BaseModel):
    schema_: str = Field(BASELINE_SCHEMA, alias="schema")
    kind: Kind
    source: str
    comparability: dict[str, str | None] = Field(default_factory=dict)
    series: dict[str, Series] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)
    provenance: dict[str, Any] = Field(default_factory=dict)
    content_sha256: str | None = None

    model_config = {"populate_by_name": True}

    def add(self, series: Series) -> None:
        self.series[series.name] = series

    def content_hash(self) -> str:
        body = self.model_dump(
            mode="json", by_alias=True, exclude={"content_sha256", "provenance", "source"}
        )
        text = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def sealed(self) -> Observations:
        return self.model_copy(update={"content_sha256": self.content_hash()})

    def dump(self) -> dict:
        return self.model_dump(mode="json", by_alias=True)


def read_frozen(path: Path) -> Observations:
    """A frozen baseline, its hash checked: a file edited by hand (or cut short) is refused."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        frozen = Observations.model_validate(raw)
    except (OSError, ValueError, ValidationError) as exc:
        first = (
            exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc).splitlines()[0]
        )
        raise FdbError(
            f"{path} is not a readable frozen baseline ({first})",
            "freeze it again with `python -m fdb baseline freeze SRC --out FILE`",
        ) from exc
    if frozen.content_sha256 != frozen.content_hash():
        raise FdbError(
            f"{path}: content hash {str(frozen.content_sha256)[:12]}… does not match its content "
            f"({frozen.content_hash()[:12]}…): the file was changed after it was frozen",
            "freeze the baseline again from its source output",
        )
    return frozen
