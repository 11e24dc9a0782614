"""SIGKILL each phase at a random point, rerun it: the outputs are byte-identical to an
uninterrupted run, and every JSON file seen right after the kill is whole (atomic writes)."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO
from tests.runs.conftest import PHASES, SELECT, fdb, tree_bytes

BEFORE = {"asr": "generate", "judge": "asr", "aggregate": "judge"}
KILL_WINDOW_S = {"asr": (0.5, 12.0), "judge": (0.3, 3.0), "aggregate": (0.3, 3.0)}


def _kill_at(args: list[str], env: dict, delay_s: float) -> bool:
    """Run a phase and SIGKILL its process group after ``delay_s``; True if it was still running."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "fdb", *args],
        cwd=REPO,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        proc.wait(timeout=delay_s)
        return False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return True


def _all_whole(root) -> None:
    for path in root.rglob("*"):
        if path.is_file() and not path.name.endswith(".tmp"):
            if path.suffix == ".json":
                json.loads(path.read_text())
            elif path.suffix == ".jsonl":
                [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("phase", ["asr", "judge", "aggregate"])
def test_sigkilled_phase_reruns_to_identical_outputs(demo_run, phase):
    expected = tree_bytes(demo_run.snapshots[phase])
    rng = random.Random(f"kill-{phase}")
    for attempt in range(1 if phase == "asr" else 2):  # asr's two kill points cost 24 s each: one
        demo_run.restore(BEFORE[phase])
        low, high = KILL_WINDOW_S[phase]
        _kill_at(PHASES[phase], demo_run.env, rng.uniform(low, high) * (attempt + 1) / 2)
        _all_whole(demo_run.run)
        again = fdb(PHASES[phase], demo_run.env)
        assert again.returncode == 0, again.stderr[-2000:]
        got = tree_bytes(demo_run.run)
        assert sorted(got) == sorted(expected)
        changed = [name for name in expected if got[name] != expected[name]]
        assert not changed, f"{phase} rerun after SIGKILL differs in {changed[:5]}"


def _drop_exports(run) -> None:
    for rep in run.glob("repeat-*"):
        for folder in (rep / "reference-audio", rep / "v10" / "reference"):
            shutil.rmtree(folder, ignore_errors=True)


def test_sigkilled_export_reruns_to_identical_windows(demo_run):
    """generate's export step (``generate --export-only`` on the finished recording) killed at
    random points, then rerun: byte-identical to an uninterrupted export, and that equals what
    generate itself wrote except for the command line recorded in the manifests' provenance."""
    args = ["generate", "--run-name", "e2e", "--export-only"]
    demo_run.restore("generate")
    _drop_exports(demo_run.run)
    assert fdb(args, demo_run.env).returncode == 0
    expected = tree_bytes(demo_run.run)
    generated = tree_bytes(demo_run.snapshots["generate"])
    assert sorted(expected) == sorted(generated)
    command = re.compile(rb'"command": \[[^\]]*\]')
    assert all(command.sub(b"", expected[k]) == command.sub(b"", generated[k]) for k in expected)
    rng = random.Random("kill-export")
    for attempt in range(2):
        demo_run.restore("generate")
        _drop_exports(demo_run.run)
        _kill_at(args, demo_run.env, rng.uniform(0.8, 4.0) * (attempt + 1) / 2)
        _all_whole(demo_run.run)
        again = fdb(args, demo_run.env)
        assert again.returncode == 0, again.stderr[-2000:]
        got = tree_bytes(demo_run.run)
        assert sorted(got) == sorted(expected)
        assert [name for name in expected if got[name] != expected[name]] == []


def test_generate_refuses_a_recorded_repeat_and_export_only_needs_every_session(demo_run):
    demo_run.restore("generate")
    again = fdb(["generate", "--run-name", "e2e", *SELECT], demo_run.env)
    assert (
        again.returncode == 2
        and "already holds a recording" in again.stderr
        and "--export-only" in again.stderr
    )
    session = next(demo_run.run.rglob("v10/recording/**/session.json"))
    session.unlink()
    done = fdb(["generate", "--run-name", "e2e", "--export-only"], demo_run.env)
    assert done.returncode == 2
    assert "were never recorded" in done.stderr and "candor_turn_taking/" in done.stderr
    assert "delete" in done.stderr


def test_killing_twice_in_a_row_still_converges(demo_run):
    demo_run.restore("asr")
    for delay in (0.4, 0.8):
        _kill_at(PHASES["judge"], demo_run.env, delay)
        time.sleep(0.05)
    assert fdb(PHASES["judge"], demo_run.env).returncode == 0
    assert tree_bytes(demo_run.run) == tree_bytes(demo_run.snapshots["judge"])


def test_killed_generate_leaves_no_server_behind(demo_run):
    """#25 defect 2: kill -9 of generate while it records; the bundled server it started (its own
    session, so the kill does not reach it) notices its parent is gone and stops, releasing the
    port."""
    from runs.server import port_is_served
    from tests.conftest import free_port

    port = free_port()
    env = dict(demo_run.env, SERVER_PORT=str(port))
    proc = subprocess.Popen(
        [sys.executable, "-m", "fdb", "generate", "--run-name", "orphan", *SELECT],
        cwd=REPO,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    recording = demo_run.work / "runs" / "orphan" / "repeat-1"
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not (
            port_is_served("127.0.0.1", port) and any(recording.rglob("shard-*"))
        ):
            assert proc.poll() is None, "generate ended before it was killed"
            time.sleep(0.2)
        assert port_is_served("127.0.0.1", port), "the bundled server never came up"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and port_is_served("127.0.0.1", port):
            time.sleep(0.2)
        assert not port_is_served("127.0.0.1", port), (
            "the server outlived the generate that started it"
        )
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        subprocess.run(
            ["pkill", "-9", "-f", f"fdb serve .*--port {port}"], check=False
        )  # only if it failed


SHIM = REPO / "benchmarks" / "fault_shim"  # sitecustomize: SIGKILL around the k-th os.replace


def test_export_killed_at_its_renames_recovers_to_identical_windows(demo_run, tmp_path):
    """#25 point 9: kill generate's export right before (and once right after) the commit of an
    atomic write; a kill before the rename of a manifest left its temp file in the export
    directory, and `--export-only` refused the directory ("not empty"). Now the recovery
    removes the dead writer's temp file and ends byte-identical, with no *.tmp left."""
    args = ["generate", "--run-name", "e2e", "--export-only"]
    shim_env = dict(
        demo_run.env, PYTHONPATH=f"{SHIM}{os.pathsep}{REPO}", FDB_FAULT_PARENT=str(os.getpid())
    )
    demo_run.restore("generate")
    _drop_exports(demo_run.run)
    count = tmp_path / "renames"
    assert fdb(args, dict(shim_env, FDB_FAULT_COUNT=str(count))).returncode == 0
    expected = tree_bytes(demo_run.run)
    renames = int(count.read_text())
    assert renames >= 4
    points = [(k, "before") for k in range(1, renames + 1, 3)] + [(renames, "after")]
    for k, when in points:
        demo_run.restore("generate")
        _drop_exports(demo_run.run)
        killed = fdb(args, dict(shim_env, FDB_FAULT_AT=str(k), FDB_FAULT_WHEN=when))
        assert killed.returncode == -signal.SIGKILL, f"{when} rename {k}: {killed.stderr[-500:]}"
        _all_whole(demo_run.run)
        again = fdb(args, demo_run.env)
        assert again.returncode == 0, f"{when} rename {k}: {again.stderr[-2000:]}"
        assert tree_bytes(demo_run.run) == expected, f"{when} rename {k}"
        assert not list(demo_run.run.rglob("*.tmp")), f"{when} rename {k}: a partial file is left"
