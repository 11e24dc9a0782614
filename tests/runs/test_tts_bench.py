"""tts-bench end to end: the bundled endpoint on a 2-row synthetic Seed-TTS list at concurrency 1
and 2 through the CLI (real Piper, real ASR/SIM/MOS); then, in process, scripted HTTP and realtime
servers whose audio outlives its declared end or whose rate is undeclared; and level entries
recorded in rounds (repeated levels, a cold round) beside the one-directory-per-level layout."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

import pytest
import soundfile as sf

from fdb.errors import FdbError
from fdb.io import dumps_json
from fdb.records.tts import QualityOptions, QualitySummary, TtsBenchOptions, TtsReport, TtsRun
from runs.tts_bench import bench, build_report, parse_concurrency
from tests.conftest import REPO, free_port
from tests.recorders.tts_fakes import ScriptedServer


def fdb(args: list[str], env: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "fdb", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def seedtts(tmp_path_factory):
    from fdb.datasets.synthetic import SynthSizes, generate_synthetic

    root = tmp_path_factory.mktemp("synthetic")
    generate_synthetic(root, sizes=SynthSizes.build(0, 0, seedtts_rows=2))
    return root / "seedtts"


@pytest.fixture
def env(tmp_path):
    out = dict(os.environ, FDB_WORK=str(tmp_path / "work"), SERVER_PORT=str(free_port()))
    out.pop("SEED_TTS_DATASET", None)
    return out


def _jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _reads_back(out) -> TtsReport:
    """tts.json and run.json, as the bench wrote them, read back through their records and dumped
    again: the same bytes (every key and value the writer wrote survives the round trip)."""
    report = TtsReport.load(out / "tts.json")
    assert dumps_json(report.dump()) == (out / "tts.json").read_text()
    assert dumps_json(TtsRun.load(out / "run.json").dump()) == (out / "run.json").read_text()
    assert report.run == TtsRun.load(out / "run.json")
    return report


def test_bundled_endpoint_two_levels(seedtts, env, tmp_path):
    out = tmp_path / "bench"
    done = fdb(
        [
            "tts-bench",
            "--output",
            str(out),
            "--concurrency",
            "1,2",
            "--num-prompts",
            "2",
            "--seed-tts",
            str(seedtts),
            "--frame-rate",
            "21.5",
        ],
        env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads((out / "tts.json").read_text())
    assert data["schema"] == "fdb-tts-bench-1" and [r["concurrency"] for r in data["rows"]] == [
        1,
        2,
    ]
    for row in data["rows"]:
        assert (row["requests"], row["warmups"], row["failed"], row["empty"]) == (2, 1, 0, 0)
        assert row["sample_rates"] == [22050] and row["ttfa_p50_ms"] > 0 and row["rtf_mean"] > 0
        assert row["throughput_frames_per_s"] == pytest.approx(
            row["throughput_audio_s_per_s"] * 21.5, rel=1e-3
        )
    records = _jsonl(out / "concurrency-2" / "requests.jsonl")
    assert [r["warmup"] for r in records] == [True, False, False]
    assert all(r["rate_source"] == "header" and r["transport"] == "pcm" for r in records)
    wav = out / "concurrency-2" / records[1]["audio_path"]
    info = sf.info(str(wav))
    assert info.samplerate == 22050 and info.frames * 2 == records[1]["audio_bytes"]
    assert (
        "ignore_ref_audio" in json.loads((out / "concurrency-1" / "level.json").read_text())["body"]
    )
    run = json.loads((out / "run.json").read_text())
    health = next(
        p for p in run["server_provenance"]["reported"]["probes"] if p["path"] == "/health"
    )
    assert health["body"]["backends"]["tts"]["name"] == "piper/en_US-joe-medium"
    assert run["dataset"]["source"] == "user" and run["dataset"]["rows"] == 2

    quality = data["quality"]
    assert quality["expected"] == 2 and quality["evaluated"] == 2
    assert quality["wer_mean_pct"] < 30, _jsonl(out / "quality" / "quality.jsonl")
    assert "not Whisper-large-v3" in quality["asr_label"] and "proxy" in quality["sim_label"]
    assert (
        0.3 < quality["sim_mean"] <= 1.0 and 1.0 <= quality["mos_mean"] <= 5.0
    )  # resemblyzer, DNSMOS
    assert quality["sim_n"] == quality["mos_n"] == 2
    assert _reads_back(out).quality.asr_label == quality["asr_label"]

    text = (out / "TTS.md").read_text()
    assert (
        "| Concurrency | Throughput (audio-s/s) | Throughput (frames/s) | TTFA p50 | TTFA p95 | "
        "TTFA mean | RTF (mean) |"
    ) in text
    assert "cannot clone voices" in text and "## Quality" in text and "## Definitions" in text
    assert sorted(p.name for p in (out / "tables").glob("*.csv"))[0].startswith("01-serving")
    assert (out / "plots" / "tts-concurrency.png").stat().st_size > 1000
    assert "TTS serving" in done.stderr

    (out / "TTS.md").unlink()
    build_report(out)  # what --report-only runs
    assert (out / "TTS.md").read_text() == text
    with pytest.raises(FdbError, match="already holds recorded levels"):
        bench(_opts(out, seedtts, [1], 1))
    with pytest.raises(FdbError, match="holds no run.json"):
        build_report(tmp_path / "nothing")


def _opts(out, seedtts, levels, prompts, **extra):
    return TtsBenchOptions(
        output=out,
        concurrency=levels,
        num_prompts=prompts,
        dataset_root=seedtts,
        quality=QualityOptions(enabled=False),
        **extra,
    )


def test_stop_regression_and_undeclared_rate_show_in_the_run(seedtts, env, tmp_path, monkeypatch):
    monkeypatch.setenv("FDB_WORK", env["FDB_WORK"])
    with ScriptedServer() as scripted:
        late = tmp_path / "late"
        bench(_opts(late, seedtts, [1], 2, url=scripted.url("sse-late"), stream_format="sse"))
        metrics = _jsonl(late / "concurrency-1" / "metrics.jsonl")
        assert all(
            m["stop_violation"] and m["audio_after_done_s"] == pytest.approx(0.08) for m in metrics
        )
        text = (late / "TTS.md").read_text()
        assert "2 requests broke it" in text and "| 1 | 2 | 0 | 0 |" in text and "2/2" in text
        assert scripted.app.state.bodies[-1]["stream_format"] == "sse"

        blind = tmp_path / "blind"
        bench(_opts(blind, seedtts, [1], 1, url=scripted.url("undeclared"), num_warmups=0))
        row = json.loads((blind / "tts.json").read_text())["rows"][0]
        assert row["failed"] == 1 and "refusing to guess" in row["errors"][0]
        assert "refusing to guess" in (blind / "TTS.md").read_text()
    assert [v.id for v in _reads_back(late).stop_violations] == [
        m["id"] for m in metrics
    ]  # the levels layout, stop violations included


def test_tts_json_that_does_not_read_is_one_line_naming_it(tmp_path):
    """TtsReport.load: a missing, half-written or mistyped tts.json is one FdbError naming the
    file and the fix (--report-only rebuilds it)."""
    path = tmp_path / "bench" / "tts.json"
    with pytest.raises(FdbError) as missing:
        TtsReport.load(path)
    assert (
        missing.value.message
        == f"{path} is missing: the tts-bench report (the bench did not finish)"
    )
    assert f"--output {path.parent} --report-only" in missing.value.hint
    path.parent.mkdir()
    path.write_text('{"schema": "fdb-tts-bench-1", "rows": [')
    with pytest.raises(FdbError, match="is not valid JSON") as torn:
        TtsReport.load(path)
    assert str(path) in torn.value.one_line() and "\n" not in torn.value.one_line()
    path.write_text(json.dumps({"schema": "fdb-tts-bench-1", "run": {}, "rows": []}))
    with pytest.raises(FdbError, match=r"tts.json: run.options: Field required"):
        TtsReport.load(path)
    with pytest.raises(FdbError, match="holds no run.json"):
        TtsRun.load(tmp_path / "run.json")


def test_realtime_transport(seedtts, tmp_path):
    import asyncio
    import threading

    from tests.recorders.tts_realtime_fakes import RealtimeTtsPeer

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    peer = RealtimeTtsPeer()
    asyncio.run_coroutine_threadsafe(peer.__aenter__(), loop).result(10)
    try:
        out = tmp_path / "rt"
        bench(
            _opts(
                out, seedtts, [1, 2], 2, url=f"http://127.0.0.1:{peer.port}", transport="realtime"
            )
        )
    finally:
        asyncio.run_coroutine_threadsafe(peer.__aexit__(None, None, None), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
    data = json.loads((out / "tts.json").read_text())
    assert data["run"]["endpoint"] == f"ws://127.0.0.1:{peer.port}/v1/realtime"
    assert [(r["failed"], r["stop_violations"]) for r in data["rows"]] == [(0, 2), (0, 2)]
    assert "/v1/realtime session per request" in (out / "TTS.md").read_text()
    with pytest.raises(FdbError, match="not a TTS session"):
        bench(_opts(tmp_path / "no", seedtts, [1], 1, transport="realtime"))


def test_repeated_levels_in_rounds_with_a_cold_round(seedtts, env, tmp_path, monkeypatch):
    """--concurrency "1 1 2" --rounds 2: three entries, each a cold round then two measured rounds
    (concurrency-1/, concurrency-1~2/, concurrency-2/); rows are the means over the measured
    rounds, the cold round is listed apart; quality goes to the first entry's round 1."""
    monkeypatch.setenv("FDB_WORK", env["FDB_WORK"])
    scored = []
    monkeypatch.setattr(
        "runs.tts_bench.score_quality", lambda opts, spec, prompts, console: scored.append(spec)
    )
    out = tmp_path / "rounds"
    with ScriptedServer() as scripted:
        data = bench(
            _opts(
                out,
                seedtts,
                parse_concurrency("1 1 2"),
                2,
                rounds=2,
                url=scripted.url("sse"),
                stream_format="sse",
                num_warmups=0,
            ).model_copy(update={"quality": QualityOptions()})
        ).dump()
    assert data["run"]["options"]["cold_round"] is True and data["layout"] == "rounds"
    assert [s.directory for s in scored] == ["concurrency-1/round-1"]
    bases = ["concurrency-1", "concurrency-1~2", "concurrency-2"]
    expected = [
        (k, n, r, r == 0, f"{base}/" + ("cold" if r == 0 else f"round-{r}"))
        for k, (n, base) in enumerate(zip([1, 1, 2], bases, strict=True), start=1)
        for r in (0, 1, 2)
    ]
    assert [
        (f["entry"], f["concurrency"], f["round"], f["cold"], f["directory"])
        for f in data["rounds"]
    ] == expected
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("concurrency")) == bases
    for found in data["rounds"]:
        assert (out / found["directory"] / "level.json").is_file() and found["row"]["requests"] == 2
        assert len(_jsonl(out / found["directory"] / "metrics.jsonl")) == 2
    assert [(r["concurrency"], r["requests"], r["failed"]) for r in data["rows"]] == [
        (1, 4, 0),
        (1, 4, 0),
        (2, 4, 0),
    ]
    for k, (row, stats) in enumerate(zip(data["rows"], data["level_stats"], strict=True), start=1):
        measured = [f["row"] for f in data["rounds"] if f["entry"] == k and not f["cold"]]
        assert (stats["entry"], stats["concurrency"], stats["rounds"]) == (k, row["concurrency"], 2)
        for name, spread in stats["metrics"].items():
            values = [m[name] for m in measured]
            if name == "throughput_frames_per_s":  # no --frame-rate: null, never 0
                assert (
                    spread == {"mean": None, "sd": None, "min": None, "max": None, "n": 0}
                    and row[name] is None
                )
                continue
            assert spread["n"] == 2 and spread["mean"] == pytest.approx(
                statistics.fmean(values), abs=1e-6
            )
            assert spread["sd"] == pytest.approx(statistics.stdev(values), abs=1e-6)
            assert (spread["min"], spread["max"]) == (min(values), max(values)) and row[
                name
            ] == spread["mean"]
    text = (out / "TTS.md").read_text()
    assert "| Entry | Concurrency | Rounds | Throughput (audio-s/s) |" in text and " ± " in text
    assert (
        "\n| 2 | 1 | 2 | " in text
        and "**Cold rounds**" in text
        and "after one cold round (excluded)" in text
    )
    cold = text.split("**Cold rounds**")[1].split("**Details**")[0]
    assert [
        line.split(" | ")[0]
        for line in cold.splitlines()
        if line.startswith("| ") and "---" not in line
    ] == ["| Entry", "| 1", "| 2", "| 3"]
    assert any("cold-rounds" in p.name for p in (out / "tables").glob("*.csv"))
    (out / "TTS.md").unlink()
    assert build_report(out).dump()["rounds"] == data["rounds"]
    assert (out / "TTS.md").read_text() == text
    assert _reads_back(out).cold_rounds() and data["quality"] is None


