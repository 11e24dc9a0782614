"""The server part of the report headers (reports/server_header.py, RESULTS.md, SERVING.md, TTS.md):
declared revisions and the server's self-report, `not given` / `not reported` for what is
missing, a repeat whose server changed named, runs recorded before fdb kept any of it still
rendered. Typed records written and read through fdb.run_manifest's own writers and readers."""

from __future__ import annotations

from fdb.layout import RunPaths
from fdb.run_manifest import (
    DatasetUse,
    Probe,
    RepeatServer,
    RunManifest,
    ServerProvenance,
    ServerReport,
    ServerUse,
    save_manifest,
    save_repeat_server,
)
from reports.server_header import report_lines, revisions_line

FULL = ServerReport(
    url="http://127.0.0.1:9",
    system="omni-cascade",
    model="omni-1",
    service_nodes={"llm": {"kind": "openai-chat", "model": "SmolLM2"}, "asr": {"kind": "whisper"}},
    models=["omni-1", "omni-2"],
    backends={"tts": {"name": "piper/joe", "version": "1.8.0"}},
    max_sessions=8,
    probes=[
        Probe(path="/v1/realtime/capabilities", status="ok", http_status=200),
        Probe(path="/health", status="failed", reason="no answer within 5 s"),
    ],
)


def test_report_lines_say_what_the_server_said_and_what_did_not_answer():
    (said, quiet) = report_lines(FULL)
    assert said == (
        "The server (http://127.0.0.1:9) reports: system `omni-cascade`; model `omni-1`; service "
        "nodes asr (kind `whisper`), llm (kind `openai-chat`, model `SmolLM2`); backends tts "
        "`piper/joe` 1.8.0; /v1/models `omni-1`, `omni-2`; max_sessions 8."
    )
    assert quiet == "Not answered: /health failed (no answer within 5 s)."
    (bare,) = report_lines(ServerReport(url="http://h", service_nodes={}, models=[]))
    assert bare == (
        "The server (http://h) reports: system not reported; model not reported; service nodes "
        "none; /v1/models lists none."
    )
    assert report_lines(None) == [
        "The server was not asked what it is (recorded before fdb probed servers)."
    ]
    assert (
        revisions_line("a`b", None)
        == "Declared: server revision `a'b`; model revision not given (--model-revision)."
    )


def _run(tmp_path, reported: ServerReport | None) -> RunPaths:
    run = RunPaths(tmp_path / "runs" / "hdr")
    use = DatasetUse(
        dataset="v1.0",
        root="/data/v1.0",
        source="user",
        revision="fdb-synth-1",
        declared_revision="3e79",
        selection={},
        sample_ids=["candor_turn_taking/1"],
    )
    save_manifest(
        run,
        RunManifest(
            run_name="hdr",
            datasets={"v1.0": use},
            num_shards=1,
            server=ServerUse(
                url="ws://127.0.0.1:9/v1/realtime",
                system="omni-cascade",
                model="omni-1",
                turn_detection=None,
                server_revision="s1",
                model_revision="m1",
                reported=reported,
            ),
        ),
    )
    return run


def test_results_header_names_revisions_report_and_a_repeat_whose_server_changed(tmp_path):
    from reports.results import build_report

    run = _run(tmp_path, FULL)
    for number, report in ((1, FULL), (2, FULL.model_copy(update={"model": "omni-2"}))):
        rep = run.repeat(number)
        rep.root.mkdir(parents=True)
        save_repeat_server(
            rep, RepeatServer(server_revision="s1", model_revision="m1", servers=[report])
        )
    text, data, _ = build_report(run)
    header = text.split("Every number below")[0]
    assert "Server: ws://127.0.0.1:9/v1/realtime; profile `turn-based`" in header
    assert "Declared: server revision `s1`; model revision `m1`." in header
    assert (
        "The server (http://127.0.0.1:9) reports: system `omni-cascade`; model `omni-1`;" in header
    )
    assert "In repeat-1, the server" not in header  # the same server as the run's first repeat
    assert (
        "In repeat-2, the server (http://127.0.0.1:9) reports: system `omni-cascade`; "
        "model `omni-2`;" in header
    )
    assert "revision `fdb-synth-1`, declared revision `3e79`, 1 selected." in header
    assert data["server"]["reported"]["model"] == "omni-1"
    assert data["repeat_servers"]["repeat-2"]["servers"][0]["model"] == "omni-2"
    assert build_report(run)[0] == text  # deterministic


def test_results_header_of_a_run_recorded_before_provenance(tmp_path):
    from reports.results import build_report

    run = _run(tmp_path, None)
    run.repeat(1).root.mkdir(parents=True)
    header = build_report(run)[0].split("Every number below")[0]
    assert "The server was not asked what it is" in header and "In repeat-1" not in header
    assert build_report(run)[1]["repeat_servers"] == {"repeat-1": None}


def test_serving_header_with_and_without_provenance():
    from reports.serving import server_header

    assert server_header(None) == [
        "Server: not recorded (levels recorded before fdb kept the server's provenance)."
    ]
    lines = server_header(
        ServerProvenance(bundled_system="embedded-cascade", dataset_revision="d1", reported=FULL)
    )
    assert lines[0] == "Server: bundled system `embedded-cascade` (started by the sweep)."
    assert lines[1] == (
        "Declared: server revision not given (--server-revision); model revision not given "
        "(--model-revision); dataset revision `d1`."
    )
    assert lines[2].startswith("The server (http://127.0.0.1:9) reports: system `omni-cascade`")


def test_tts_header_reads_the_provenance_and_tolerates_older_runs():
    from reports.tts import _server_lines

    assert _server_lines(None) == [
        "Server provenance: not recorded (a run recorded before fdb kept it)."
    ]
    raw = ServerProvenance(url="http://h:1", model_revision="m9", reported=FULL).model_dump(
        mode="json", by_alias=True
    )
    lines = _server_lines(ServerProvenance.model_validate(raw))  # as TtsRun reads run.json
    assert (
        lines[0].startswith("Declared: server revision not given")
        and "model revision `m9`" in lines[0]
    )
    assert lines[1].startswith("The server (http://127.0.0.1:9) reports: system `omni-cascade`")
