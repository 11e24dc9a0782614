"""#23 part 6 for sweeps: the real `sweep` and `sweep report` CLI against the loopback stand-in
(tests/runs/selfreport_server.py): --server-revision, --model-revision, --dataset-revision and
--max-per-subset (the spec's spelling; --per-subset stays its alias) as record options after --,
and what the server reports, in each level.json, serving.json and SERVING.md's header."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from rich.console import Console

from tests.conftest import REPO
from tests.runs.selfreport_server import SECRET, URL_SECRET, standin

QUERY_SECRET = "sweepsecret-0123456789"


@pytest.fixture
def env(tmp_path) -> dict:
    out = dict(os.environ, FDB_WORK=str(tmp_path / "work"), COLUMNS="250")
    for name in ("CUDA_VISIBLE_DEVICES", "GPU", "SERVER_PORT"):
        out.pop(name, None)
    return out


def fdb(args: list[str], env: dict, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "fdb", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_sweep_records_the_revisions_and_the_servers_report(v10_root, env, tmp_path):
    out = tmp_path / "sweep"
    with standin("full") as port:
        url = f"ws://127.0.0.1:{port}/v1/realtime?api_key={QUERY_SECRET}"
        done = fdb(
            [
                "sweep",
                "--dataset",
                "v1.0",
                "--concurrency",
                "1",
                "--output",
                str(out),
                "--",
                "--url",
                url,
                "--dataset-root",
                str(v10_root),
                "--max-per-subset",
                "1",
                "--dataset-revision",
                "3e799c45",
                "--server-revision",
                "3ae4c246",
                "--model-revision",
                "503e754",
                "--timeout",
                "20",
            ],
            env,
        )
    assert done.returncode == 0, done.stderr[-3000:]  # failed sessions are part of a sweep's result
    shown = f"ws://127.0.0.1:{port}/v1/realtime?api_key=%3Credacted%3E"
    spec = json.loads((out / "concurrency-1" / "level.json").read_text())
    assert (
        spec["url"] == shown and len(spec["jobs"]) == 1
    )  # --max-per-subset 1: the one synthetic sample
    assert spec["max_sessions"] == 4  # from the same capabilities probe
    server = spec["server"]
    assert (server["url"], server["bundled_system"]) == (shown, None)
    assert (server["server_revision"], server["model_revision"], server["dataset_revision"]) == (
        "3ae4c246",
        "503e754",
        "3e799c45",
    )
    assert server["reported"]["system"] == "standin-cascade" and server["reported"]["models"] == [
        "standin-omni-1"
    ]
    # the child process recorded against the real URL (the session reached the stand-in and was
    # closed by it)
    record = json.loads(next((out / "concurrency-1").rglob("session.json")).read_text())
    assert "standin closes" in (record.get("failure") or ""), record.get("failure")

    data = json.loads((out / "serving.json").read_text())
    assert data["server"] == server
    header = (out / "SERVING.md").read_text().split("Profile:")[0]
    assert f"Server: {shown}." in header
    assert (
        "Declared: server revision `3ae4c246`; model revision `503e754`; "
        "dataset revision `3e799c45`." in header
    )
    assert (
        f"The server (http://127.0.0.1:{port}) reports: system `standin-cascade`; "
        "model `standin-omni-1`" in header
    )

    again = fdb(
        [
            "sweep",
            "report",
            "--run",
            str(out / "concurrency-1"),
            "--output",
            str(tmp_path / "again" / "serving.json"),
        ],
        env,
    )
    assert again.returncode == 0, again.stderr[-2000:]
    assert (tmp_path / "again" / "SERVING.md").read_text().split("Profile:")[
        0
    ] == header  # from level.json alone
    for path in [*out.rglob("*"), *(tmp_path / "again").rglob("*")]:
        if path.is_file():
            for secret in (SECRET, URL_SECRET, QUERY_SECRET):
                assert secret.encode() not in path.read_bytes(), f"{secret} reached {path}"
    assert QUERY_SECRET not in done.stderr


def test_sweep_of_a_server_without_self_report_says_so(v10_root, env, tmp_path):
    out = tmp_path / "sweep"
    with standin("bare") as port:
        done = fdb(
            [
                "sweep",
                "--dataset",
                "v1.0",
                "--concurrency",
                "1",
                "--output",
                str(out),
                "--",
                "--url",
                f"ws://127.0.0.1:{port}/v1/realtime",
                "--dataset-root",
                str(v10_root),
                "--per-subset",
                "1",
                "--timeout",
                "20",
            ],
            env,
        )
    assert done.returncode == 0, done.stderr[-3000:]
    server = json.loads((out / "serving.json").read_text())["server"]
    assert (server["server_revision"], server["model_revision"], server["dataset_revision"]) == (
        None,
        None,
        None,
    )
    assert server["reported"]["system"] is None and server["reported"]["max_sessions"] is None
    header = (out / "SERVING.md").read_text().split("Profile:")[0]
    assert (
        "Declared: server revision not given (--server-revision); model revision not given "
        "(--model-revision); dataset revision not given (--dataset-revision)."
    ) in header
    assert (
        "system not reported; model not reported" in header
        and "Not answered: /v1/realtime/capabilities absent" in header
    )


def test_max_per_subset_is_the_spec_spelling_and_per_subset_its_alias():
    from fdb.errors import FdbError
    from runs.sweep_args import help_text, parse_record_options

    assert parse_record_options(["--max-per-subset", "4"]).choice.per_subset == "4"
    assert parse_record_options(["--per-subset", "all"]).choice.per_subset == "all"
    assert "--max-per-subset / --per-subset" in help_text() and "--server-revision" in help_text()
    with pytest.raises(FdbError, match="--server-revision '' is not a revision"):
        parse_record_options(["--server-revision", ""])


def test_a_bundled_sweep_names_its_system(tmp_path):
    """The bundled server's sweep has no URL to show: the provenance names the system started."""
    from runs.sweep import SweepOptions, _server_provenance
    from runs.sweep_args import parse_record_options

    opts = SweepOptions(output=tmp_path, record=parse_record_options(["--model-revision", "m1"]))
    with standin("full") as port:
        found = _server_provenance(f"ws://127.0.0.1:{port}/v1/realtime", opts, Console(quiet=True))
    assert (found.url, found.bundled_system, found.model_revision) == (
        None,
        "embedded-cascade",
        "m1",
    )
    assert found.reported.system == "standin-cascade"
