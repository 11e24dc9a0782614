"""#25: generate refuses a bad start before it costs a repeat, and says when a repeat failed.

Real components at small scale: a real listening socket held by a child process, real loopback
servers (http.server, a raw TCP server that hangs up, a WebSocket server that speaks just enough
of the session protocol), fdb's synthetic v1.0 set made with a fake TTS (one sample), and the
real recorder. No bundled model server is started.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

from fdb.errors import FdbError
from runs.options import DatasetChoice, GenerateOptions
from runs.server import ManagedServer, PortHolder, port_holder
from tests.conftest import REPO, free_port

RUN = "faults"
V10 = [
    "--v15-per-subset",
    "0",
    "--v10-per-subset",
    "0",
    "--v10-subset-count",
    "candor_turn_taking=1",
]


# ---------------------------------------------------------------------------------- fixtures
@pytest.fixture
def work(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "work"
    monkeypatch.setenv("FDB_WORK", str(root))
    monkeypatch.setenv("SERVER_PORT", str(free_port()))
    for name in ("CUDA_VISIBLE_DEVICES", "GPU"):
        monkeypatch.delenv(name, raising=False)
    return root


def _opts(v10_root: Path, url: str | None = None, repeat: int = 1) -> GenerateOptions:
    return GenerateOptions(
        run_name=RUN,
        repeat=repeat,
        v15=DatasetChoice(per_subset="0"),
        v10=DatasetChoice(per_subset="0", subset_counts=["candor_turn_taking=1"]),
        v10_root=v10_root,
        url=url,
    )


def _generate(opts: GenerateOptions):
    from runs.generate import generate

    return generate(opts, Console(stderr=True, quiet=True))


HOLDER = (
    "import socket,sys,time;s=socket.create_server(('127.0.0.1',int(sys.argv[1])));"
    "print('listening',flush=True);time.sleep(120)"
)


@contextmanager
def held_port() -> Iterator[tuple[int, subprocess.Popen]]:
    """A free loopback port on which a child process listens."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(port)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "listening"
        yield port, proc
    finally:
        proc.kill()
        proc.wait()


