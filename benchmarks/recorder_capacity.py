"""Recorder capacity: how many concurrent paced sessions one recorder process drives.

Starts the loopback echo sink of ``benchmarks/recorder_pacing.py`` (turn-based session protocol:
receipts, units, and every append echoed back as reply audio) in a separate process, then runs
a ladder of concurrencies through ``recorders.batch.record_many`` in this process. A step
passes when every session is ok with a passing verdict, no packet starts more than 80 ms off
its schedule, and the p99 packet lateness is at most 2 ms. For each step it prints the
violations, lateness (p99 overall, and separately over each session's first 20 packets, its
last 6 and the steady middle), the recorder's event-loop lag, its CPU and the sink's (both share
the machine's cores), and the peak RSS growth per session (traces, input and received audio
included). Goals: 512 sessions; under 2 MiB RSS per session. The recorder runs as ``generate``
runs it: on ``recorders.eventloop`` (uvloop; FDB_EVENT_LOOP=asyncio for the stock loop).

The machine's own timer floor is measured beside every step: a bare process that only sleeps to
absolute 2 ms deadlines (``time.sleep``, no event loop, no I/O) and records how late it woke.
Its p99 ("floor") is the lateness no recorder on this machine can go below at that moment; on a
shared VM it can itself exceed the 2 ms goal (docs/benchmarks.md#recorder-floor). Read a step's
p99 against it. Such a VM also freezes now and then: processes stop for tens of milliseconds at
once, the recorder's packets all go late together and the step fails. Beside the step, one
more such process is pinned to each CPU (a VM can lose one virtual CPU and not the other). A
step that fails while one of them woke more than STALL_MS late (the machine stalled) is run
again, up to ``--reruns`` times; every attempt is printed, the stalled ones marked
"machine stalled".

    python benchmarks/recorder_capacity.py --ladder 64,128,256,512 --seconds 10
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import queue
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.recorder_pacing import TD, _serve  # noqa: E402
from fdb.audio import Audio  # noqa: E402
from fdb.session_records import read_trace  # noqa: E402
from recorders.batch import SessionJob, record_many  # noqa: E402
from recorders.eventloop import run as run_loop  # noqa: E402
from recorders.pacing import sends_from_trace  # noqa: E402

P99_GOAL_MS = 2.0
# A bare process that sleeps 2 ms at a time and wakes this late was not run by the machine: the
# threshold lies between the probe's lateness in steps that passed and in steps where every
# session's packets went late together (measured: docs/benchmarks.md#recorder-floor).
STALL_MS = 20.0
# Where the lateness sits: a session's first EDGE_START packets (others are still connecting and
# preparing), its last EDGE_END (others are being judged and written), and the steady middle.
EDGE_START, EDGE_END = 20, 6
MIB = 1024 * 1024


def rss_bytes() -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


class PeakRss:
    """Polls this process's RSS every 50 ms in a thread; ``peak`` is the largest seen."""

    def __init__(self) -> None:
        self.peak, self._stop = rss_bytes(), threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, rss_bytes())

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (the sink's share of the 2 cores)."""
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


FLOOR_PERIOD_S = 0.002


def _floor_probe(stop, results: mp.Queue, cpu: int | None) -> None:
    """Sleep to absolute FLOOR_PERIOD_S deadlines (on ``cpu`` if given) until ``stop`` is set;
    put (cpu, (p99, max)) in ms."""
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    late: list[float] = []
    t0, k = time.monotonic(), 0
    while not stop.is_set():
        k += 1
        due = t0 + k * FLOOR_PERIOD_S
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        late.append((time.monotonic() - due) * 1000.0)
    values = np.array(late or [float("nan")])
    results.put((cpu, (float(np.percentile(values, 99)), float(values.max()))))


class TimerFloor:
    """Runs ``_floor_probe`` in its own process while the ``with`` block runs, and one more
    pinned to each CPU. ``p99_ms`` is the unpinned probe's (the scheduler puts it where it can,
    as it does the recorder); ``max_ms`` is the worst wake-up of them all: a VM can lose one
    virtual CPU for a while and not the other, and a single probe saw only the stalls of the
    CPU it happened to be on."""

    def __enter__(self) -> TimerFloor:
        cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        self._stop, self._results = mp.Event(), mp.Queue()
        self._procs = [
            mp.Process(target=_floor_probe, args=(self._stop, self._results, cpu), daemon=True)
            for cpu in [None, *cpus]
        ]
        for proc in self._procs:
            proc.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        found: dict[int | None, tuple[float, float]] = {}
        for _ in self._procs:  # a probe that died (or could not pin itself) reports nothing
            try:
                cpu, result = self._results.get(timeout=10)
            except queue.Empty:
                break
            found[cpu] = result
        nan = float("nan")
        self.p99_ms = found.get(None, (nan, nan))[0]
        self.max_ms = max((worst for _, worst in found.values()), default=nan)
        for proc in self._procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()


def idle_floor(seconds: float = 3.0) -> tuple[float, float]:
    with TimerFloor() as floor:
        time.sleep(seconds)
    return floor.p99_ms, floor.max_ms


def step(url: str, sessions: int, seconds: float, out: Path, sink_pid: int) -> dict:
    t = np.arange(int(seconds * 16000)) / 16000
    audio = Audio((0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), 16000)
    jobs = [
        SessionJob(
            url,
            audio,
            out / f"s{k:04d}",
            f"bench/{k}",
            "main",
            "turn-based",
            TD,
            timeout_s=seconds + 60,
        )
        for k in range(sessions)
    ]
    before = rss_bytes()
    cpu, wall, sink = time.process_time(), time.perf_counter(), cpu_seconds(sink_pid)
    with PeakRss() as rss, TimerFloor() as floor:
        records = run_loop(record_many(jobs, concurrency=sessions))
    cpu, wall, sink = (
        time.process_time() - cpu,
        time.perf_counter() - wall,
        cpu_seconds(sink_pid) - sink,
    )
    sends = [s for job in jobs for s in sends_from_trace(read_trace(job.out_dir / "trace.jsonl"))]
    lateness = np.array([s.lateness_s * 1000 for s in sends])
    last = max((s.seq for s in sends), default=0)
    phase = np.array(
        [
            "start" if s.seq < EDGE_START else "end" if s.seq > last - EDGE_END else "steady"
            for s in sends
        ]
    )
    lag = [r.loop_lag.max_ms for r in records if r.loop_lag.max_ms is not None]
    row = {
        "sessions": sessions,
        "ok": sum(r.status == "ok" and r.verdict.status == "pass" for r in records),
        "violations": sum(r.pacing.violations for r in records),
        "client_behind": sum(r.loop_lag.client_behind for r in records),
        "p99_ms": float(np.percentile(lateness, 99)) if lateness.size else float("nan"),
        "max_ms": float(lateness.max()) if lateness.size else float("nan"),
        "loop_lag_max_ms": max(lag) if lag else float("nan"),
        **{
            f"p99_{name}_ms": float(np.percentile(lateness[phase == name], 99))
            if (phase == name).any()
            else float("nan")
            for name in ("start", "steady", "end")
        },
        "cpu_share": cpu / wall,
        "sink_cpu_share": sink / wall,
        "rss_per_session_mib": (rss.peak - before) / sessions / MIB,
        "wall_s": wall,
        "floor_p99_ms": floor.p99_ms,
        "floor_max_ms": floor.max_ms,
    }
    row["passes"] = (
        row["ok"] == sessions and row["violations"] == 0 and row["p99_ms"] <= P99_GOAL_MS
    )
    row["failed_in_stall"] = (
        not row["passes"] and row["floor_max_ms"] > STALL_MS
    )  # the machine stalled
    return row


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ladder", default="64,128,256,512", help="comma-separated concurrencies")
    parser.add_argument("--seconds", type=float, default=10.0, help="input length per session")
    parser.add_argument(
        "--keep-going", action="store_true", help="run every step even after one fails"
    )
    parser.add_argument(
        "--reruns",
        type=int,
        default=1,
        help="times a step that failed while the machine itself stalled is run again (default 1)",
    )
    args = parser.parse_args()
    if args.reruns < 0:
        parser.error("--reruns must be 0 or more")
    ports: mp.Queue = mp.Queue()
    server = mp.Process(target=_serve, args=(ports,), daemon=True)
    server.start()
    url = f"ws://127.0.0.1:{ports.get(timeout=30)}/v1/realtime"
    rows = []
    p99, worst = idle_floor()
    print(
        f"timer floor of this machine at rest (bare processes, 2 ms deadlines): p99 {p99:.2f} ms, "
        f"max {worst:.2f} ms",
        flush=True,
    )
    header = (
        f"{'sessions':>8} {'ok':>5} {'late>80':>7} {'behind':>6} {'p99 ms':>7} {'start':>6} "
        f"{'steady':>6} {'end':>6} {'max ms':>8} {'lag max':>8} {'floor':>6} {'fl max':>6} "
        f"{'CPU':>5} {'sink':>5} {'MiB/sess':>8} {'wall s':>7} pass"
    )
    print(header, flush=True)
    try:
        for n in (int(x) for x in args.ladder.split(",")):
            for _attempt in range(args.reruns + 1):
                with tempfile.TemporaryDirectory() as tmp:
                    r = step(url, n, args.seconds, Path(tmp), server.pid)
                rows.append(r)
                mark = (
                    f" (machine stalled: floor max {r['floor_max_ms']:.0f} ms)"
                    if r["failed_in_stall"]
                    else ""
                )
                print(
                    f"{r['sessions']:>8} {r['ok']:>5} {r['violations']:>7} {r['client_behind']:>6} "
                    f"{r['p99_ms']:>7.2f} {r['p99_start_ms']:>6.1f} {r['p99_steady_ms']:>6.1f} "
                    f"{r['p99_end_ms']:>6.1f} {r['max_ms']:>8.2f} {r['loop_lag_max_ms']:>8.2f} "
                    f"{r['floor_p99_ms']:>6.2f} {r['floor_max_ms']:>6.1f} {r['cpu_share']:>5.2f} "
                    f"{r['sink_cpu_share']:>5.2f} {r['rss_per_session_mib']:>8.3f} "
                    f"{r['wall_s']:>7.1f} {'yes' if r['passes'] else 'NO'}{mark}",
                    flush=True,
                )
                if not r["failed_in_stall"]:
                    break
            if not r["passes"] and not args.keep_going:
                break
    finally:
        server.terminate()
        server.join()
    best = max((r["sessions"] for r in rows if r["passes"]), default=0)
    stalls = sum(r["failed_in_stall"] for r in rows)
    if stalls:
        print(
            f"{stalls} attempt(s) failed while the machine itself stalled "
            "(bare processes beside the step)"
        )
    print(
        f"capacity: {best} concurrent paced sessions with zero violations and p99 <= "
        f"{P99_GOAL_MS:g} ms (goal 512); RSS per session at the largest step: "
        f"{rows[-1]['rss_per_session_mib']:.3f} MiB (goal < 2)"
    )


if __name__ == "__main__":
    main()
