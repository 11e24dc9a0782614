"""The CLI lists only verbs that exist, each with a description, and every --help explains."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO

VERBS = (
    "setup",
    "serve",
    "serve-model",
    "serve-judge",
    "generate",
    "asr",
    "judge",
    "aggregate",
    "env",
    "score",
    "dataset",
    "conformance",
    "sweep",
    "tts-bench",
    "baseline",
    "gate",
    "gate-default",
    "compare",
)


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "fdb", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"},
    )


def test_top_level_help_lists_the_verbs():
    out = _run("--help")
    assert out.returncode == 0
    listed = [
        line.split("│")[1].split()[0]
        for line in out.stdout.splitlines()
        if line.startswith("│ ") and len(line.split("│")[1].split()) > 1
    ]
    assert set(VERBS) <= set(listed)
    assert set(listed) - {"--help"} == set(VERBS)


def test_every_verb_explains_itself():
    for verb in VERBS:
        out = _run(verb, "--help")
        assert out.returncode == 0, verb
        assert len(out.stdout) > 400, verb


def test_unknown_run_is_a_one_line_error(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "fdb", "aggregate", "--run-name", "nope"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={"FDB_WORK": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 2
    assert (
        out.stderr.startswith("ERROR: no run named nope")
        and len(out.stderr.strip().splitlines()) == 1
    )