def test_unique_levels_keep_one_directory_per_level_and_old_runs_load(
    seedtts, env, tmp_path, monkeypatch
):
    monkeypatch.setenv("FDB_WORK", env["FDB_WORK"])
    out = tmp_path / "flat"
    with ScriptedServer() as scripted:
        data = bench(
            _opts(
                out,
                seedtts,
                parse_concurrency("2, 1"),
                1,
                url=scripted.url("sse"),
                stream_format="sse",
            )
        ).dump()
    assert data["layout"] == "levels" and data["run"]["options"]["cold_round"] is False
    assert sorted(p.name for p in (out / "concurrency-2").iterdir()) == [
        "audio",
        "level.json",
        "metrics.jsonl",
        "requests.jsonl",
    ]
    assert [
        (f["entry"], f["concurrency"], f["round"], f["cold"], f["directory"])
        for f in data["rounds"]
    ] == [(1, 2, 1, False, "concurrency-2"), (2, 1, 1, False, "concurrency-1")]
    assert [f["row"] for f in data["rounds"]] == data["rows"]
    assert all(
        s["rounds"] == 1 and s["metrics"]["ttfa_p50_ms"]["sd"] is None for s in data["level_stats"]
    )
    text = (out / "TTS.md").read_text()
    assert (
        "| Concurrency | Throughput" in text and "Entry" not in text and "Cold rounds" not in text
    )
    run = json.loads((out / "run.json").read_text())  # a run recorded before --rounds existed
    run["options"] = {k: v for k, v in run["options"].items() if k not in ("rounds", "cold_round")}
    (out / "run.json").write_text(json.dumps(run))
    (out / "tts.json").unlink()
    again = build_report(out).dump()
    assert (
        again["rows"] == data["rows"]
        and again["layout"] == "levels"
        and (out / "TTS.md").read_text() == text
    )


