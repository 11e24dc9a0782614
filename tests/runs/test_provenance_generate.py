"""#23 part 6: a --url run records the server's provenance. The real CLI (generate, aggregate)
against real loopback servers: a stand-in (tests/runs/selfreport_server.py) that reports itself
fully, one without the self-report endpoints, one whose endpoints answer garbage, and fdb's own
bundled server started with `python -m fdb serve`. run.json, repeat-N/server.json, RESULTS.md and
results.json carry --server-revision, --model-revision, --dataset-revision and what the server
said; nothing the server or the URL held as a secret reaches a file or the terminal."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import REPO, free_port
from tests.runs.conftest import MODEL_REVISION
from tests.runs.selfreport_server import SECRET, URL_SECRET, standin, wait_port

RUN = "prov"
V10 = [
    "--v15-per-subset",
    "0",
    "--v10-per-subset",
    "0",
    "--v10-subset-count",
    "candor_turn_taking=1",
]
QUERY_SECRET = "querysecret-0123456789"


@pytest.fixture
def env(tmp_path) -> dict:
    out = dict(os.environ, FDB_WORK=str(tmp_path / "work"), COLUMNS="250")
    for name in ("CUDA_VISIBLE_DEVICES", "GPU", "SERVER_PORT", "JUDGE_URL", "OPENAI_API_KEY"):
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


def generate(
    port: int, v10_root: Path, env: dict, *extra: str, repeat: int = 1
) -> subprocess.CompletedProcess:
    url = f"ws://127.0.0.1:{port}/v1/realtime?token={QUERY_SECRET}"
    return fdb(
        [
            "generate",
            "--run-name",
            RUN,
            "--repeat",
            str(repeat),
            *V10,
            "--v10-dataset-root",
            str(v10_root),
            "--url",
            url,
            *extra,
        ],
        env,
    )


def no_secret_in(root: Path, *texts: str) -> None:
    for secret in (SECRET, URL_SECRET, QUERY_SECRET):
        for path in root.rglob("*"):
            if path.is_file():
                assert secret.encode() not in path.read_bytes(), f"{secret} reached {path}"
        for text in texts:
            assert secret not in text


SETTINGS = ("--instructions", "Be brief.", "--voice", "NATF2", "--sampling", '{"temperature": 0.5}')


def test_url_run_records_revisions_and_what_the_server_reports(v10_root, env, tmp_path):
    with standin("full") as port:
        done = generate(
            port,
            v10_root,
            env,
            "--server-revision",
            "3ae4c2464eb0",
            "--model-revision",
            "503e754",
            "--dataset-revision",
            "3e799c45",
            *SETTINGS,
        )
        assert done.returncode == 1, done.stderr[
            -3000:
        ]  # the stand-in closes every session: a failed session
        again = generate(
            port, v10_root, env, "--server-revision", "3ae4c2464eb0", *SETTINGS, repeat=2
        )
        refused = generate(
            port, v10_root, env, "--server-revision", "ffff0000", *SETTINGS, repeat=3
        )
    err = " ".join(done.stderr.split())
    assert (
        f"server ws://127.0.0.1:{port}/v1/realtime?token=%3Credacted%3E, judge port" in err
        and "model port" not in err
    )
    assert (
        f"server http://127.0.0.1:{port} reports: system standin-cascade; model standin-omni-1"
        in err
    )

    run_dir = tmp_path / "work" / "runs" / RUN
    manifest = json.loads((run_dir / "run.json").read_text())
    server = manifest["server"]
    assert (server["system"], server["model"]) == ("standin-cascade", "standin-omni-1")
    assert (server["server_revision"], server["model_revision"]) == ("3ae4c2464eb0", "503e754")
    assert server["url"] == f"ws://127.0.0.1:{port}/v1/realtime?token=%3Credacted%3E"
    assert server["session"] == {
        "instructions": "Be brief.",
        "voice": "NATF2",
        "sampling": {"temperature": 0.5},
        "reference_audio": None,
    }
    (session_json,) = (run_dir / "repeat-1").rglob("session.json")
    assert json.loads(session_json.read_text())["extra"]["session_settings"] == server["session"]
    reported = server["reported"]
    assert reported["models"] == ["standin-omni-1"] and reported["max_sessions"] == 4
    assert reported["service_nodes"]["llm"] == {
        "kind": "openai-chat",
        "model": "SmolLM2-135M",
        "api_key": "<redacted>",
        "api_key_env": "LLM_KEY",
        "max_tokens": 64,
    }
    assert [(p["path"], p["status"]) for p in reported["probes"]] == [
        ("/v1/realtime/capabilities", "ok"),
        ("/v1/models", "ok"),
        ("/health", "ok"),
    ]
    assert "created" not in json.dumps(
        reported["probes"][1]["body"]
    )  # changes with each server start
    assert manifest["datasets"]["v1.0"]["declared_revision"] == "3e799c45"
    assert manifest["datasets"]["v1.0"]["revision"].startswith(
        "fdb-synth-"
    )  # the tree's own, kept beside it
    per_repeat = json.loads((run_dir / "repeat-1" / "server.json").read_text())
    assert per_repeat["server_revision"] == "3ae4c2464eb0" and per_repeat["servers"] == [reported]

    # a second repeat with the same revision records; another revision is another server: refused
    assert again.returncode == 1, again.stderr[-2000:]
    assert (
        json.loads((run_dir / "repeat-2" / "server.json").read_text())["servers"][0]["system"]
        == "standin-cascade"
    )
    assert (
        refused.returncode == 2
        and "--server-revision ffff0000 differs from the run's 3ae4c2464eb0" in refused.stderr
    )
    assert not (run_dir / "repeat-3").exists()

    agg = fdb(["aggregate", "--run-name", RUN, "--quiet"], env)
    assert agg.returncode == 0, agg.stderr[-3000:]
    text = (run_dir / "RESULTS.md").read_text()
    header = text.split("Every number below")[0]
    assert "Declared: server revision `3ae4c2464eb0`; model revision `503e754`." in header
    assert (
        f"The server (http://127.0.0.1:{port}) reports: system `standin-cascade`; model "
        "`standin-omni-1`; service nodes asr ("
    ) in header
    assert "llm (kind `openai-chat`" in header or "llm (api_key `<redacted>`" in header
    assert "/v1/models `standin-omni-1`; max_sessions 4." in header
    assert "declared revision `3e799c45`" in header and "Not answered" not in header
    results = json.loads((run_dir / "results.json").read_text())
    assert results["server"]["reported"]["system"] == "standin-cascade"
    assert results["repeat_servers"]["repeat-1"]["server_revision"] == "3ae4c2464eb0"
    no_secret_in(tmp_path / "work", done.stdout + done.stderr, again.stderr, agg.stderr)


def test_a_server_without_the_self_report_gives_nulls_not_a_failure(v10_root, env, tmp_path):
    with standin("bare") as port:
        done = generate(port, v10_root, env)
    assert done.returncode == 1, done.stderr[
        -3000:
    ]  # the session failed; the missing endpoints did not
    run_dir = tmp_path / "work" / "runs" / RUN
    server = json.loads((run_dir / "run.json").read_text())["server"]
    assert (
        server["system"],
        server["model"],
        server["server_revision"],
        server["model_revision"],
    ) == (None,) * 4
    reported = server["reported"]
    assert {
        k: reported[k]
        for k in ("system", "model", "service_nodes", "models", "backends", "max_sessions")
    } == dict.fromkeys(("system", "model", "service_nodes", "models", "backends", "max_sessions"))
    assert [(p["status"], p["http_status"]) for p in reported["probes"]] == [("absent", 404)] * 3
    assert fdb(["aggregate", "--run-name", RUN, "--quiet"], env).returncode == 0
    header = (run_dir / "RESULTS.md").read_text().split("Every number below")[0]
    assert (
        "Declared: server revision not given (--server-revision); "
        "model revision not given (--model-revision)." in header
    )
    assert (
        "reports: system not reported; model not reported; service nodes not reported; "
        "/v1/models not reported." in header
    )
    assert (
        "Not answered: /v1/realtime/capabilities absent (HTTP 404: the server has no "
        "/v1/realtime/capabilities); /v1/models absent"
    ) in header


def test_endpoints_that_answer_garbage_are_failed_probes_with_a_reason(v10_root, env, tmp_path):
    with standin("broken") as port:
        done = generate(port, v10_root, env)
    assert done.returncode == 1, done.stderr[-3000:]
    raw = (tmp_path / "work" / "runs" / RUN / "run.json").read_text()
    probes = {p["path"]: p for p in json.loads(raw)["server"]["reported"]["probes"]}
    assert (
        probes["/v1/realtime/capabilities"]["status"],
        probes["/v1/realtime/capabilities"]["reason"],
    ) == ("failed", "HTTP 500")  # a plain-text body is never copied into the record
    assert probes["/v1/models"]["status"] == "failed"
    assert (
        probes["/v1/models"]["reason"] == "HTTP 200 but the body is not JSON (text/html, 19 bytes)"
    )
    assert probes["/health"]["status"] == "absent" and "boom" not in raw and "\\u0000" not in raw


def test_the_bundled_server_as_an_external_url(v10_root, env, tmp_path):
    """fdb's own server, started apart with `python -m fdb serve`, recorded with --url: a real
    session passes, and run.json / RESULTS.md name the system, the model and its backends."""
    port = free_port()
    serve = subprocess.Popen(
        [sys.executable, "-m", "fdb", "serve", "--port", str(port)],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_port(port, serve, 120)
        for _ in range(600):  # the port opens before the models are loaded
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200:
                break
            time.sleep(0.2)
        done = fdb(
            [
                "generate",
                "--run-name",
                RUN,
                *V10,
                "--v10-dataset-root",
                str(v10_root),
                "--url",
                f"ws://127.0.0.1:{port}/v1/realtime",
                "--server-revision",
                "abc",
                "--model-revision",
                "def",
            ],
            env,
        )
    finally:
        serve.terminate()
        serve.wait(30)
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = tmp_path / "work" / "runs" / RUN
    server = json.loads((run_dir / "run.json").read_text())["server"]
    assert (server["system"], server["model"]) == ("embedded-cascade", "fdb/embedded-cascade")
    assert server["reported"]["service_nodes"] == {} and server["reported"]["models"] == [
        "fdb/embedded-cascade"
    ]
    assert server["reported"]["backends"]["asr"]["name"] == "faster-whisper/whisper-tiny.en"
    assert "sessions" not in server["reported"]["probes"][2]["body"]  # volatile: left out
    assert fdb(["aggregate", "--run-name", RUN, "--quiet"], env).returncode == 0
    header = (run_dir / "RESULTS.md").read_text().split("Every number below")[0]
    assert "Declared: server revision `abc`; model revision `def`." in header
    assert (
        "system `embedded-cascade`; model `fdb/embedded-cascade`; service nodes none; backends asr "
        "`faster-whisper/whisper-tiny.en`" in header
    )


def test_later_repeats_must_not_contradict_the_declared_or_reported_server(tmp_path):
    """check_compatible / check_same_server, in process: another declared revision or another
    reported system or model is another server; a probe that says nothing proves nothing."""
    from fdb.errors import FdbError
    from fdb.layout import RunPaths
    from fdb.run_manifest import (
        DatasetUse,
        RunManifest,
        ServerReport,
        ServerUse,
        check_compatible,
        check_same_server,
    )

    def manifest(model_revision=None, declared=None, reported=None) -> RunManifest:
        use = DatasetUse(
            dataset="v1.0",
            root="/d",
            source="user",
            revision="r",
            declared_revision=declared,
            selection={},
            sample_ids=["candor_turn_taking/1"],
        )
        return RunManifest(
            run_name="x",
            datasets={"v1.0": use},
            num_shards=1,
            server=ServerUse(
                url="ws://h/v1/realtime",
                system=None,
                model=None,
                turn_detection=None,
                model_revision=model_revision,
                reported=reported,
            ),
        )

    rep = RunPaths(tmp_path / "x").repeat(2)
    check_compatible(
        manifest("m1", "d1"), manifest(None, None), rep
    )  # nothing declared now: nothing contradicts
    with pytest.raises(FdbError, match="--model-revision m2 differs from the run's m1"):
        check_compatible(manifest("m1"), manifest("m2"), rep)
    with pytest.raises(FdbError, match="--dataset-revision d2 for v1.0 differs from the run's d1"):
        check_compatible(manifest(declared="d1"), manifest(declared="d2"), rep)
    first = manifest(reported=ServerReport(url="http://h", system="a", model="m"))
    check_same_server(first, ServerReport(url="http://h"))  # the probe said nothing this time
    with pytest.raises(
        FdbError,
        match="the server at http://h reports system 'b', the run's earlier repeats recorded 'a'",
    ):
        check_same_server(first, ServerReport(url="http://h", system="b", model="m"))


def test_the_bundled_server_started_by_generate_is_probed_too(demo_run):
    """Without --url generate starts the bundled server: its self-report fills run.json's
    reported (and model, which no option gave) and repeat-1/server.json. The run is the runbook's
    (tests/runs/conftest.py: generate on the bundled server, with --model-revision), as generate
    left it."""
    run_dir = demo_run.snapshots["generate"]
    server = json.loads((run_dir / "run.json").read_text())["server"]
    assert (server["url"], server["system"], server["model"], server["model_revision"]) == (
        None,
        "embedded-cascade",
        "fdb/embedded-cascade",
        MODEL_REVISION,
    )
    assert server["reported"]["url"] == f"http://127.0.0.1:{demo_run.env['SERVER_PORT']}"
    assert set(server["reported"]["backends"]) >= {"asr", "llm", "tts"}
    assert json.loads((run_dir / "repeat-1" / "server.json").read_text())["servers"] == [
        server["reported"]
    ]


def test_more_shards_than_the_url_server_admits_are_refused_from_its_report(
    v10_root, env, tmp_path
):
    """--num-shards is checked against the max_sessions the server reported at the start (4 for
    the stand-in), with no second request, before any session is recorded."""
    with standin("full") as port:
        done = generate(port, v10_root, env, "--num-shards", "5")
    err = " ".join(done.stderr.split())
    assert done.returncode == 2, done.stderr[-3000:]
    assert "--num-shards 5 over 1 GPU(s) exceeds the model server's max_sessions 4" in err
    assert not list((tmp_path / "work" / "runs" / RUN).rglob("session.json"))
