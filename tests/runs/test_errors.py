"""The runbook's Troubleshooting rows as real one-line errors with the fix."""

from __future__ import annotations

import sys

import pytest
from rich.console import Console

from fdb.errors import FdbError
from fdb.layout import RunPaths
from fdb.run_manifest import DatasetUse, RunManifest, ServerUse, check_compatible
from runs.server import ManagedServer


class FakeServer(ManagedServer):
    """A child that logs and then sleeps, or exits: the lifecycle without the real model server."""

    def __init__(self, tmp_path, script: str, **kw):
        super().__init__(
            system="x",
            host="127.0.0.1",
            port=1,
            log_path=tmp_path / "logs/model-server-gpu0.log",
            **kw,
        )
        self.script = script

    def command(self) -> list[str]:
        return [sys.executable, "-c", self.script]


LOG_THEN = (
    "import time,sys; print('loading weights'); print('boom: no module named onnx'); "
    "sys.stdout.flush(); "
)


def test_server_not_ready_ends_with_the_log_tail(tmp_path, monkeypatch):
    monkeypatch.setattr("runs.server.port_is_served", lambda host, port: False)
    server = FakeServer(tmp_path, LOG_THEN + "time.sleep(30)", ready_timeout_s=1.5)
    with pytest.raises(FdbError, match="the model server did not become ready") as err:
        server.start()
    assert (
        "boom: no module named onnx" in str(err.value)
        and "model-server-gpu0.log" in err.value.one_line()
    )
    assert server.proc.poll() is not None, "the unready server is stopped"


def test_server_exit_during_recordings(tmp_path, monkeypatch):
    monkeypatch.setattr("runs.server.port_is_served", lambda host, port: False)
    server = FakeServer(tmp_path, LOG_THEN + "time.sleep(30)", ready_timeout_s=0.5)
    with pytest.raises(FdbError):
        server.start()
    with pytest.raises(
        FdbError, match="the model server exited with code -?\\d+ during the recordings"
    ) as err:
        server.check_alive()
    assert (
        "boom" in str(err.value)
        and "delete the repeat and generate it again" in err.value.one_line()
    )
    early = FakeServer(tmp_path, LOG_THEN + "sys.exit(3)")
    with pytest.raises(FdbError, match="exited with code 3 while starting"):
        early.start()


def _manifest(v10: bool, v15: bool) -> RunManifest:
    uses = {}
    for name, on in (("v1.0", v10), ("v1.5", v15)):
        if on:
            uses[name] = DatasetUse(
                dataset=name,
                root="/d",
                source="synthetic",
                revision="r",
                selection={},
                sample_ids=["a/1"],
            )
    return RunManifest(
        run_name="x",
        datasets=uses,
        num_shards=1,
        server=ServerUse(url=None, system="embedded-cascade", model=None, turn_detection={}),
    )


def test_v15_only_repeat_names_the_option(tmp_path):
    rep = RunPaths.of(tmp_path, "x").repeat(2)
    with pytest.raises(FdbError, match="repeat-2 is a v1.5-only repeat") as err:
        check_compatible(_manifest(v10=False, v15=True), _manifest(v10=True, v15=True), rep)
    assert "--v10-per-subset 0" in err.value.one_line()
    with pytest.raises(FdbError, match="is a v1.0-only repeat"):
        check_compatible(_manifest(v10=True, v15=False), _manifest(v10=True, v15=True), rep)
    prev, new = _manifest(True, True), _manifest(True, True)
    new.judge, prev.judge = "gpt", "qwen"
    with pytest.raises(FdbError, match="JUDGE=gpt differs"):
        check_compatible(prev, new, rep)


@pytest.mark.parametrize("dataset", ["v1.5", "v1.0"])
def test_unfinished_export_is_named(tmp_path, dataset):
    from runs.phases import exported

    rep = RunPaths.of(tmp_path, "x").repeat(1)
    base = rep.recording if dataset == "v1.5" else rep.v10_recording
    (base / "shard-0/s/1/main").mkdir(parents=True)
    (base / "shard-0/s/1/main/session.json").write_text("{}")
    name = (
        "reference-audio/reference-manifest.json"
        if dataset == "v1.5"
        else "v10/reference/manifest.json"
    )
    with pytest.raises(FdbError, match=f"{name} is missing") as err:
        exported(rep)
    line = err.value.one_line()
    assert (
        "python -m fdb generate --run-name x --repeat 1 --export-only" in line
        and "delete" not in line
    )


