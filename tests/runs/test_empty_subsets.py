"""#25 'What to build' 1: every phase tolerates a repeat in which nothing is eligible (every
session recorded, every sample cut out of scoring, as when the recorder fell behind on all of
them) and says so in its outputs; nothing crashes, nothing is scored as if it were a number."""

from __future__ import annotations

import json
import shutil

from tests.runs.conftest import PHASES, fdb


def _make_nothing_eligible(rep) -> None:
    for manifest in (
        rep / "v10" / "reference" / "manifest.json",
        rep / "reference-audio" / "reference-manifest.json",
    ):
        data = json.loads(manifest.read_text())
        for sample in data["samples"]:
            sample["eligible"] = False
            sample["reasons"] = ["pacing_violation: every sample made ineligible by the test"]
            folder = manifest.parent / sample["subset"] / str(sample["id"])
            shutil.rmtree(folder, ignore_errors=True)
        manifest.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def test_every_phase_tolerates_a_repeat_with_nothing_eligible(demo_run):
    demo_run.restore("generate")
    rep = demo_run.run / "repeat-1"
    _make_nothing_eligible(rep)
    for phase in ("asr", "judge", "aggregate"):
        done = fdb(PHASES[phase], demo_run.env)
        assert done.returncode == 0, f"{phase}: {done.stderr[-3000:]}"
        assert "Traceback" not in done.stderr, f"{phase}: {done.stderr[-3000:]}"
    results = (demo_run.run / "RESULTS.md").read_text()
    # each section says that nothing was eligible (counts of 0, n/a), none invents a number
    assert (
        "| candor_turn_taking | 1 | 1 | 0 | 1 | pacing_violation: "
        "every sample made ineligible by the test: 1 |" in results
    )
    assert "| early_start_rate | n/a | n/a | 0/0 |" in results
    assert (
        "| candor_turn_taking | 1 | 0 | 0 | n/a | n/a |" in results
    )  # official: selected, eligible, evaluated
    assert (
        "| user_interruption | 0 | n/a n/a | n/a n/a | 0 |" in results
    )  # v1.5 timing: no eligible pair
    assert "nan" not in results.lower().split()
    assert json.loads((demo_run.run / "results.json").read_text())["tables"]