def test_bad_concurrency_is_refused(env, tmp_path):
    assert parse_concurrency("64 64 128") == [64, 64, 128] and parse_concurrency(" 1,2, 2 ,4 ") == [
        1,
        2,
        2,
        4,
    ]
    for bad in ("", " , ", "0 1", "-1", "1;2", "a,b", "1.5"):
        with pytest.raises(FdbError, match="--concurrency"):
            parse_concurrency(bad)
    done = fdb(
        ["tts-bench", "--output", str(tmp_path / "x"), "--concurrency", "1 two"], env, timeout=60
    )
    assert done.returncode != 0 and "--concurrency '1 two' is not a list of integers" in done.stderr
    assert not (tmp_path / "x").exists()


def markdown_tables(text: str) -> list[list[list[str]]]:
    """Every Markdown table of ``text`` as rows of cells (header first, separator left out, ``\\|``
    read back as ``|``)."""
    import re

    found, current = [], None
    for line in text.splitlines():
        if not line.startswith("|"):
            current = None
            continue
        if current is None:
            current = []
            found.append(current)
        if not re.fullmatch(r"\|( --- \|)+", line):
            cells = re.split(r"(?<!\\)\|", line.strip()[1:-1])
            current.append([cell.strip().replace("\\|", "|") for cell in cells])
    return found


