"""What opening a session's streaming VAD costs a server's other threads: a Silero module loaded
for each session (fdb before 2026-12-06) against a copy of one warmed module
(:func:`fdb.models.vad.stream_model`), the two interleaved run by run::

    python benchmarks/vad_open.py [--sessions 16] [--runs 3] [--out FILE]

Each run opens ``--sessions`` detectors one after another in a worker thread, each followed by
its first 80 ms packet (its first feed): once alone, timing each open and first feed (medians),
then again beside a Python thread that counts loop turns, for that thread's longest gap between
two turns: how long the opens held the GIL at a stretch (the interpreter's switch interval, 5 ms,
is the least a busy thread beside it waits). The timings are taken alone because a busy thread
beside them stretches every GIL hand-over to that interval.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

PACKET = 1280  # 80 ms at 16 kHz


def _count(stop: threading.Event, out: dict) -> None:
    turns, gap, last = 0, 0.0, time.perf_counter()
    while not stop.is_set():
        now = time.perf_counter()
        gap, last, turns = max(gap, now - last), now, turns + 1
    out.update(turns=turns, gap_s=gap)


def _run(way: str, sessions: int, packet: np.ndarray) -> dict:
    # lazy: torch and silero-vad are optional (the embedded extra); --help works without them
    import silero_vad

    # lazy: fdb is importable only after the module's sys.path line (as in vad_batch.py)
    from fdb.models import vad as vad_module

    opens, feeds = [], []

    def work() -> None:
        for _ in range(sessions):
            start = time.perf_counter()
            if way == "load":  # the old way: StreamingVad's own module, loaded
                detector = vad_module.StreamingVad(model=False)
                detector._model = silero_vad.load_silero_vad(onnx=False)
            else:
                detector = vad_module.StreamingVad()
            opens.append(time.perf_counter() - start)
            start = time.perf_counter()
            detector.feed(packet)
            feeds.append(time.perf_counter() - start)

    worker = threading.Thread(target=work)  # alone: the timings
    worker.start()
    worker.join()
    timed = {
        "open_ms_p50": round(statistics.median(opens) * 1000, 2),
        "first_feed_ms_p50": round(statistics.median(feeds) * 1000, 2),
    }
    stop, counted = threading.Event(), {}  # again, beside the counting thread
    counter = threading.Thread(target=_count, args=(stop, counted))
    counter.start()
    start = time.perf_counter()
    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
    took = time.perf_counter() - start
    stop.set()
    counter.join()
    return {
        "way": way,
        **timed,
        "seconds_beside": round(took, 3),
        "turns_per_s": counted["turns"] / took,
        "longest_gap_ms": round(counted["gap_s"] * 1000, 1),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=16)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)

    # lazy: --help works without torch (fdb.models.vad loads it at the first model)
    from fdb.models.vad import stream_model

    stream_model()  # the process's warmed module, as a server's warm-up makes it
    packet = (np.random.default_rng(0).standard_normal(PACKET) * 0.1).astype(np.float32)
    runs = []
    for run in range(args.runs):
        for way in ("load", "copy"):
            row = _run(way, args.sessions, packet)
            row["run"] = run + 1
            runs.append(row)
            print(
                f"run {run + 1} {way:4s}: open {row['open_ms_p50']:6.2f} ms, first feed "
                f"{row['first_feed_ms_p50']:6.2f} ms; beside them a thread's longest gap "
                f"{row['longest_gap_ms']:.1f} ms"
            )
    result = {"sessions": args.sessions, "runs": runs}
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return result


if __name__ == "__main__":
    main()
