"""How fast the judges get through a repeat against a slow endpoint.

Starts the tests' fake OpenAI-compatible judge (FastAPI/uvicorn on a loopback port) answering
every request after ``--delay`` seconds, builds a repeat of ``--pairs`` v1.5 pairs, and times
``judges.judge_repeat``:

- behavior labels only (an OpenAI-kind judge: one request per pair) at ``--concurrency``;
- the baseline: the same with concurrency 1 on ``--baseline-pairs`` pairs, scaled per pair;
- a self-hosted (config) judge: behavior labels plus semantic grades with the six controls.

    python benchmarks/judge_throughput.py [--pairs 48] [--concurrency 16] [--delay 1.0]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.support.fake_openai import FakeJudge  # noqa: E402
from benchmarks.support.trees import REFERENCE, Pair, Repeat, judge_config  # noqa: E402
from judges import JudgeSettings, judge_repeat  # noqa: E402

CATEGORIES = ("user_interruption", "user_backchannel", "talking_to_other", "background_speech")


def repeat_of(root: Path, pairs: int) -> Path:
    made = [Pair(CATEGORIES[i % 4], str(i // 4 + 1)) for i in range(pairs)]
    return Repeat(root, pairs=made).write()


def timed(repeat: Path, settings: JudgeSettings) -> tuple[float, dict]:
    start = time.perf_counter()
    summary = judge_repeat(repeat, settings)
    return time.perf_counter() - start, summary.statuses()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=48)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--delay", type=float, default=1.0)
    parser.add_argument("--baseline-pairs", type=int, default=4)
    args = parser.parse_args()
    os.environ.setdefault("OPENAI_API_KEY", "benchmark-placeholder-key")
    tmp = Path(tempfile.mkdtemp(prefix="judge-throughput-"))
    with FakeJudge(delay_s=args.delay) as fake:
        kw = {"reference_source": REFERENCE, "timeout_s": 30}
        fast = JudgeSettings.openai(
            "judge-model", fake.base_url, concurrency=args.concurrency, **kw
        )
        wall, statuses = timed(repeat_of(tmp / "a" / "repeat-1", args.pairs), fast)
        served = fake.max_in_flight
        serial = JudgeSettings.openai("judge-model", fake.base_url, concurrency=1, **kw)
        base, _ = timed(repeat_of(tmp / "b" / "repeat-1", args.baseline_pairs), serial)
        serial_estimate = base / args.baseline_pairs * args.pairs
        custom = JudgeSettings.custom(
            judge_config(tmp / "judge"), fake.base_url, concurrency=args.concurrency, **kw
        )
        full, full_statuses = timed(repeat_of(tmp / "c" / "repeat-1", args.pairs), custom)
    print(f"endpoint delay {args.delay:.2f} s per request, {args.pairs} pairs")
    print(
        f"behavior labels, concurrency {args.concurrency}: {wall:.2f} s wall "
        f"({statuses['behavior']}; max {served} requests in flight at the server)"
    )
    print(
        f"baseline, concurrency 1: {base:.2f} s for {args.baseline_pairs} pairs -> "
        f"{serial_estimate:.1f} s for {args.pairs} (x{serial_estimate / wall:.1f} slower)"
    )
    print(
        f"self-hosted judge, behavior + semantic with 6 controls ({2 * args.pairs + 6} requests), "
        f"concurrency {args.concurrency}: {full:.2f} s wall ({full_statuses})"
    )


if __name__ == "__main__":
    main()
