"""`$FDB_WORK/runs/RUN/repeat-N/` paths (see docs/formats.md): the run layout every package
reads."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from fdb.errors import FdbError

RUN_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def check_run_name(name: str) -> str:
    if not RUN_NAME_RE.match(name):
        raise FdbError(
            f"run name {name!r} is not allowed",
            "use letters, digits, '.', '_' and '-', starting with a letter or digit",
        )
    return name


@dataclass(frozen=True)
class RunPaths:
    root: Path  # $FDB_WORK/runs/RUN

    @classmethod
    def of(cls, runs_dir: Path, name: str) -> RunPaths:
        return cls(runs_dir / check_run_name(name))

    @property
    def name(self) -> str:
        return self.root.name

    @property
    def manifest(self) -> Path:
        return self.root / "run.json"

    @property
    def results_md(self) -> Path:
        return self.root / "RESULTS.md"

    @property
    def results_json(self) -> Path:
        return self.root / "results.json"

    def repeat(self, n: int) -> RepeatPaths:
        if n < 1:
            raise FdbError(f"--repeat {n} is not allowed", "repeats are numbered from 1")
        return RepeatPaths(self.root / f"repeat-{n}", n)

    def repeats(self) -> list[RepeatPaths]:
        found = []
        for child in self.root.glob("repeat-*"):
            suffix = child.name.split("-", 1)[1]
            if child.is_dir() and suffix.isdigit():
                found.append(RepeatPaths(child, int(suffix)))
        return sorted(found, key=lambda r: r.number)


@dataclass(frozen=True)
class RepeatPaths:
    root: Path
    number: int

    # v1.5
    @property
    def sample_ids(self) -> Path:
        return self.root / "sample-ids.txt"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def recording(self) -> Path:
        return self.root / "recording"

    @property
    def reference_audio(self) -> Path:
        return self.root / "reference-audio"

    @property
    def scores(self) -> Path:
        return self.root / "scores"

    # v1.0
    @property
    def v10(self) -> Path:
        return self.root / "v10"

    @property
    def v10_sample_ids(self) -> Path:
        return self.v10 / "sample-ids.txt"

    @property
    def v10_recording(self) -> Path:
        return self.v10 / "recording"

    @property
    def v10_logs(self) -> Path:
        return self.v10 / "logs"

    @property
    def v10_reference(self) -> Path:
        return self.v10 / "reference"

    @property
    def listening(self) -> Path:
        return self.root / "listening"

    def side_scoring(self, tag: str) -> Path:
        """``scoring/<asr>+<mos>+<speaker>/``: outputs of backends other than the run's, scored
        with ``fdb asr --side-by-side`` (v10/reference, reference-audio and listening as above)."""
        return self.root / "scoring" / tag

    def holds_recording(self) -> bool:
        for rec in (self.recording, self.v10_recording):
            if rec.exists() and any(rec.rglob("session.json")):
                return True
        return False