@contextmanager
def http_server() -> Iterator[int]:
    """A plain web server: every GET is a 200 page."""

    class Page(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            body = b"<html>hello</html>"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def hang_up_server() -> Iterator[int]:
    """Accepts each TCP connection, then closes it without a word."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def loop():
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            conn.close()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        listener.close()


@contextmanager
def ws_server(handler) -> Iterator[str]:
    """A real WebSocket server on a free loopback port running ``handler(connection)``."""
    from websockets.sync.server import serve

    server = serve(handler, "127.0.0.1", 0, compression=None)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"ws://127.0.0.1:{server.socket.getsockname()[1]}/v1/realtime"
    finally:
        server.shutdown()
        thread.join(5)


def _created_then_close(ws) -> None:
    """session.created, then a 1011 close at the client's first message (its session.update)."""
    ws.send(json.dumps({"type": "session.created", "session": {}}))
    try:
        ws.recv(timeout=10)
    except Exception:
        return
    ws.close(1011, "model crashed")


def _close_at_once(ws) -> None:
    ws.close(1008, "no such model")


def _error_first(ws) -> None:
    ws.send(
        json.dumps(
            {"type": "error", "error": {"code": "model_not_found", "message": "no model [x]"}}
        )
    )
    ws.close(1000)


def _silent(ws) -> None:
    try:
        ws.recv(timeout=5)
    except Exception:
        pass


# --------------------------------------------------------------------- 1. a busy port's holder
def test_busy_port_refusal_names_the_holding_process(tmp_path):
    with held_port() as (port, proc):
        server = ManagedServer(system="x", host="127.0.0.1", port=port, log_path=tmp_path / "s.log")
        with pytest.raises(FdbError, match=f"something already serves 127.0.0.1:{port}") as err:
            server.start()
        line = err.value.one_line()
        assert f"(pid {proc.pid}: " in line and "socket.create_server" in line, line
        assert f"kill {proc.pid}" in err.value.hint and "\n" not in line
        assert server.proc is None and not (tmp_path / "s.log").exists()


def test_port_holder_falls_back_to_an_unknown_process(tmp_path, monkeypatch):
    """Another user's process (its fds unreadable) shows only its uid; no /proc, nothing."""
    fake = tmp_path / "proc"
    (fake / "net").mkdir(parents=True)
    header = (
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt"
        "   uid  timeout inode\n"
    )
    row = (
        "   0: 0100007F:1F91 00000000:0000 0A 00000000:00000000 00:00000000 00000000"
        "  1234        0 99999 1\n"
    )
    (fake / "net" / "tcp").write_text(header + row)
    (fake / "4242" / "fd").mkdir(parents=True)  # a process whose fds point elsewhere
    (fake / "4242" / "fd" / "3").symlink_to("socket:[11111]")
    assert port_holder(0x1F91, proc=fake).describe() == "an unknown process of uid 1234"
    assert port_holder(0x1F92, proc=fake).describe() == "an unknown process"
    assert port_holder(0x1F91, proc=tmp_path / "no-proc").describe() == "an unknown process"
    monkeypatch.setattr("runs.server.port_holder", lambda port: PortHolder(None, None, None))
    with held_port() as (port, _):
        with pytest.raises(FdbError) as err:
            ManagedServer(
                system="x", host="127.0.0.1", port=port, log_path=tmp_path / "s.log"
            ).start()
    assert f"something already serves 127.0.0.1:{port} (an unknown process)" in err.value.message
    assert "interrupted run: stop it, set SERVER_PORT" in err.value.hint


# ------------------------------------------------------- 2. a failed start leaves no repeat behind
def _never_ready(monkeypatch) -> None:
    from runs.server import ServerFleet

    init = ServerFleet.__init__

    def quick(self, *args, **kw):
        init(self, *args, **kw)
        for server in self.servers:
            server.ready_timeout_s = 1.0

    monkeypatch.setattr(ServerFleet, "__init__", quick)
    script = "import time; print('loading weights', flush=True); time.sleep(60)"
    monkeypatch.setattr(ManagedServer, "command", lambda self: [sys.executable, "-c", script])


def _exits(monkeypatch) -> None:
    script = "import sys; print('boom: no module named onnx', flush=True); sys.exit(3)"
    monkeypatch.setattr(ManagedServer, "command", lambda self: [sys.executable, "-c", script])


@pytest.mark.parametrize("fault", ["busy port", "exits while starting", "never ready"])
def test_failed_start_leaves_the_run_as_it_was(fault, work, v10_root, monkeypatch):
    """A failed first call leaves no run at all (no repeat-1/, no run.json): the next call
    starts as if it had not happened. The server log moves to $FDB_WORK/logs and the error
    points there."""
    with held_port() as (port, _):
        if fault == "busy port":
            monkeypatch.setenv("SERVER_PORT", str(port))
        elif fault == "never ready":
            _never_ready(monkeypatch)
        else:
            _exits(monkeypatch)
        with pytest.raises(FdbError) as err:
            _generate(_opts(v10_root))
    assert not (work / "runs" / RUN).exists(), sorted(
        p.name for p in (work / "runs" / RUN).rglob("*")
    )
    if fault != "busy port":
        log = work / "logs" / f"{RUN}-repeat-1-model-server-gpu0.log"
        assert f"full log: {log}" in err.value.one_line()
        assert "boom" in log.read_text() or "loading weights" in log.read_text()


def _recorded_repeat_1(work: Path, v10_root: Path) -> None:
    """repeat-1 prepared as generate does, with one session.json:
    a repeat that holds a recording."""
    from fdb.settings import load_settings
    from runs.generate import _prepare

    _, rep, _ = _prepare(_opts(v10_root), load_settings(), Console(quiet=True))
    session = rep.v10_recording / "shard-0" / "candor_turn_taking/1" / "main" / "session.json"
    session.parent.mkdir(parents=True)
    session.write_text("{}")


def test_failed_start_removes_only_what_it_created(work, v10_root, monkeypatch):
    """The run's manifest and its recorded repeat stay; a repeat-2/ that existed keeps what it
    held and loses what the failed call wrote into it."""
    _recorded_repeat_1(work, v10_root)
    run = work / "runs" / RUN
    manifest = (run / "run.json").read_bytes()
    (run / "repeat-2").mkdir()
    (run / "repeat-2" / "notes.txt").write_text("mine")
    before = sorted(str(p.relative_to(run)) for p in run.rglob("*"))
    _exits(monkeypatch)
    with pytest.raises(FdbError, match="exited with code 3 while starting"):
        _generate(_opts(v10_root, repeat=2))
    assert sorted(str(p.relative_to(run)) for p in run.rglob("*")) == before
    assert (run / "run.json").read_bytes() == manifest
    with pytest.raises(FdbError, match="repeat-1 already holds a recording"):
        _generate(_opts(v10_root, repeat=1))
    assert (run / "repeat-1" / "v10" / "sample-ids.txt").exists()


# ---------------------------------------------------------------- 3. the URL is checked first
def _url_case(case: str, stack) -> tuple[str, str]:
    """(--url, what the one-line error must say) for each bad server."""
    if case == "closed port":
        port = free_port()
        return (
            f"ws://127.0.0.1:{port}/v1/realtime",
            f"nothing listens on 127.0.0.1:{port} (connection refused)",
        )
    if case == "http scheme":
        port = stack.enter_context(http_server())
        return (
            f"http://127.0.0.1:{port}/v1/realtime",
            "is an HTTP URL, but the recorder speaks WebSocket (use ws:// instead of http://: "
            f"--url ws://127.0.0.1:{port}/v1/realtime)",
        )
    if case == "plain http server":
        port = stack.enter_context(http_server())
        return (
            f"ws://127.0.0.1:{port}/v1/realtime",
            "the server answered the WebSocket upgrade with HTTP 200",
        )
    if case == "not a url":
        return "not a url", "--url 'not a url' is not a URL, not ws:// or wss://"
    if case == "ftp":
        return "ftp://x", "--url 'ftp://x' has the scheme ftp://, not ws:// or wss://"
    if case == "unresolvable host":
        return (
            "ws://no-such-host.invalid:8097/v1/realtime",
            "the host no-such-host.invalid does not resolve",
        )
    if case == "accepts then closes":
        port = stack.enter_context(hang_up_server())
        return (
            f"ws://127.0.0.1:{port}/v1/realtime",
            "the server closed the connection during the WebSocket upgrade",
        )
    if case == "closes before session.created":
        url = stack.enter_context(ws_server(_close_at_once))
        return (
            url,
            "the server closed the WebSocket (code 1008, no such model) before session.created",
        )
    if case == "error event":
        url = stack.enter_context(ws_server(_error_first))
        return url, "the server answered the new session with error model_not_found: no model [x]"
    raise AssertionError(case)


URL_CASES = [
    "closed port",
    "http scheme",
    "plain http server",
    "not a url",
    "ftp",
    "unresolvable host",
    "accepts then closes",
    "closes before session.created",
    "error event",
]


@pytest.mark.parametrize("case", URL_CASES)
def test_bad_url_is_refused_before_it_costs_a_repeat(case, work, v10_root):
    from contextlib import ExitStack

    with ExitStack() as stack:
        url, expected = _url_case(case, stack)
        with pytest.raises(FdbError) as err:
            _generate(_opts(v10_root, url=url))
    line = err.value.one_line()
    assert expected in line, line
    assert "\n" not in line and err.value.hint
    assert not (work / "runs" / RUN).exists(), (
        "a refused --url must leave no run, repeat or manifest"
    )


def test_url_check_passes_a_server_that_opens_the_session_and_times_out_a_silent_one():
    from runs.urlcheck import check_url

    with ws_server(_created_then_close) as url:
        check_url(url, "turn-based")
    with ws_server(_silent) as url:
        with pytest.raises(
            FdbError, match="the WebSocket opened but no session.created came within 0.5 s"
        ):
            check_url(url, "turn-based", session_timeout_s=0.5)
    with pytest.raises(FdbError, match="names no host"):
        check_url("ws://:80/v1/realtime", "turn-based")


# ----------------------------------------------------- 4. failed sessions make generate exit 1
def test_failed_sessions_exit_1_and_all_stages_stops(tmp_path, v10_root):
    """A server that opens the session and then dies at session.update: the URL check passes,
    the session fails, the export is still written (the failure counted), generate exits 1
    naming the session and how to record again, and --all-stages runs no asr."""
    import os

    env = dict(os.environ, FDB_WORK=str(tmp_path / "work"))
    for name in ("CUDA_VISIBLE_DEVICES", "GPU", "SERVER_PORT"):
        env.pop(name, None)
    with ws_server(_created_then_close) as url:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "fdb",
                "generate",
                "--run-name",
                RUN,
                *V10,
                "--url",
                url,
                "--v10-dataset-root",
                str(v10_root),
                "--all-stages",
            ],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert done.returncode == 1, done.stderr[-3000:]
    err = " ".join(done.stderr.split())
    rep = tmp_path / "work" / "runs" / RUN / "repeat-1"
    assert f"Job GPU 0: server {url}, judge port" in err and "model port" not in err  # #25 point 8
    assert (
        f"1 of 1 selected session(s) of {rep} failed (candor_turn_taking/1 [main]: disconnected)"
        in err
    ), err
    assert (
        "Read v10/logs/record-shard-0.log in it, fix the server, then record the repeat again: "
        f"delete {rep} and run the same generate, or record the next one with --repeat 2"
    ) in err
    assert (
        "candor_turn_taking/1 [main]: disconnected: connection closed (code 1011, model crashed)"
        in err
    )
    assert (
        "--all-stages stopped before asr" in err
        and "python -m fdb asr --run-name faults --repeat 1" in err
    )
    manifest = json.loads((rep / "v10" / "reference" / "manifest.json").read_text())
    assert [(s["sample_id"], s["eligible"]) for s in manifest["samples"]] == [
        ("candor_turn_taking/1", False)
    ]
    assert not list(rep.rglob("asr.json")) and "ASR" not in done.stderr


