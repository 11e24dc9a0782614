"""How often the default TTS gate cries wolf, and how small a regression it catches.

    python benchmarks/gate_power.py /tmp/tb/noise [/tmp/tb/base1 ...] [--sims 2000] [--rounds 3 5]

Reads recorded tts-bench outputs of ONE configuration (their tts.json `rounds`: every measured
round of every level; cold rounds left out) and pools the rounds of each level. Then, by
resampling those recorded rounds:

(a) false alarms: baseline and candidate each draw ``R`` rounds per level from the same pool
    (a shrunk smoothed bootstrap in log space: a recorded round pulled towards the pool's centre and
    jittered, keeping the pool's spread, so that draws are not exact copies); the default gate of
    reports/gate_config.py decides; a false alarm is any guard ``regressed`` (exit 1);
(b) power: the candidate's throughput multiplied by (1 - loss),
    or its TTFA p50 multiplied by (1 + increase); the smallest change that the gate flags
    (``throughput_audio_s_per_s`` resp. ``ttfa_p50_ms`` regressed at some level) in at least
    95% of the simulations, searched on a 1%-step grid.

Quality guards (per-utterance WER/SIM/MOS) are not simulated: they pair the same utterances.
Prints one table; every figure comes from this run (the seed is fixed: --seed).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fdb.records.tts import LevelRow, TtsReport  # noqa: E402
from reports.baseline_sources import TTS_LEVEL  # noqa: E402
from reports.gate import gate  # noqa: E402
from reports.gate_config import DEFAULTS  # noqa: E402
from reports.observations import Observations, Series  # noqa: E402

METRICS = [(m, label, unit, better) for m, label, unit, better in TTS_LEVEL]


def pooled_rounds(paths: list[Path]) -> dict[int, list[LevelRow]]:
    pools: dict[int, list[LevelRow]] = {}
    for path in paths:
        for row in TtsReport.load(path / "tts.json").measured_rows():
            pools.setdefault(row.concurrency, []).append(row)
    return pools


def spread(pool: list[LevelRow], metric: str) -> float:
    logs = [math.log(getattr(r, metric)) for r in pool if getattr(r, metric)]
    return float(np.std(logs, ddof=1)) if len(logs) > 1 else 0.0


BANDWIDTH = 0.5


def smoothed(value: float, centre: float, sd: float, rng) -> float:
    """A shrunk smoothed-bootstrap draw in log space: the recorded round pulled towards the
    pool's centre and jittered, so the draws keep the pool's spread (Efron & Tibshirani 1993)."""
    scale = 1.0 / math.sqrt(1.0 + BANDWIDTH**2)
    log = centre + (math.log(value) - centre) * scale + BANDWIDTH * sd * scale * float(rng.normal())
    return math.exp(log)


def centre(pool: list[LevelRow], metric: str) -> float:
    logs = [math.log(getattr(r, metric)) for r in pool if getattr(r, metric)]
    return float(np.mean(logs)) if logs else 0.0


def draw(pools, spreads, rounds: int, rng, loss: float = 0.0, ttfa: float = 0.0) -> Observations:
    obs = Observations(kind="tts", source="simulated")
    for level, pool in pools.items():
        for _ in range(rounds):
            row = pool[int(rng.integers(0, len(pool)))]
            for metric, label, unit, better in METRICS:
                value = getattr(row, metric)
                if value is not None and value > 0 and metric not in ("failed", "stop_violations"):
                    value = smoothed(value, *spreads[level][metric], rng)
                if value is not None and metric == "throughput_audio_s_per_s":
                    value *= 1.0 - loss
                if value is not None and metric == "ttfa_p50_ms":
                    value *= 1.0 + ttfa
                name = f"{metric}@c{level}"
                series = obs.series.get(name) or Series(
                    metric=metric,
                    key=f"c{level}",
                    label=label,
                    unit=unit,
                    better=better,
                    shape="unpaired",
                )
                series.values.append(value)
                obs.add(series)
    return obs


def flagged(result, metric: str | None) -> bool:
    if metric is None:
        return result.exit_code == 1
    return any(s.startswith(metric + "@") for s in result.regressed)


def rate(pools, spreads, rounds, sims, seed, metric=None, loss=0.0, ttfa=0.0) -> float:
    rng = np.random.default_rng(seed)
    config = DEFAULTS["tts"]
    hits = 0
    for _ in range(sims):
        base = draw(pools, spreads, rounds, rng)
        cand = draw(pools, spreads, rounds, rng, loss=loss, ttfa=ttfa)
        hits += flagged(gate(base, cand, config), metric)
    return hits / sims


def smallest(pools, spreads, rounds, sims, seed, metric, kind) -> float | None:
    for step in range(1, 61):
        change = step / 100
        args = {"loss": change} if kind == "loss" else {"ttfa": change}
        if rate(pools, spreads, rounds, sims, seed, metric=metric, **args) >= 0.95:
            return change
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "outputs", nargs="+", type=Path, help="tts-bench --output directories of one config"
    )
    parser.add_argument(
        "--sims", type=int, default=2000, help="simulated gate pairs for the false-alarm rate"
    )
    parser.add_argument(
        "--power-sims", type=int, default=400, help="simulations per grid point for power"
    )
    parser.add_argument("--rounds", type=int, nargs="+", default=[3, 5])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    pools = pooled_rounds(args.outputs)
    spreads = {
        level: {m: (centre(pool, m), spread(pool, m)) for m, *_ in METRICS}
        for level, pool in pools.items()
    }
    print(
        f"pooled rounds per level: {', '.join(f'C{k}: {len(v)}' for k, v in sorted(pools.items()))}"
    )
    for level in sorted(pools):
        print(
            f"  C{level} round-to-round spread (sd of log): throughput "
            f"{spreads[level]['throughput_audio_s_per_s'][1]:.3f}, "
            f"TTFA p50 {spreads[level]['ttfa_p50_ms'][1]:.3f}"
        )
    print(
        "| rounds | false alarms (any guard) | smallest throughput loss at 95% power | "
        "smallest TTFA p50 increase at 95% power |"
    )
    print("| --- | --- | --- | --- |")
    for rounds in args.rounds:
        alarms = rate(pools, spreads, rounds, args.sims, args.seed)
        loss = smallest(
            pools,
            spreads,
            rounds,
            args.power_sims,
            args.seed + 1,
            "throughput_audio_s_per_s",
            "loss",
        )
        ttfa = smallest(
            pools, spreads, rounds, args.power_sims, args.seed + 2, "ttfa_p50_ms", "ttfa"
        )
        show = lambda v: "> 60%" if v is None else f"{100 * v:.0f}%"  # noqa: E731
        print(
            f"| {rounds} | {100 * alarms:.2f}% ({round(alarms * args.sims)}/{args.sims}) | "
            f"{show(loss)} | {show(ttfa)} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
