"""Every error a user can cause ends in ONE line on stderr (what went wrong, the file, the fix) and
exit code 2; tracebacks go to $FDB_WORK/logs/fdb-debug.log, and to stderr with --log-level debug.

Each test runs the real CLI in a subprocess (`python -m fdb ...`, FDB_WORK a temporary
directory). Failures the machine cannot produce on demand (a full disk, a read-only directory
when the tests run as root, an unexpected exception) are injected by a small wrapper that
patches one function of the standard library or of fdb and then runs `python -m fdb` itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

SECRET = "sk-test-0123456789abcdefSECRET"

# Patches one thing, then runs `python -m fdb ARGS...` as the console would.
WRAPPER = r"""
import errno, os, runpy, sys
mode, root = sys.argv[1], os.path.realpath(sys.argv[2])

def inside(path):
    try:
        return os.path.realpath(os.fsdecode(path)).startswith(root + os.sep)
    except TypeError:
        return False

if mode == "enospc":  # the disk fills up: ext4 reports it at write-back, i.e. at fsync
    def fsync(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    os.fsync = fsync
elif mode == "eacces":  # ROOT is read-only (what chmod 555 does for a user other than root)
    real_open, real_mkdir = os.open, os.mkdir
    def fake_open(path, flags, *args, **kwargs):
        if flags & os.O_CREAT and inside(path) and not os.path.exists(path):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fsdecode(path))
        return real_open(path, flags, *args, **kwargs)
    def fake_mkdir(path, *args, **kwargs):
        if inside(path) and not os.path.exists(path):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fsdecode(path))
        return real_mkdir(path, *args, **kwargs)
    os.open, os.mkdir = fake_open, fake_mkdir
elif mode == "crash":  # a bug: an exception no verb turned into an FdbError
    import fdb.layout
    def check_run_name(name):
        raise RuntimeError("boom with key " + os.environ["OPENAI_API_KEY"])
    fdb.layout.check_run_name = check_run_name
elif mode == "invalid":  # a bug: a pydantic record rejected where nobody expected it
    import fdb.cli.env
    def env_lines():
        from fdb.run_manifest import RunManifest
        RunManifest.model_validate({"run_name": 3, "num_shards": "x"})
    fdb.cli.env.env_lines = env_lines
