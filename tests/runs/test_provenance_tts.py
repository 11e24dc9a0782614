"""#23 part 6 for tts-bench: the real CLI against the loopback stand-in's /v1/audio/speech
(tests/runs/selfreport_server.py): --server-revision, --model-revision, --dataset-revision and what
the server reports reach run.json, tts.json and TTS.md's header; the bearer token from
--api-key-env goes with the probes and the requests but never into a file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.runs.selfreport_server import SECRET, URL_SECRET, standin

TOKEN = "bearer-token-SECRET-987654321"


@pytest.fixture(scope="module")
def seedtts(tmp_path_factory) -> Path:
    from fdb.datasets.synthetic import SynthSizes, generate_synthetic
    from tests.fdb.test_datasets_synth_config import FakeTts

    data = tmp_path_factory.mktemp("data")
    generate_synthetic(data, sizes=SynthSizes.build(0, 0, seedtts_rows=1), tts=FakeTts())
    return data / "seedtts"


@pytest.fixture
def env(tmp_path) -> dict:
    out = dict(os.environ, FDB_WORK=str(tmp_path / "work"), COLUMNS="250", STANDIN_TOKEN=TOKEN)
    out.pop("SEED_TTS_DATASET", None)
    return out


def bench(
    port: int, out: Path, seedtts: Path, env: dict, *extra: str
) -> subprocess.CompletedProcess:
    args = [
        "tts-bench",
        "--output",
        str(out),
        "--url",
        f"http://127.0.0.1:{port}",
        "--concurrency",
        "1",
        "--num-prompts",
        "1",
        "--num-warmups",
        "0",
        "--no-quality",
        "--seed-tts",
        str(seedtts),
        *extra,
    ]
    return subprocess.run(
        [sys.executable, "-m", "fdb", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_tts_bench_records_revisions_and_the_servers_report(seedtts, env, tmp_path):
    out = tmp_path / "bench"
    with standin("full", token=TOKEN) as port:  # its self-report needs the bearer token
        done = bench(
            port,
            out,
            seedtts,
            env,
            "--api-key-env",
            "STANDIN_TOKEN",
            "--server-revision",
            "srv1",
            "--model-revision",
            "mdl2",
            "--dataset-revision",
            "seed3",
        )
    assert done.returncode == 0, done.stderr[-3000:]
    run = json.loads((out / "run.json").read_text())
    server = run["server_provenance"]
    assert (server["url"], server["bundled_system"]) == (f"http://127.0.0.1:{port}", None)
    assert (server["server_revision"], server["model_revision"], server["dataset_revision"]) == (
        "srv1",
        "mdl2",
        "seed3",
    )
    assert server["reported"]["system"] == "standin-cascade" and server["reported"]["models"] == [
        "standin-omni-1"
    ]
    assert json.loads((out / "tts.json").read_text())["run"]["server_provenance"] == server
    text = (out / "TTS.md").read_text()
    header = text.split("## ")[0]
    assert (
        "Declared: server revision `srv1`; model revision `mdl2`; dataset revision `seed3`."
        in header
    )
    assert (
        f"The server (http://127.0.0.1:{port}) reports: system `standin-cascade`; model "
        "`standin-omni-1`; service nodes asr ("
    ) in header
    for path in out.rglob("*"):
        if path.is_file():
            for secret in (SECRET, URL_SECRET, TOKEN):
                assert secret.encode() not in path.read_bytes(), f"{secret} reached {path}"
    assert TOKEN not in done.stderr + done.stdout


def test_a_speech_server_without_self_report_gives_nulls(seedtts, env, tmp_path):
    out = tmp_path / "bench"
    with standin("bare") as port:
        done = bench(port, out, seedtts, env)
    assert done.returncode == 0, done.stderr[
        -3000:
    ]  # the requests succeeded; the missing endpoints cost nothing
    reported = json.loads((out / "run.json").read_text())["server_provenance"]["reported"]
    assert (reported["system"], reported["model"], reported["models"]) == (None, None, None)
    assert [p["status"] for p in reported["probes"]] == ["absent"] * 3
    header = (out / "TTS.md").read_text().split("## ")[0]
    assert (
        "Declared: server revision not given (--server-revision); model revision not given "
        "(--model-revision); dataset revision not given (--dataset-revision)."
    ) in header
    assert (
        "reports: system not reported; model not reported" in header and "Not answered: " in header
    )
