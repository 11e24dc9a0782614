"""Silero VAD for many sessions: one module a session (the ``vad`` stage) against one batched
network (``silero_gpu``'s :class:`fdb.models.vad.SileroBatch`), the cost of scoring one 32 ms
frame of every session, in one process, the two interleaved run by run::

    python benchmarks/vad_batch.py [--streams 8,32,64] [--frames 50] [--runs 3] [--device cpu]

Each run scores ``--frames`` frames of noise for every stream both ways (one thread, as the
server pins torch) and prints the median ms per frame period; a frame period is 32 ms, so a
figure near 32 ms means one core is busy with VAD alone. ``--out`` writes every run as JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", default="8,32,64")
    parser.add_argument("--frames", type=int, default=50)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--device", default="cpu", help="the batched network's device")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)

    # lazy: torch and silero-vad are optional (the embedded extra); --help works without them
    import silero_vad
    import torch

    from fdb.models.vad import FRAME, SileroBatch

    torch.set_num_threads(1)
    report: dict = {"device": args.device, "frames": args.frames, "streams": {}}
    for count in [int(s) for s in args.streams.split(",")]:
        rng = np.random.default_rng(count)
        clips = [rng.normal(0, 0.05, FRAME * args.frames).astype(np.float32) for _ in range(count)]
        modules = [silero_vad.load_silero_vad(onnx=False) for _ in range(count)]
        batch = SileroBatch(args.device)
        runs: dict[str, list[float]] = {"one_module_a_stream_ms": [], "one_batched_call_ms": []}
        for _ in range(args.runs):
            streams = [batch.stream() for _ in clips]
            started = time.perf_counter()
            with torch.no_grad():
                for k in range(args.frames):
                    for module, clip in zip(modules, clips, strict=True):
                        module(torch.from_numpy(clip[k * FRAME : (k + 1) * FRAME]), 16000)
            runs["one_module_a_stream_ms"].append(
                (time.perf_counter() - started) * 1000 / args.frames
            )
            started = time.perf_counter()
            for k in range(args.frames):
                batch.score(
                    [
                        (s, c[k * FRAME : (k + 1) * FRAME])
                        for s, c in zip(streams, clips, strict=True)
                    ]
                )
            runs["one_batched_call_ms"].append((time.perf_counter() - started) * 1000 / args.frames)
        row = {k: [round(v, 2) for v in values] for k, values in runs.items()}
        row["median_ratio"] = round(
            statistics.median(runs["one_module_a_stream_ms"])
            / statistics.median(runs["one_batched_call_ms"]),
            1,
        )
        report["streams"][str(count)] = row
        print(f"{count} streams: {row}", flush=True)
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    return report


if __name__ == "__main__":
    main()