sys.argv = ["fdb", *sys.argv[3:]]
runpy.run_module("fdb", run_name="__main__", alter_sys=True)
"""


def _env(work: Path, **extra: str) -> dict:
    env = {
        "FDB_WORK": str(work),
        "PATH": "/usr/bin:/bin",
        "COLUMNS": "200",
        "HOME": str(work),
        "TMPDIR": str(work),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    env.update(extra)
    return env


def fdb(work: Path, *args: str, timeout: float = 120, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "fdb", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=_env(work, **extra),
    )


def wrapped(
    work: Path, mode: str, root: Path, *args: str, **extra: str
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", WRAPPER, mode, str(root), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(work, **extra),
    )


def one_error_line(done: subprocess.CompletedProcess) -> str:
    """The failure's only stderr line (a status line before it is allowed),
    checked for the rules."""
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2, done.stderr
    assert lines and lines[-1].startswith("ERROR: "), done.stderr
    assert not any(line.startswith("ERROR") for line in lines[:-1]), done.stderr
    assert "Traceback" not in done.stderr and "errors.pydantic.dev" not in done.stderr, done.stderr
    assert len(lines) <= 2, done.stderr
    return lines[-1]


def fake_run(work: Path, name: str = "r", datasets: tuple[str, ...] = ("v1.5",)) -> Path:
    """A run directory with a valid run.json and an empty repeat-1/ (enough for aggregate)."""
    from fdb.layout import RunPaths
    from fdb.run_manifest import DatasetUse, RunManifest, ServerUse, save_manifest

    uses = {
        d: DatasetUse(
            dataset=d,
            root=str(work / "nowhere"),
            source="synthetic",
            revision=None,
            selection={},
            sample_ids=["user_interruption/1" if d == "v1.5" else "candor_turn_taking/1"],
        )
        for d in datasets
    }
    run = RunPaths(work / "runs" / name)
    save_manifest(
        run,
        RunManifest(
            run_name=name,
            datasets=uses,
            num_shards=1,
            server=ServerUse(url=None, system="embedded-cascade", model=None, turn_detection=None),
        ),
    )
    (run.root / "repeat-1" / "scores").mkdir(parents=True)
    return run.root


# --- 1. the safety net in main() ---------------------------------------------------------------


def test_unexpected_exception_is_one_line_and_the_traceback_goes_to_the_debug_log(tmp_path):
    done = wrapped(
        tmp_path, "crash", tmp_path, "aggregate", "--run-name", "x", OPENAI_API_KEY=SECRET
    )
    log = tmp_path / "logs" / "fdb-debug.log"
    line = one_error_line(done)
    assert line == f"ERROR: RuntimeError: boom with key <redacted> (full traceback: {log})"
    text = log.read_text()
    assert (
        "Traceback (most recent call last)" in text
        and "RuntimeError: boom with key <redacted>" in text
    )
    assert "python -m fdb aggregate --run-name x" in text and "fdb/cli/aggregate.py" in text
    assert SECRET not in text and SECRET not in done.stderr
    assert oct(log.stat().st_mode & 0o777) == "0o600"
    wrapped(tmp_path, "crash", tmp_path, "aggregate", "--run-name", "x", OPENAI_API_KEY=SECRET)
    assert log.read_text().count("=== ") == 2  # appended, not replaced


def test_log_level_debug_prints_the_traceback_too(tmp_path):
    """Verbs with --log-level print the traceback above the one line at debug (secrets removed)."""
    done = wrapped(
        tmp_path,
        "crash",
        tmp_path,
        "asr",
        "--run-name",
        "x",
        "--log-level",
        "debug",
        OPENAI_API_KEY=SECRET,
    )
    assert done.returncode == 2
    assert "Traceback (most recent call last)" in done.stderr and "in check_run_name" in done.stderr
    assert done.stderr.splitlines()[-1].startswith(
        "ERROR: RuntimeError: boom with key <redacted> (full traceback: "
    )
    assert SECRET not in done.stderr
    fake_run(tmp_path)
    (tmp_path / "runs" / "r" / "run.json").write_text("{")
    done = fdb(tmp_path, "generate", "--run-name", "r", "--export-only", "--log-level", "debug")
    assert done.returncode == 2 and "Traceback (most recent call last)" in done.stderr
    assert done.stderr.splitlines()[-1].startswith(
        f"ERROR: {tmp_path}/runs/r/run.json is not a valid"
    )
    without = fdb(tmp_path, "generate", "--run-name", "r", "--export-only")
    assert "Traceback" not in without.stderr and len(without.stderr.splitlines()) == 1


def test_pydantic_validation_error_is_one_line_naming_the_field(tmp_path):
    line = one_error_line(wrapped(tmp_path, "invalid", tmp_path, "env"))
    assert line.startswith(
        "ERROR: invalid RunManifest: run_name: Input should be a valid string (got 3); "
        "and 3 more problem(s) (full traceback: "
    )


@pytest.mark.parametrize(
    "args",
    [
        ["generate", "--run-name", "x", "--bogus"],
        ["generate"],
        ["asr", "--run-name", "x", "--repeat", "two"],
    ],
    ids=["unknown-option", "missing-run-name", "not-an-integer"],
)
def test_usage_errors_are_one_line_with_the_verb_help(tmp_path, args):
    line = one_error_line(fdb(tmp_path, *args))
    assert line.endswith(f"(see `python -m fdb {args[0]} --help`)"), line


# --- 2. explicit sample ids and counts exclude each other ---------------------------------------


def test_per_subset_with_sample_id_is_one_line_not_a_pydantic_dump(tmp_path):
    done = fdb(
        tmp_path,
        "generate",
        "--run-name",
        "x",
        "--v15-per-subset",
        "0",
        "--v10-per-subset",
        "1",
        "--v10-sample-id",
        "candor_turn_taking/1",
    )
    assert one_error_line(done) == (
        "ERROR: --v10-per-subset and --v10-sample-id exclude each other: explicit sample ids "
        "select exactly those samples (drop --v10-per-subset and --v10-subset-count, or drop "
        "--v10-sample-id and --v10-sample-ids-file)"
    )
    assert not (tmp_path / "runs" / "x").exists()


# --- 3. damaged typed files ----------------------------------------------------------------------

DAMAGED_MANIFESTS = {
    "truncated": lambda text: text[: len(text) // 2],
    "wrong-type": lambda text: text.replace('"num_shards": 1', '"num_shards": "two"'),
    "missing-field": lambda text: json.dumps(
        {k: v for k, v in json.loads(text).items() if k != "server"}
    ),
    "not-an-object": lambda text: "[]",
}


@pytest.mark.parametrize("damage", DAMAGED_MANIFESTS, ids=list(DAMAGED_MANIFESTS))
def test_damaged_run_manifest_is_one_line_naming_the_file(tmp_path, damage):
    manifest = fake_run(tmp_path) / "run.json"
    manifest.write_text(DAMAGED_MANIFESTS[damage](manifest.read_text()))
    for args in (
        ["generate", "--run-name", "r", "--export-only"],
        ["aggregate", "--run-name", "r"],
    ):
        line = one_error_line(fdb(tmp_path, *args))
        assert line.startswith(f"ERROR: {manifest} is not a valid run manifest (fdb-run-1): "), line
        assert line.endswith("restore it from a copy, or record into a new --run-name)"), line
    if damage == "wrong-type":
        assert "num_shards: Input should be a valid integer" in line and "(got 'two')" in line
    if damage == "missing-field":
        assert "server: Field required" in line


def test_damaged_phase_output_is_one_line_naming_the_file(tmp_path):
    summary = fake_run(tmp_path) / "repeat-1" / "scores" / "summary.json"
    summary.write_text(
        '{"schema": "fdb-v1.5-summary-1", "categ'
    )  # cut short by a full disk or a kill
    line = one_error_line(fdb(tmp_path, "aggregate", "--run-name", "r"))
    assert line.startswith(f"ERROR: {summary} is not valid JSON (Unterminated string"), line
    # read through its record (fdb.records.v15.TimingSummary.load): the fix names the phase
    assert "(rescore the v1.5 timing: python -m fdb asr --run-name RUN --repeat N" in line, line


# --- 4. read-only FDB_WORK, full disk ------------------------------------------------------------


def test_fdb_work_under_a_file_is_one_line_naming_the_file(tmp_path):
    blocker = tmp_path / "afile"
    blocker.write_text("")
    done = fdb(
        tmp_path,
        "generate",
        "--run-name",
        "x",
        "--v15-per-subset",
        "0",
        "--v10-per-subset",
        "0",
        "--v10-subset-count",
        "candor_turn_taking=1",
        FDB_WORK=str(blocker / "work"),
    )
    line = one_error_line(done)
    assert (
        f"{blocker} is a file, not a directory (move that file away or fix the path, "
        "or export FDB_WORK=<a directory>" in line
    ), line
    assert line.startswith(f"ERROR: NotADirectoryError: {blocker}/work/"), line
    fallback = (
        tmp_path / f"fdb-debug-{os.getuid()}.log"
    )  # $FDB_WORK/logs cannot be written: the temp dir
    assert (
        line.endswith(f"; full traceback: {fallback})")
        and "NotADirectoryError" in fallback.read_text()
    )


def test_read_only_run_directory_is_one_line_naming_the_path(tmp_path):
    run = fake_run(tmp_path)
    line = one_error_line(
        wrapped(tmp_path, "eacces", run, "aggregate", "--run-name", "r", "--quiet")
    )
    assert line.startswith(f"ERROR: cannot write {run}/"), line
    assert (
        f"Permission denied ({run} is not writable) (make {run} writable (chmod u+w {run}), "
        "or export FDB_WORK=<a writable directory>)" in line
    ), line


@pytest.mark.skipif(
    os.geteuid() == 0,
    reason="root writes into a chmod 555 directory anyway; "
    "test_read_only_run_directory_is_one_line_naming_the_path simulates it",
)
def test_chmod_555_fdb_work_is_one_line(tmp_path):
    run = fake_run(tmp_path)
    run.chmod(0o555)
    try:
        line = one_error_line(fdb(tmp_path, "aggregate", "--run-name", "r", "--quiet"))
    finally:
        run.chmod(0o755)
    assert line.startswith(f"ERROR: cannot write {run}/") and "is not writable" in line, line


def test_full_disk_is_one_line_and_keeps_the_old_file(tmp_path):
    run = fake_run(tmp_path)
    (run / "RESULTS.md").write_text("old results\n")
    line = one_error_line(
        wrapped(tmp_path, "enospc", run, "aggregate", "--run-name", "r", "--quiet")
    )
    assert line.startswith(f"ERROR: cannot write {run}/"), line
    assert "No space left on device (the disk holding " in line, line
    assert (
        f"(free space there (df -h {run}) and rerun the command: finished work is kept, "
        "or export FDB_WORK=<a directory on a disk with free space>)" in line
    ), line
    assert (run / "RESULTS.md").read_text() == "old results\n"
    assert not [p for p in run.rglob("*") if p.name.endswith(".tmp")]


# --- 5. other mistakes ---------------------------------------------------------------------------


def test_aggregate_of_a_directory_that_is_no_run_is_refused(tmp_path):
    (tmp_path / "runs" / "empty").mkdir(parents=True)
    line = one_error_line(fdb(tmp_path, "aggregate", "--run-name", "empty"))
    assert line == (
        f"ERROR: {tmp_path}/runs/empty holds neither run.json nor a repeat-N/: nothing to "
        "aggregate (record a repeat first: python -m fdb generate --run-name empty)"
    )
    assert not (tmp_path / "runs" / "empty" / "RESULTS.md").exists()


def test_empty_sweep_concurrency_is_refused_not_the_default(tmp_path):
    line = one_error_line(
        fdb(
            tmp_path,
            "sweep",
            "--output",
            str(tmp_path / "sweep"),
            "--concurrency",
            "",
            "--",
            "--url",
            "ws://127.0.0.1:9/v1/realtime",
            timeout=60,
        )
    )
    assert (
        line
        == "ERROR: --concurrency '' must be rising positive integers (e.g. --concurrency 1,2,4,8)"
    )


MISTAKES = {
    "asr-unknown-run": (["asr", "--run-name", "nope"], "no run named nope under"),
    "judge-unknown-run": (["judge", "--run-name", "nope"], "no {work}/runs/nope/repeat-1"),
    "bad-run-name": (["aggregate", "--run-name", "../etc"], "run name '../etc' is not allowed"),
    "bad-count": (
        ["generate", "--run-name", "x", "--v15-per-subset", "abc"],
        "--v15-per-subset 'abc' is not a count",
    ),
    "unknown-subset": (
        ["generate", "--run-name", "x", "--v15-subset-count", "foo=1"],
        "unknown v1.5 subset 'foo'",
    ),
    "bad-sample-id": (
        ["generate", "--run-name", "x", "--v15-sample-id", "nonsense"],
        "is not NAME/ID",
    ),
    "nothing-selected": (
        ["generate", "--run-name", "x", "--v15-per-subset", "0", "--v10-per-subset", "0"],
        "leaves both v1.0 and v1.5 out",
    ),
    "missing-dataset-root": (
        ["generate", "--run-name", "x", "--v15-dataset-root", "/nonexistent"],
        "the v1.5 dataset root /nonexistent does not exist",
    ),
    "missing-ids-file": (
        ["generate", "--run-name", "x", "--v15-sample-ids-file", "/nonexistent.txt"],
        "cannot read the sample ids file /nonexistent.txt",
    ),
    "unknown-profile": (
        ["generate", "--run-name", "x", "--profile", "bogus"],
        "unknown recorder profile 'bogus'",
    ),
    "bad-turn-detection": (
        ["generate", "--run-name", "x", "--turn-detection", "{bad"],
        "--turn-detection is not JSON",
    ),
    "zero-shards": (
        ["generate", "--run-name", "x", "--num-shards", "0"],
        "--num-shards 0 is not allowed",
    ),
    "url-with-gpus": (
        ["generate", "--run-name", "x", "--url", "ws://h/v1/realtime", "--gpus", "0,1"],
        "--gpus starts bundled model servers",
    ),
    "export-only-unrecorded": (
        ["generate", "--run-name", "x", "--export-only"],
        "holds no recording to export",
    ),
    "compare-one-run": (["compare", "only"], "compare needs at least two runs, got 1"),
    "compare-unknown-runs": (["compare", "a", "b"], "a is not a run directory (no run.json)"),
    "gate-missing-baseline": (
        ["gate", "--baseline", "/nonexistent.json", "--candidate", "x"],
        "/nonexistent.json does not exist",
    ),
    "gate-default-unknown-kind": (["gate-default", "foo"], "unknown kind 'foo'"),
    "sweep-falling-levels": (
        ["sweep", "--output", "/tmp/never", "--concurrency", "4,2"],
        "must be rising",
    ),
    "sweep-search-and-levels": (
        ["sweep", "--output", "/tmp/never", "--search", "--concurrency", "1,2"],
        "--search finds the levels itself",
    ),
    "sweep-report-missing-level": (
        ["sweep", "report", "--run", "/nonexistent", "--output", "/tmp/never/s.json"],
        "/nonexistent is not a recorded level",
    ),
    "tts-bench-bad-levels": (
        ["tts-bench", "--output", "/tmp/never", "--concurrency", "1,x"],
        "--concurrency '1,x' is not a list of integers",
    ),
    "tts-bench-extra-body": (
        ["tts-bench", "--output", "/tmp/never", "--extra-body", "[1]"],
        "--extra-body must be a JSON object",
    ),
    "tts-bench-report-only": (
        ["tts-bench", "--output", "/tmp/never", "--report-only"],
        "holds no run.json",
    ),
    "baseline-unknown-source": (
        ["baseline", "freeze", "nope", "--out", "/tmp/never/b.json"],
        "nope does not exist",
    ),
    "score-missing-tree": (
        ["score", "v10", "--tree", "/nonexistent"],
        "/nonexistent/manifest.json is missing",
    ),
    "conformance-missing-wav": (
        [
            "conformance",
            "--url",
            "ws://127.0.0.1:9/v1/realtime",
            "--turn-detection",
            '{"type": "server_vad"}',
            "--question",
            "/nonexistent.wav",
        ],
        "/nonexistent.wav: audio file is missing",
    ),
    "bad-judge-env": (["asr", "--run-name", "x"], "JUDGE='claude' is not a known judge"),
    "ids-file-is-a-directory": (
        ["generate", "--run-name", "x", "--v15-sample-ids-file", "/tmp"],
        "cannot read the sample ids file /tmp (Is a directory)",
    ),
    "repeat-0": (["generate", "--run-name", "x", "--repeat", "0"], "--repeat 0 is not allowed"),
    "bad-gpus": (
        ["generate", "--run-name", "x", "--gpus", "a,b"],
        "--gpus a,b must list distinct numeric GPU indices",
    ),
    "score-transcribe-not-an-export": (
        ["score", "transcribe", "--tree", "/tmp"],
        "/tmp holds neither manifest.json (v1.0) nor reference-manifest.json",
    ),
    "conformance-native-with-turn-detection": (
        [
            "conformance",
            "--url",
            "ws://127.0.0.1:9/v1/realtime",
            "--profile",
            "minicpmo-native-pr2377",
            "--turn-detection",
            '{"type": "server_vad"}',
        ],
        "profile minicpmo-native-pr2377 does not take --turn-detection",
    ),
    "synth-unknown-part": (
        ["dataset", "synth", "--count", "foo=1"],
        "unknown synthetic part 'foo'",
    ),
    "synth-negative-count": (
        ["dataset", "synth", "--v10-per-subset", "-1"],
        "sample counts must be >= 0",
    ),
    "serve-unknown-system": (["serve", "--system", "nope"], "unknown system 'nope'"),
    "tts-bench-zero-level": (
        ["tts-bench", "--output", "/tmp/never", "--concurrency", "0"],
        "--concurrency '0' must list positive integers",
    ),
    "sweep-unknown-dataset": (
        ["sweep", "--output", "/tmp/never", "--dataset", "v2"],
        "--dataset 'v2' is not v1.5 or v1.0",
    ),
    "gate-on-no-output": (
        ["gate", "--baseline", "empty", "--candidate", "empty"],
        "{work}/runs/empty holds no fdb output (no run.json, serving.json or tts.json)",
    ),
    "cuda-uuids": (["env"], "CUDA_VISIBLE_DEVICES must list distinct numeric GPU indices"),
    "session-timeout-over-cap": (["env"], "SESSION_TIMEOUT_S=500 is outside (0, 230] s"),
}
MISTAKE_DIRS = {"gate-on-no-output": "runs/empty"}  # made under $FDB_WORK before the command
MISTAKE_ENV = {
    "bad-judge-env": {"JUDGE": "claude"},
    "cuda-uuids": {"CUDA_VISIBLE_DEVICES": "GPU-abc"},
    "session-timeout-over-cap": {"SESSION_TIMEOUT_S": "500"},
}


@pytest.mark.parametrize("case", MISTAKES, ids=list(MISTAKES))
def test_user_mistakes_are_one_line_with_a_fix(tmp_path, case):
    args, expected = MISTAKES[case]
    extra = MISTAKE_ENV.get(case, {})
    if case in MISTAKE_DIRS:
        (tmp_path / MISTAKE_DIRS[case]).mkdir(parents=True)
    line = one_error_line(fdb(tmp_path, *args, timeout=60, **extra))
    assert expected.format(work=tmp_path) in line, line
    assert line.endswith(")"), f"no fix given: {line}"


def test_a_port_that_is_no_port_is_named(tmp_path):
    line = one_error_line(fdb(tmp_path, "env", SERVER_PORT="abc"))
    assert line == (
        "ERROR: SERVER_PORT='abc' is not a TCP port (export SERVER_PORT as a number from 1 to "
        "65535, or unset it)"
    )
    line = one_error_line(fdb(tmp_path, "serve", "--port", "99999", timeout=60))
    assert line.startswith("ERROR: Invalid value for '--port': ") and "65535" in line, line


def test_tts_bench_refuses_a_url_that_is_no_http_url(tmp_path):
    """Before: every request failed against ftp://x, and tts-bench still exited 0 with a report."""
    line = one_error_line(
        fdb(
            tmp_path,
            "tts-bench",
            "--output",
            str(tmp_path / "tts"),
            "--url",
            "ftp://x",
            "--no-quality",
            timeout=60,
        )
    )
    assert line == (
        "ERROR: --url 'ftp://x' is not http(s)://HOST:PORT (pass the server's base URL, e.g. "
        "--url http://127.0.0.1:8000 (fdb adds /v1/audio/speech))"
    )
    assert not (tmp_path / "tts").exists()
