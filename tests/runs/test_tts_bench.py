"""tts-bench end to end: the bundled endpoint on a 2-row synthetic Seed-TTS list at concurrency
1 and 2 through the CLI (real Piper, real ASR/SIM/MOS); then, in process, scripted HTTP and
realtime servers whose audio outlives its declared end or whose rate is undeclared."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import soundfile as sf

from fdb.errors import FdbError
from runs.tts_bench import bench
from tests.conftest import REPO, free_port
from tests.recorders.tts_fakes import ScriptedServer


def fdb(args: list[str], env: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fdb", *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout)


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


def test_bundled_endpoint_two_levels(seedtts, env, tmp_path):
    out = tmp_path / "bench"
    done = fdb(["tts-bench", "--output", str(out), "--concurrency", "1,2", "--num-prompts", "2",
                "--seed-tts", str(seedtts), "--frame-rate", "21.5"], env)
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads((out / "tts.json").read_text())
    assert data["schema"] == "fdb-tts-bench-1" and [r["concurrency"] for r in data["rows"]] == [1, 2]
    for row in data["rows"]:
        assert (row["requests"], row["warmups"], row["failed"], row["empty"]) == (2, 1, 0, 0)
        assert row["sample_rates"] == [22050] and row["ttfa_p50_ms"] > 0 and row["rtf_mean"] > 0
        assert row["throughput_frames_per_s"] == pytest.approx(row["throughput_audio_s_per_s"] * 21.5, rel=1e-3)
    records = _jsonl(out / "concurrency-2" / "requests.jsonl")
    assert [r["warmup"] for r in records] == [True, False, False]
    assert all(r["rate_source"] == "header" and r["transport"] == "pcm" for r in records)
    wav = out / "concurrency-2" / records[1]["audio_path"]
    info = sf.info(str(wav))
    assert info.samplerate == 22050 and info.frames * 2 == records[1]["audio_bytes"]
    assert "ignore_ref_audio" in json.loads((out / "concurrency-1" / "level.json").read_text())["body"]
    run = json.loads((out / "run.json").read_text())
    assert run["server_info"]["/health"]["backends"]["tts"]["name"] == "piper/en_US-joe-medium"
    assert run["dataset"]["source"] == "user" and run["dataset"]["rows"] == 2

    quality = data["quality"]
    assert quality["expected"] == 2 and quality["evaluated"] == 2
    assert quality["wer_mean_pct"] < 30, _jsonl(out / "quality" / "quality.jsonl")
    assert "not Whisper-large-v3" in quality["asr_label"] and "proxy" in quality["sim_label"]
    assert 0.3 < quality["sim_mean"] <= 1.0 and 1.0 <= quality["mos_mean"] <= 5.0  # resemblyzer, DNSMOS
    assert quality["sim_n"] == quality["mos_n"] == 2

    text = (out / "TTS.md").read_text()
    assert "| Concurrency | Throughput (audio-s/s) | Throughput (frames/s) | TTFA p50 | TTFA p95 | RTF (mean) |" in text
    assert "cannot clone voices" in text and "## Quality" in text and "## Definitions" in text
    assert sorted(p.name for p in (out / "tables").glob("*.csv"))[0].startswith("01-serving")
    assert (out / "plots" / "tts-concurrency.png").stat().st_size > 1000
    assert "TTS serving" in done.stderr

    from runs.tts_bench import build_report

    (out / "TTS.md").unlink()
    build_report(out)  # what --report-only runs
    assert (out / "TTS.md").read_text() == text
    with pytest.raises(FdbError, match="already holds recorded levels"):
        bench(_opts(out, seedtts, [1], 1))
    with pytest.raises(FdbError, match="holds no run.json"):
        build_report(tmp_path / "nothing")


def _opts(out, seedtts, levels, prompts, **extra):
    from runs.tts_bench import QualityOptions, TtsBenchOptions

    return TtsBenchOptions(output=out, concurrency=levels, num_prompts=prompts, dataset_root=seedtts,
                           quality=QualityOptions(enabled=False), **extra)


def test_stop_regression_and_undeclared_rate_show_in_the_run(seedtts, env, tmp_path, monkeypatch):
    monkeypatch.setenv("FDB_WORK", env["FDB_WORK"])
    with ScriptedServer() as scripted:
        late = tmp_path / "late"
        bench(_opts(late, seedtts, [1], 2, url=scripted.url("sse-late"), stream_format="sse"))
        metrics = _jsonl(late / "concurrency-1" / "metrics.jsonl")
        assert all(m["stop_violation"] and m["audio_after_done_s"] == pytest.approx(0.08) for m in metrics)
        text = (late / "TTS.md").read_text()
        assert "2 requests broke it" in text and "| 1 | 2 | 0 | 0 |" in text and "2/2" in text
        assert scripted.app.state.bodies[-1]["stream_format"] == "sse"

        blind = tmp_path / "blind"
        bench(_opts(blind, seedtts, [1], 1, url=scripted.url("undeclared"), num_warmups=0))
        row = json.loads((blind / "tts.json").read_text())["rows"][0]
        assert row["failed"] == 1 and "refusing to guess" in row["errors"][0]
        assert "refusing to guess" in (blind / "TTS.md").read_text()


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
        bench(_opts(out, seedtts, [1, 2], 2, url=f"http://127.0.0.1:{peer.port}", transport="realtime"))
    finally:
        asyncio.run_coroutine_threadsafe(peer.__aexit__(None, None, None), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
    data = json.loads((out / "tts.json").read_text())
    assert data["run"]["endpoint"] == f"ws://127.0.0.1:{peer.port}/v1/realtime"
    assert [(r["failed"], r["stop_violations"]) for r in data["rows"]] == [(0, 2), (0, 2)]
    assert "/v1/realtime session per request" in (out / "TTS.md").read_text()
    with pytest.raises(FdbError, match="not a TTS session"):
        bench(_opts(tmp_path / "no", seedtts, [1], 1, transport="realtime"))
