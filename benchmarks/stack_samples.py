"""Where each thread of a server spent a stretch of time, from its ``FDB_STACK_SAMPLES`` file.

    python benchmarks/stack_samples.py FILE [--from T0] [--to T1] [--frames 4] [--top 5]

T0 / T1 are wall-clock seconds (the ``t`` of the samples, and the last field of the server's
``stage mark`` lines). For each thread seen in the stretch: how many samples it had and its
``--top`` most frequent stacks (the innermost ``--frames`` frames), each with its share of the
thread's samples; then the sampler's lateness (p50 / max ms): a late sample is a stretch in which
some thread held the GIL (serving/stack_samples.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from fractions import Fraction
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fdb.stats import ceil_quantile  # noqa: E402


def read(path: Path, start: float | None, end: float | None):
    """(t, thread, stack, late_ms) per sample within [start, end], a ``same`` line given the
    thread's last stack."""
    last: dict[str, list[str]] = {}
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = json.loads(raw)
        stack = last.get(line["thread"], []) if line.get("same") else line["stack"]
        last[line["thread"]] = stack
        if (start is None or line["t"] >= start) and (end is None or line["t"] <= end):
            yield line["t"], line["thread"], stack, line.get("late_ms", 0.0)


def summarize(samples, depth: int, top: int) -> dict:
    """Per thread: its sample count and its ``top`` stacks (cut to ``depth`` frames) with their
    shares; the sampler's lateness p50 / max."""
    by_thread: dict[str, Counter] = defaultdict(Counter)
    late: dict[float, float] = {}
    for t, thread, stack, late_ms in samples:
        by_thread[thread][" < ".join(stack[:depth])] += 1
        late[t] = late_ms
    threads = {}
    for thread, stacks in sorted(by_thread.items()):
        n = sum(stacks.values())
        threads[thread] = {
            "samples": n,
            "stacks": [(stack, round(k / n, 3)) for stack, k in stacks.most_common(top)],
        }
    values = sorted(late.values())
    return {
        "threads": threads,
        "late_ms": {
            "p50": ceil_quantile(values, Fraction(1, 2)) if values else None,
            "max": max(values) if values else None,
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("file", type=Path)
    parser.add_argument("--from", dest="start", type=float)
    parser.add_argument("--to", dest="end", type=float)
    parser.add_argument("--frames", type=int, default=4)
    parser.add_argument("--top", type=int, default=5)
    args = parser.parse_args()
    result = summarize(read(args.file, args.start, args.end), args.frames, args.top)
    for thread, info in result["threads"].items():
        print(f"{thread} ({info['samples']} samples)")
        for stack, share in info["stacks"]:
            print(f"  {share:6.1%}  {stack}")
    print(f"sampler late p50 / max: {result['late_ms']['p50']} / {result['late_ms']['max']} ms")


if __name__ == "__main__":
    main()