def test_a_session_passes_only_when_it_recorded_and_kept_the_protocol():
    """The runbook: generate exits 0 only when every selected session passes, so a complete
    recording whose protocol verdict is "fail" did not pass either."""
    from runs.generate import failed_sessions

    def record(status: str, verdict: str, sample: str, violations=()):
        return SimpleNamespace(
            sample_id=sample,
            variant="main",
            status=status,
            verdict=SimpleNamespace(status=verdict, violations=list(violations)),
        )

    records = [
        record("ok", "pass", "a/1"),
        record("ok", "fail", "a/2", ["audio after response.done"]),
        record("timeout", "fail", "a/3"),
        record("disconnected", "fail", "a/4"),
        record("ok", "missing", "a/5"),
    ]
    assert failed_sessions(records) == [
        "a/2 [main]: protocol fail (audio after response.done)",
        "a/3 [main]: timeout",
        "a/4 [main]: disconnected",
        "a/5 [main]: protocol missing",
    ]


def test_failure_line_names_the_first_failures_and_counts_the_rest(tmp_path):
    from runs.generate import Outcome

    rep = tmp_path / "runs" / "r" / "repeat-3"
    outcome = Outcome({}, [f"s/{i} [main]: timeout" for i in range(5)], 9, "r", 3, rep)
    line = outcome.failure_line()
    assert "5 of 9 selected session(s)" in line and "s/2 [main]: timeout and 2 more)" in line
    assert "s/3" not in line and "--repeat 4" in line and "\n" not in line
    assert Outcome({}, [], 9, "r", 3, rep).ok


