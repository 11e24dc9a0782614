"""The control gate: six control pairs with 18 expected axis statuses (``controls/``).

The controls are graded through the same code as real pairs, together with the first grading
batch. Unless all 18 statuses match ``control-expected.json``, nothing graded alongside them is
kept and the judge stops with the list of mismatches. The controls check the rubric and the
judge configuration, not the judge's accuracy."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from fdb.errors import FdbError
from fdb.io import sha256_file
from judges.semantic.grading import PairView
from judges.semantic.rubric import AXES
from judges.store import SampleResult

CONTROLS_DIR = Path(__file__).resolve().parent / "controls"
CONTROL_FAILED = "Control check failed: this judge configuration is not accepted."


def load_controls(folder: Path = CONTROLS_DIR) -> tuple[list[PairView], dict[str, dict[str, str]]]:
    """The control pairs (sample ids ``control/<id>``) and their expected statuses."""
    expected = json.loads((folder / "control-expected.json").read_text(encoding="utf-8"))[
        "controls"
    ]
    pairs = []
    for cid in sorted(expected):
        data = json.loads((folder / f"{cid}.json").read_text(encoding="utf-8"))
        pairs.append(
            PairView(
                sample_id=f"control/{cid}",
                category=data["category"],
                transcripts=data["transcripts"],
                metadata=data.get("metadata"),
            )
        )
    if len(pairs) != 6 or any(set(v) != set(AXES) for v in expected.values()):
        raise FdbError(f"{folder} does not hold six controls with three axes each", "reinstall fdb")
    return pairs, expected


def controls_sha256(folder: Path = CONTROLS_DIR) -> dict[str, str]:
    return {p.name: sha256_file(p) for p in sorted(folder.glob("*.json"))}


class Mismatch(BaseModel):
    control: str
    axis: str
    expected: str
    got: str


class Comparison(BaseModel):
    schema_: str = Field("fdb-semantic-control-comparison-1", alias="schema")
    passed: bool
    matched: int
    total: int
    mismatches: list[Mismatch]
    statuses: dict[str, dict[str, str]]
    compared_utc: str

    model_config = {"populate_by_name": True}


def compare(
    results: dict[str, SampleResult], expected: dict[str, dict[str, str]], when: str
) -> Comparison:
    """Each control's final axis statuses against the expected ones; a control whose request
    failed or was invalid has every axis ``no_valid_reply``."""
    mismatches, statuses, matched = [], {}, 0
    for cid, axes in sorted(expected.items()):
        result = results.get(f"control/{cid}")
        got_axes: dict[str, Any] = (
            (result.value or {}).get("axes", {}) if result and result.outcome == "valid" else {}
        )
        statuses[cid] = {}
        for axis in AXES:
            got = got_axes.get(axis, {}).get("status", "no_valid_reply")
            statuses[cid][axis] = got
            if got == axes[axis]:
                matched += 1
            else:
                mismatches.append(Mismatch(control=cid, axis=axis, expected=axes[axis], got=got))
    return Comparison(
        passed=not mismatches,
        matched=matched,
        total=3 * len(expected),
        mismatches=mismatches,
        statuses=statuses,
        compared_utc=when,
    )


class ControlCheckFailed(FdbError):
    def __init__(self, comparison: Comparison, where: Path):
        listed = "; ".join(
            f"{m.control} {m.axis}: expected {m.expected}, got {m.got}"
            for m in comparison.mismatches
        )
        super().__init__(
            f"{CONTROL_FAILED} {comparison.matched}/{comparison.total} axis statuses match "
            f"({listed}); nothing graded alongside the controls was kept",
            f"see {where}; check that the judge server runs the pinned revision, and do not "
            "grade with a configuration that fails the controls",
        )
        self.comparison = comparison
