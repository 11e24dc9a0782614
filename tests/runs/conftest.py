"""One real recording shared by the runbook tests: generate against the bundled server on a free
loopback port (one v1.5 pair, one v1.0 sample of fdb's synthetic sets), then each later phase
run on its own, with a snapshot of the run after every phase (the kill tests start from them)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

# the fault battery's selection and its comparison of two runs' files, so both judge alike
from benchmarks.faults import SELECT, STAMP, tree_bytes  # noqa: F401
from tests.conftest import REPO, free_port

MODEL_REVISION = "mm1"  # declared by the demo run's generate (test_provenance_generate reads it)
PHASES = {
    "asr": ["asr", "--run-name", "e2e"],
    "judge": ["judge", "--run-name", "e2e"],
    "aggregate": ["aggregate", "--run-name", "e2e", "--quiet"],
}


@pytest.fixture(scope="module")
def v10_root(tmp_path_factory) -> Path:
    """A v1.0 tree of fdb's synthetic set with one candor_turn_taking sample
    (a silent fake voice)."""
    from fdb.datasets.synthetic import SynthSizes, generate_synthetic
    from tests.fdb.test_datasets_synth_config import FakeTts

    data = tmp_path_factory.mktemp("data")
    generate_synthetic(
        data, sizes=SynthSizes.build(0, 0, 0, counts=["candor_turn_taking=1"]), tts=FakeTts()
    )
    return data / "v1.0"


def fdb(args: list[str], env: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "fdb", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# The recorder and the bundled server share the 2 cores. On the CI's virtual machines both
# processes have been seen frozen together for 100-190 ms while the server's models ran (the
# trace shows the server's 100 ms audio deltas late by as much as the recorder's packets): the
# packet sent then is more than 80 ms late, the recorder reports itself behind and rightly
# makes the sample ineligible. That is the measuring instrument refusing a bad measurement, not
# what these tests are about, so only then the recording is made again (at most twice).
GENERATE_RETRIES = 2


def _client_fell_behind(done: subprocess.CompletedProcess) -> bool:
    return done.returncode == 0 and "not eligible" in done.stderr and "pacing:" in done.stderr


@dataclass
class DemoRun:
    work: Path
    env: dict
    outputs: dict[str, subprocess.CompletedProcess] = field(default_factory=dict)
    snapshots: dict[str, Path] = field(default_factory=dict)  # state after each phase

    @property
    def run(self) -> Path:
        return self.work / "runs" / "e2e"

    def restore(self, phase: str) -> None:
        shutil.rmtree(self.run)
        shutil.copytree(self.snapshots[phase], self.run, symlinks=True)


@pytest.fixture(scope="session")
def synthetic_work(tmp_path_factory) -> Path:
    """An $FDB_WORK with fdb's synthetic sets (one v1.0 sample per subset, one v1.5 pair per
    category), generated once (Piper: some 7 s); the fixtures below start from copies of it (the
    generation is deterministic and no file names the folder)."""
    from fdb.datasets.synthetic import ensure_synthetic

    root = tmp_path_factory.mktemp("synthetic")
    ensure_synthetic(root, v10_per_subset=1, v15_per_category=1)
    return root


def synthetic_copy(synthetic_work: Path, root: Path) -> Path:
    """``root`` (made if missing) holding a copy of ``synthetic_work``."""
    shutil.copytree(synthetic_work, root, symlinks=True, dirs_exist_ok=True)
    return root


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory, synthetic_work) -> DemoRun:
    root = synthetic_copy(synthetic_work, tmp_path_factory.mktemp("fdbwork"))
    env = dict(os.environ, FDB_WORK=str(root), SERVER_PORT=str(free_port()))
    for name in ("CUDA_VISIBLE_DEVICES", "GPU", "JUDGE_CONFIG", "JUDGE_URL", "OPENAI_API_KEY"):
        env.pop(name, None)
    demo = DemoRun(root, env)
    snaps = tmp_path_factory.mktemp("snapshots")
    generate = ["generate", "--run-name", "e2e", *SELECT, "--model-revision", MODEL_REVISION]
    for phase, args in [("generate", generate), *PHASES.items()]:
        done = fdb(args, env)
        for _ in range(GENERATE_RETRIES if phase == "generate" else 0):
            if not _client_fell_behind(done):
                break
            print(
                f"generate: the recorder fell behind its schedule, recording again:\n{done.stderr}"
            )
            shutil.rmtree(demo.run)
            done = fdb(args, env)
        assert done.returncode == 0, f"{phase}: {done.stderr[-3000:]}"
        demo.outputs[phase] = done
        demo.snapshots[phase] = snaps / phase
        shutil.copytree(demo.run, snaps / phase, symlinks=True)
    return demo
