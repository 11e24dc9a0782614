"""Time v1.5 scoring on a synthetic tree: 498 pairs (official category sizes), four 16 kHz
files each, ~15 s per file. ``--vad injected`` (default) uses the nonzero-burst segmenter of
the tests, ``--vad silero`` / ``silero-onnx`` the real model; ``--listening N`` separately
times listening quality on N Piper replies (real ASR, DNSMOS, resemblyzer).

    .venv/bin/python -m benchmarks.score_v15 [--pairs 498] [--vad injected|silero|silero-onnx]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a file too, not only with -m

from benchmarks.support.listening_build import OUT_RATE, write_session  # noqa: E402
from benchmarks.support.treebuild import FixedSegments  # noqa: E402
from fdb.audio import resample, wav_bytes  # noqa: E402
from fdb.io import atomic_write_bytes, atomic_write_json, sha256_file  # noqa: E402
from fdb.models.tts import PiperTts  # noqa: E402
from fdb.models.vad import SileroVad  # noqa: E402
from fdb.records import ExportManifest, ExportSample  # noqa: E402
from scorers.listening import score_listening  # noqa: E402
from scorers.v15_timing import score_v15_timing  # noqa: E402

SIZES = {
    "user_interruption": 200,
    "user_backchannel": 98,
    "talking_to_other": 100,
    "background_speech": 100,
}
RATE = 16000


def _speech(T: float, spans, rng) -> np.ndarray:
    audio = np.zeros(int(T * RATE), np.float32)
    for s, e in spans:
        n = int((e - s) * RATE)
        t = np.arange(n) / RATE
        audio[int(s * RATE) : int(s * RATE) + n] = (
            0.3 * np.sin(2 * np.pi * 180 * t) * (1 + 0.5 * rng.standard_normal(n)) * 0.5
        )
    return audio


def build(root: Path, pairs: int) -> None:
    rng = np.random.default_rng(0)
    samples, k = [], 0
    scale = pairs / sum(SIZES.values())
    for cat, n in SIZES.items():
        for i in range(1, max(1, round(n * scale)) + 1):
            folder = root / cat / str(i)
            folder.mkdir(parents=True, exist_ok=True)
            T, ov = 15.0, (7.0 + rng.uniform(0, 1), 8.5 + rng.uniform(0, 1))
            files = {
                "input.wav": [(0.5, 3.0), ov],
                "output.wav": [(3.6, 8.0), (9.8, 13.0)],
                "clean_input.wav": [(0.5, 3.0)],
                "clean_output.wav": [(3.6, 9.0)],
            }
            hashes = {}
            for name, spans in files.items():
                atomic_write_bytes(folder / name, wav_bytes(_speech(T, spans, rng), RATE))
                hashes[name] = sha256_file(folder / name)
            atomic_write_json(
                folder / "metadata.json",
                {"context_text": "", "current_turn_text": "", "timestamps": list(ov)},
            )
            samples.append(
                ExportSample(
                    sample_id=f"{cat}/{i}", subset=cat, id=str(i), eligible=True, files=hashes
                )
            )
            k += 1
    atomic_write_json(
        root / "reference-manifest.json", ExportManifest(dataset="v1.5", samples=samples).dump()
    )


def _vad(name: str):
    if name == "injected":
        return FixedSegments()
    return SileroVad(onnx=name == "silero-onnx")


def time_timing(pairs: int, vad_name: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "reference-audio"
        t0 = time.perf_counter()
        build(root, pairs)
        t1 = time.perf_counter()
        summary = score_v15_timing(root, _vad(vad_name), out=Path(tmp) / "scores")
        t2 = time.perf_counter()
        n = summary.categories["all"].pairs
        print(
            f"timing: {n} pairs, {4 * n} files, vad={vad_name}: build {t1 - t0:.1f} s, "
            f"score {t2 - t1:.1f} s"
        )
        a = summary.categories["all"]
        print(
            f"  official stop mean {a.stop_latency.mean_s}, "
            f"anchored stop mean {a.anchored_stop_latency.mean_s}"
        )
        shutil.rmtree(root, ignore_errors=True)


def time_listening(replies: int) -> None:
    tts = PiperTts(deterministic=True)
    text = "The library opens at nine in the morning and closes at six, except on Sundays."
    audio = resample(tts.synthesize(text), tts.rate, OUT_RATE)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "repeat-1"
        for i in range(replies):
            write_session(
                root / "recording/shard-0/user_interruption" / str(i + 1) / "overlap",
                [{"id": "r", "audio": audio, "t": 1.0, "transcript": text}],
            )
        t0 = time.perf_counter()
        score_listening(root)
        dt = time.perf_counter() - t0
        print(
            f"listening: {replies} replies of {len(audio) / OUT_RATE:.1f} s: "
            f"{dt:.1f} s ({dt / replies:.2f} s/reply)"
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=498)
    ap.add_argument("--vad", default="injected", choices=["injected", "silero", "silero-onnx"])
    ap.add_argument("--listening", type=int, default=0)
    args = ap.parse_args()
    if args.pairs:
        time_timing(args.pairs, args.vad)
    if args.listening:
        time_listening(args.listening)


if __name__ == "__main__":
    main()
