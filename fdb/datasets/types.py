"""Typed records for dataset samples."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel

V10_SUBSETS = (
    "synthetic_pause_handling",
    "candor_pause_handling",
    "candor_turn_taking",
    "synthetic_user_interruption",
    "icc_backchannel",
)
V10_TASK = {
    "synthetic_pause_handling": "pause_handling",
    "candor_pause_handling": "pause_handling",
    "candor_turn_taking": "turn_taking",
    "synthetic_user_interruption": "user_interruption",
    "icc_backchannel": "backchannel",
}
V10_ANNOTATION = {
    "pause_handling": "pause.json",
    "turn_taking": "turn_taking.json",
    "user_interruption": "interrupt.json",
    "backchannel": None,
}
INTERRUPTION = "synthetic_user_interruption"  # the v1.0 subset the relevance judge rates
V15_CATEGORIES = ("user_interruption", "user_backchannel", "talking_to_other", "background_speech")
DATASET_SUBSETS = {"v1.0": V10_SUBSETS, "v1.5": V15_CATEGORIES}

DatasetName = Literal["v1.0", "v1.5"]


def category_key(category: str) -> tuple[int, str]:
    """The sort key of a v1.5 category: V15_CATEGORIES' order first, then any other by name."""
    known = list(V15_CATEGORIES)
    return (known.index(category) if category in known else len(known), category)


class SampleProblem(BaseModel):
    """One sample that could not be loaded (collected by the loaders' ``strict=False`` mode)."""

    sample_id: str  # "subset/id"
    path: str | None = None
    message: str
    hint: str | None = None
    kind: Literal["error", "skipped"] = "error"  # skipped: a non-sample folder, not a broken sample

    def one_line(self) -> str:
        where = f"{self.path}: " if self.path else ""
        fix = f" ({self.hint})" if self.hint else ""
        return f"{self.sample_id}: {where}{self.message}{fix}"


class V10Sample(BaseModel):
    subset: str
    id: str
    task: Literal["pause_handling", "turn_taking", "user_interruption", "backchannel"]
    dir: Path
    input_wav: Path
    annotation: Path | None  # None for icc_backchannel
    rate: int
    duration_s: float
    channels: int = 1
    pauses: list[tuple[float, float]] | None = None  # pause.json
    turn_end_s: float | None = None  # turn_taking.json[0].timestamp[0] (E)
    interrupt: tuple[float, float] | None = None  # interrupt.json[0].timestamp (S, R)
    interrupt_context: str | None = None
    interrupt_text: str | None = None

    @property
    def sample_id(self) -> str:
        return f"{self.subset}/{self.id}"


class V15Pair(BaseModel):
    category: str
    id: str
    dir: Path
    input_wav: Path
    clean_input_wav: Path
    metadata: Path
    rate: int
    duration_s: float
    clean_duration_s: float
    channels: int = 1
    overlap: tuple[float, float] | None  # metadata.json "timestamps"
    context_text: str | None = None
    current_turn_text: str | None = None

    @property
    def sample_id(self) -> str:
        return f"{self.category}/{self.id}"
