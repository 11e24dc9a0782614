"""Reply latency of the embedded cascade: how soon after the user stops speaking it speaks.

Starts ``serving.launcher.serve`` in a child process on a free loopback port (real models; its
CPU is not this process's), then opens one session per question: 0.25 s of silence, a
Piper-spoken question and 3 s of silence, sent in 80 ms packets in real time. Per turn it prints

- ``stop→asr``: ``input_audio_buffer.speech_stopped`` → ``...transcription.completed``;
- ``asr→audio``: the transcription → the first ``response.output_audio.delta``;
- ``end→audio``: the speech end (``audio_end_ms`` of speech_stopped) → the first audio delta,
  on the input timeline (packet k, covering [80k, 80k + 80) ms, leaves at start + 80k ms, as a
  recorder sends it), i.e. how far into the following input the reply starts;

then the mean and max of each. ``--concurrency 2`` runs two sessions at a time (staggered by
``--stagger`` seconds) to see the figures while two sessions share the CPU; ``--repeat N`` asks
the questions N times; ``--warmup`` first runs that many unreported sessions (the first turns
of a fresh server are slower).

    python benchmarks/cascade_latency.py [--concurrency 2] [--repeat 3] [--url ws://HOST:PORT/v1/realtime]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.support.realtime_client import Client  # noqa: E402
from fdb.audio import float_to_pcm16, resample  # noqa: E402
from fdb.models.tts import PiperTts  # noqa: E402

QUESTIONS = (
    "What is the capital of France?",
    "How do airplanes stay in the air?",
    "Can you explain how a rainbow forms?",
    "Why is the sky blue?",
    "Tell me about the history of the Roman Empire.",
)
LEAD_S, TAIL_S = 0.25, 3.0
LAUNCH_YAML = "system: embedded-cascade\nmax_sessions: 4\nvad: {silence_duration_ms: 500}\n"


@dataclass
class TurnTiming:
    question: str
    stop_to_asr: float
    asr_to_audio: float
    end_to_audio: float
    reply: str


def spoken_questions() -> list[bytes]:
    """Each question as 16 kHz PCM16: lead silence, the words (deterministic Piper), tail."""
    tts = PiperTts(deterministic=True)
    out = []
    for text in QUESTIONS:
        words = resample(tts.synthesize(text), tts.rate, 16000)
        lead, tail = (
            np.zeros(int(LEAD_S * 16000), np.float32),
            np.zeros(int(TAIL_S * 16000), np.float32),
        )
        out.append(float_to_pcm16(np.concatenate([lead, words, tail])))
    return out


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(folder: Path) -> tuple[subprocess.Popen, str]:
    config = folder / "launch.yaml"
    config.write_text(LAUNCH_YAML, encoding="utf-8")
    port = _free_port()
    code = (
        f"from pathlib import Path; from serving.launcher import serve; "
        f"serve(port={port}, config=Path({str(config)!r}), log_level='warning')"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    log = open(folder / "server.log", "wb")  # noqa: SIM115 - the child writes it until it ends
    proc = subprocess.Popen(
        [sys.executable, "-c", code], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited:\n{(folder / 'server.log').read_text()}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return proc, f"ws://127.0.0.1:{port}/v1/realtime"
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise SystemExit("server not healthy after 120 s")


def _at(client: Client, type_: str) -> tuple[float, dict]:
    item = next(r for r in client.received if r.type == type_)
    return item.t, item.event


async def one_turn(url: str, question: str, pcm: bytes) -> TurnTiming:
    client = await Client.connect(url)
    try:
        await client.open_session()
        start = client.now()
        await client.send_audio(pcm)
        await client.until("response.output_audio.delta", 60)
        await client.send("sglang.input_audio.end")
        await client.until("response.done", 60)
    finally:
        await client.close()
    t_stop, stopped = _at(client, "input_audio_buffer.speech_stopped")
    t_asr, _ = _at(client, "conversation.item.input_audio_transcription.completed")
    t_audio, _ = _at(client, "response.output_audio.delta")
    done = _at(client, "response.done")[1]["response"]
    reply = done["output"][0]["content"][0].get("transcript", "") if done["output"] else ""
    end_wall = start + stopped["audio_end_ms"] / 1000
    return TurnTiming(question, t_asr - t_stop, t_audio - t_asr, t_audio - end_wall, reply)


async def run_all(url: str, pcms: list[bytes], args: argparse.Namespace) -> list[TurnTiming]:
    for k in range(args.warmup):
        await one_turn(url, QUESTIONS[k % len(QUESTIONS)], pcms[k % len(pcms)])
    gate = asyncio.Semaphore(args.concurrency)
    order = [k for _ in range(args.repeat) for k in range(len(pcms))]

    async def guarded(n: int, k: int) -> TurnTiming:
        await asyncio.sleep(n * args.stagger if args.concurrency > 1 else 0)
        async with gate:
            return await one_turn(url, QUESTIONS[k], pcms[k])

    return list(await asyncio.gather(*(guarded(n, k) for n, k in enumerate(order))))


def report(timings: list[TurnTiming]) -> None:
    print(f"{'question':<48} {'stop→asr':>9} {'asr→audio':>10} {'end→audio':>10}")
    for t in timings:
        print(
            f"{t.question:<48} {t.stop_to_asr:>8.2f}s {t.asr_to_audio:>9.2f}s "
            f"{t.end_to_audio:>9.2f}s"
        )
    for name, pick in (("mean", np.mean), ("max", np.max)):
        cols = [
            pick([getattr(t, f) for t in timings])
            for f in ("stop_to_asr", "asr_to_audio", "end_to_audio")
        ]
        print(f"{name:<48} {cols[0]:>8.2f}s {cols[1]:>9.2f}s {cols[2]:>9.2f}s")
    for t in {t.question: t for t in timings}.values():
        print(f"  reply to {t.question!r}: {t.reply!r}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", help="use this running server instead of starting one")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--stagger", type=float, default=1.0, help="seconds between session starts")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=0, help="unreported sessions first")
    args = parser.parse_args()
    pcms = spoken_questions()
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = (None, args.url) if args.url else start_server(Path(tmp))
        try:
            timings = asyncio.run(run_all(url, pcms, args))
        finally:
            if proc is not None:
                proc.send_signal(signal.SIGINT)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
    report(timings)


if __name__ == "__main__":
    main()