@pytest.mark.parametrize("dataset", ["v1.5", "v1.0"])
def test_judge_on_an_unfinished_export_advises_export_only(tmp_path, dataset):
    """The judges read the export: a missing manifest advises --export-only, which recovers the
    windows from the complete recording, not deleting the repeat."""
    from judges.inputs import load_interruptions, load_v15_pairs

    rep = RunPaths.of(tmp_path, "demo").repeat(3)
    ids = rep.sample_ids if dataset == "v1.5" else rep.v10_sample_ids
    ids.parent.mkdir(parents=True)
    ids.write_text(
        "user_interruption/1\n" if dataset == "v1.5" else "synthetic_user_interruption/1\n"
    )
    with pytest.raises(FdbError, match="manifest.json is missing") as err:
        (load_v15_pairs if dataset == "v1.5" else load_interruptions)(rep.root)
    line = err.value.one_line()
    assert (
        "python -m fdb generate --run-name demo --repeat 3 --export-only" in line
        and "delete" not in line
    )
    manifest = (
        rep.reference_audio / "reference-manifest.json"
        if dataset == "v1.5"
        else rep.v10_reference / "manifest.json"
    )
    manifest.parent.mkdir(parents=True)
    manifest.write_text("{not json")  # a torn or edited manifest: the same recovery
    with pytest.raises(FdbError, match="is not a valid export manifest") as err:
        (load_v15_pairs if dataset == "v1.5" else load_interruptions)(rep.root)
    assert err.value.hint == (
        f"delete {manifest.parent} and cut the windows again from the recording with "
        "python -m fdb generate --run-name demo --repeat 3 --export-only"
    )


def test_a_repeat_with_no_recording_still_says_delete_or_generate(tmp_path):
    from runs.phases import exported

    rep = RunPaths.of(tmp_path, "x").repeat(1)
    rep.root.mkdir(parents=True)
    with pytest.raises(FdbError, match="holds no recording") as err:
        exported(rep)
    assert (
        "record it first: python -m fdb generate --run-name x --repeat 1 " in err.value.one_line()
    )


def test_all_stages_stop_names_the_continuing_commands(monkeypatch):
    import runs.phases as phases

    monkeypatch.setattr(phases, "run_asr", lambda *a, **k: True)
    monkeypatch.setattr(phases, "run_judge", lambda *a, **k: False)
    monkeypatch.setattr(
        phases, "run_aggregate", lambda *a, **k: pytest.fail("aggregate must not run")
    )
    console = Console(record=True, width=400)
    assert not phases.run_all_stages("demo", 2, console)
    text = console.export_text()
    assert "judge stopped the --all-stages run of demo repeat-2" in text
    assert (
        "python -m fdb judge --run-name demo --repeat 2 --retry-failed && "
        "python -m fdb aggregate --run-name demo"
    ) in text
    assert (
        phases.continue_commands("r", 1, "asr")[0]
        == "python -m fdb asr --run-name r --repeat 1 --retry-failed"
    )


def test_bundled_server_runs_niced_below_the_recorder(tmp_path, monkeypatch):
    """The child inherits SERVER_NICE before exec, so its model threads yield to the recorder."""
    import os

    from runs.server import SERVER_NICE

    probe = tmp_path / "nice.txt"
    script = f"import os, time; open({str(probe)!r}, 'w').write(str(os.nice(0))); time.sleep(30)"
    monkeypatch.setattr(ManagedServer, "command", lambda self: [sys.executable, "-c", script])
    server = ManagedServer(
        system="x", host="127.0.0.1", port=1, log_path=tmp_path / "s.log", ready_timeout_s=3
    )
    with pytest.raises(FdbError, match="did not become ready"):
        server.start()
    assert int(probe.read_text()) == min(os.nice(0) + SERVER_NICE, 19)


def test_a_phase_step_that_crashes_prints_one_line_and_logs_the_traceback(tmp_path, monkeypatch):
    """#25 point 5: an unexpected error inside one step of asr (here a damaged asr.json that does
    not parse) is one WARNING line naming the file, the fix and the debug log; the traceback is
    in that log, not on the terminal (it was 50-89 lines)."""
    import io

    from fdb.io import read_json
    from runs.phases import _step

    monkeypatch.setenv("FDB_WORK", str(tmp_path / "work"))
    damaged = tmp_path / "asr.json"
    damaged.write_text('{"samples": [')
    out = io.StringIO()
    ok = _step(
        "the v1.0 ASR",
        lambda: read_json(damaged),
        Console(file=out, width=400),
        "python -m fdb asr --run-name R",
    )
    lines = out.getvalue().splitlines()
    assert not ok and "Traceback" not in out.getvalue()
    assert lines[0].startswith("WARNING: the v1.0 ASR failed: ") and str(damaged) in lines[0]
    assert (
        "full traceback: " in lines[0]
        and lines[1].strip() == "fix the cause, then rerun: python -m fdb asr --run-name R"
    )
    log = tmp_path / "work" / "logs" / "fdb-debug.log"
    assert "Traceback" in log.read_text() and "JsonFileError" in log.read_text()