# --------------------------------------------------------------- 6. dataset text is not markup
def test_dataset_warnings_keep_square_brackets(tmp_path):
    from runs.datasets import DatasetTree
    from runs.generate import Selected, _print_selection

    tree = DatasetTree(dataset="v1.0", root=tmp_path / "v1.0 [copy]", source="user")
    sel = Selected(
        "v1.0",
        tree,
        spec=None,
        ids=["candor_turn_taking/1"],
        problems=["candor_turn_taking/2: turn_taking.json: key [bad] is not a list"],
    )
    console = Console(record=True, width=300)
    _print_selection([sel], console)
    text = console.export_text()
    assert "key [bad] is not a list" in text and "v1.0 [copy]" in text


# ------------------------------------------------- 7. RESULTS.md: a repeat with no recording
def test_official_section_lists_only_recorded_repeats_as_not_evaluated(tmp_path):
    from fdb.layout import RunPaths
    from fdb.records.v10_reference import OfficialSubset, OfficialSummary
    from reports.v10 import official_section

    run = RunPaths(tmp_path / "r")
    empty, scored, pending = run.repeat(1), run.repeat(2), run.repeat(3)
    empty.root.mkdir(parents=True)  # never recorded (a failed start of older versions, or removed)
    scored.v10_reference.mkdir(parents=True)
    (scored.v10_reference / "manifest.json").write_text("{}")
    cell = OfficialSubset(
        subset="candor_turn_taking",
        task="turn_taking",
        selected=1,
        eligible=1,
        evaluated=1,
        takeovers=1,
        takeover_rate=1.0,
        latency_s=0.5,
        latency_n=1,
    )
    official = OfficialSummary(
        manifest_sha256="0" * 64, asr_sha256="0" * 64, subsets={"candor_turn_taking": cell}
    )
    (scored.v10_reference / "official.json").write_text(json.dumps(official.dump()))
    text = "\n".join(official_section(run.repeats()).lines)
    assert "Not evaluated yet" not in text, text
    pending.v10_reference.mkdir(parents=True)
    (pending.v10_reference / "manifest.json").write_text(
        "{}"
    )  # exported, official.json not yet written
    text = "\n".join(official_section(run.repeats()).lines)
    assert "Not evaluated yet: repeat-3." in text and "repeat-1" not in text