def csv_tables(folder) -> list[tuple[str, list[list[str]]]]:
    import csv

    return [
        (path.name, list(csv.reader(path.open(newline=""))))
        for path in sorted(folder.glob("*.csv"))
    ]


def test_every_csv_and_json_table_is_a_table_of_tts_md(seedtts, env, tmp_path, monkeypatch):
    """tables/*.csv and tts.json "tables" come from the Table objects TTS.md shows: each CSV's rows
    are the cells of the Markdown table at its position (serving, cold rounds, details, quality,
    stop condition), and tts.json keeps their typed values."""
    monkeypatch.setenv("FDB_WORK", env["FDB_WORK"])
    out = tmp_path / "tables"
    with ScriptedServer() as scripted:
        bench(
            _opts(
                out,
                seedtts,
                [1, 2],
                2,
                rounds=2,
                url=scripted.url("sse-late"),
                stream_format="sse",
                num_warmups=0,
            )
        )
    summary = QualitySummary(
        lang="en",
        expected=2,
        evaluated=2,
        wer_mean_pct=1.5,
        wer_corpus_pct=None,
        wer_outliers=0,
        sim_mean=0.75,
        sim_n=2,
        asr_label="test ASR",
    )
    (out / "quality").mkdir()
    (out / "quality" / "quality.json").write_text(json.dumps(summary.dump()))
    data = build_report(out).dump()
    text = (out / "TTS.md").read_text()
    shown, written = markdown_tables(text), csv_tables(out / "tables")
    assert [name for name, _ in written] == [
        "01-serving.csv",
        "02-serving-cold-rounds.csv",
        "03-serving-details.csv",
        "04-quality.csv",
        "05-stop-condition.csv",
    ]
    assert [rows for _, rows in written] == shown and all(len(rows) > 1 for rows in shown)
    assert [(t["name"], [t["headers"]]) for t in data["tables"]] == [
        (name[3:-4], rows[:1]) for name, rows in written
    ]
    assert json.loads((out / "tts.json").read_text())["tables"] == data["tables"]
    serving, quality = data["tables"][0], data["tables"][3]
    assert [r["concurrency"] for r in serving["rows"]] == [1, 2] and serving["rows"][0][
        "rounds"
    ] == 2
    ttfa = serving["rows"][0]["ttfa_p50_ms"]  # a rounds cell: the mean and sd it shows, as numbers
    assert (
        ttfa["mean"] == data["rows"][0]["ttfa_p50_ms"]
        and ttfa["sd"] == data["level_stats"][0]["metrics"]["ttfa_p50_ms"]["sd"]
    )
    assert quality["rows"][0]["value"] == 1.5 and quality["rows"][1]["value"] is None
    assert "| WER % (corpus) | n/a | test ASR |" in text
    report = _reads_back(out)  # quality, stop violations and tables survive the round trip
    assert report.quality == summary and report.stop_violations and report.tables == data["tables"]


def test_a_bench_whose_every_request_failed_exits_non_zero(seedtts, env, tmp_path):
    """#25: a closed port made every request fail and tts-bench still exited 0 with a report."""
    out = tmp_path / "closed"
    done = fdb(
        [
            "tts-bench",
            "--output",
            str(out),
            "--url",
            f"http://127.0.0.1:{free_port()}",
            "--seed-tts",
            str(seedtts),
            "--concurrency",
            "1",
            "--num-prompts",
            "2",
            "--num-warmups",
            "0",
            "--no-quality",
        ],
        env,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ERROR: every one of the 2 measured requests failed") and "--url" in last
    assert (out / "TTS.md").is_file()  # the failures are still reported, and counted
