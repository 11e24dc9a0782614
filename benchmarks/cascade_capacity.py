"""Cascade capacity: how many concurrent embedded-cascade sessions this machine sustains.

Runs the serving sweep of ``python -m fdb sweep`` (``runs.sweep.sweep``: the same cohort recorded
at each level, each level in a fresh client process, one serving row per level, serving.json,
SERVING.md and serving.png under OUTPUT/sweep) against the bundled embedded cascade, which this
script starts itself (max_sessions = the top level) so that it can sample the server's memory.
It prints one table, one row per level:

- sessions, failed, 503, pacing violations, client-limited, client CPU: the sweep's columns
  (client-limited: the load generator, not the server, broke the pacing);
- RTF p90 and "meets": the reply RTF p90, and whether the level has no failed session, no 503,
  no pacing violation and RTF p90 < 1. The capacity line is the sweep's: the highest level below
  the first that misses ("at least N" when every level meets them);
- first audio after speech end, p50 / p90 (ms). The speech end is the dataset's annotation: the
  turn end E of each v1.0 ``candor_turn_taking`` sample (``turn_taking.json`` ``timestamp[0]``),
  placed on the client clock at the moment the client finished sending the 80 ms packet holding
  E. The latency runs from there to the receipt of the first audio of the first response created
  after it (a reply created before E answers an earlier pause and is not counted). A session with
  no such reply is counted under "no reply", never as 0;
- server RSS peak (MiB): resident memory of the server process and its children (``/proc``
  VmRSS), sampled every 0.25 s while the level records; the idle figure (models loaded, no
  session) is printed below the table.

Models are loaded once per server process (``serving/hub.py`` ``ModelHub``: one ASR, LLM and
TTS shared by every session, a VAD state per session); the script counts the model loads in the
server log to show it. The cohort is ``--dataset-root`` (a v1.0 tree), or by default a synthetic
v1.0 tree written to OUTPUT/dataset with ``--sessions`` candor_turn_taking samples (a
Piper-spoken question and 5 s of silence, about 8 s each): every level records all of them.

    python benchmarks/cascade_capacity.py --levels 1,2,4,8 --sessions 8 [--output DIR]
        [--turn-detection '{"type": "semantic_vad", "eagerness": "high"}']
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import socket
import sys
import tempfile
import threading
from fractions import Fraction
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fdb.audio import read_wav, write_wav  # noqa: E402
from fdb.datasets.official import load_v10, sample_dirs  # noqa: E402
from fdb.datasets.pinning import write_revision  # noqa: E402
from fdb.datasets.synthetic import SynthSizes, generate_synthetic, synthetic_complete  # noqa: E402
from fdb.dialects import get_dialect  # noqa: E402
from fdb.io import atomic_write_json  # noqa: E402
from fdb.records.serving import ServingRow  # noqa: E402
from fdb.stats import quantile_ms  # noqa: E402
from runs.sweep import SweepOptions, bundled_server, level_dir, parse_levels, sweep  # noqa: E402
from runs.sweep_args import parse_record_options  # noqa: E402
from scorers.serving import load_level, speech_end_first_audio_s  # noqa: E402

SUBSET = "candor_turn_taking"
MIB = 1024 * 1024


def tree_rss(pid: int) -> int | None:
    """Resident bytes of ``pid`` and its descendants, from /proc; None once it is gone."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            parents[int(stat.parent.name)] = int(fields[1])
        except (OSError, IndexError, ValueError):
            continue
    family, frontier = {pid}, [pid]
    while frontier:
        parent = frontier.pop()
        children = [
            child for child, ppid in parents.items() if ppid == parent and child not in family
        ]
        family.update(children)
        frontier += children
    total = None
    for member in sorted(family):
        try:
            text = Path(f"/proc/{member}/status").read_text()
        except OSError:
            continue
        found = re.search(r"^VmRSS:\s+(\d+) kB", text, re.MULTILINE)
        total = (total or 0) + (int(found.group(1)) * 1024 if found else 0)
    return total


class RssSampler(threading.Thread):
    """Samples the server's RSS every ``interval`` s; keeps the peak of each level."""

    def __init__(self, pid: int, interval: float = 0.25):
        super().__init__(daemon=True)
        self.pid, self.interval, self.stop = pid, interval, threading.Event()
        self.idle = tree_rss(pid)
        self.current: int | None = None
        self.peaks: dict[int, int] = {}

    def run(self) -> None:
        while not self.stop.wait(self.interval):
            level, rss = self.current, tree_rss(self.pid)
            if level is not None and rss is not None:
                self.peaks[level] = max(self.peaks.get(level, 0), rss)

    @contextlib.contextmanager
    def level(self, n: int):
        self.current = n
        try:
            yield
        finally:
            self.current = None


def synthetic_tree(folder: Path, sessions: int) -> Path:
    """A synthetic dataset with ``sessions`` candor_turn_taking samples; returns its v1.0 tree."""
    if not synthetic_complete(folder):
        sizes = SynthSizes.build(0, 0, 0, counts=[f"{SUBSET}={sessions}"])
        generate_synthetic(folder, sizes=sizes)
    return folder / "v1.0"


STAGGER_GRID_S = 0.016  # a lead added by staggered_tree is a multiple of this (Silero's 16 ms)


def staggered_tree(root: Path, dest: Path, spread_s: float, count: int | None = None) -> Path:
    """A copy of v1.0 tree ``root``'s first ``count`` (None: all) candor_turn_taking samples
    under ``dest`` whose sessions start at spread phases: sample j of N (in sample-id order)
    gets ``spread_s * j / N`` seconds of silence before its audio (rounded to
    ``STAGGER_GRID_S``), every timestamp of its ``turn_taking.json`` and ``transcription.json``
    moved by as much. Recorded at once, the
    sessions' turns then end spread over ``spread_s`` more than the synthetic cohort's (whose
    questions all start 0.512 s in), as sessions of independent users would, not in one burst.
    Returns ``dest``'s v1.0 tree, pinned with its own revision (``fdb-stagger-...``)."""
    source = root / SUBSET
    tree = dest / "v1.0"
    names = [d.name for d in sample_dirs(source)][:count]
    for j, name in enumerate(names):
        lead = round(spread_s * j / len(names) / STAGGER_GRID_S) * STAGGER_GRID_S
        sample = tree / SUBSET / name
        sample.mkdir(parents=True, exist_ok=True)
        audio = read_wav(source / name / "input.wav", name)
        pad = np.zeros(round(lead * audio.rate), dtype=np.float32)
        write_wav(sample / "input.wav", np.concatenate([pad, audio.samples]), audio.rate)
        for file in ("turn_taking.json", "transcription.json"):
            if (source / name / file).is_file():
                data = json.loads((source / name / file).read_text(encoding="utf-8"))
                atomic_write_json(sample / file, _moved(data, lead))
    write_revision(tree, dest / "v1.0.revision", prefix=f"fdb-stagger-{spread_s:g}s-")
    return tree


def _moved(data, lead: float):
    """A dataset annotation with every ``timestamp`` pair moved ``lead`` seconds later."""
    if isinstance(data, list):
        return [_moved(item, lead) for item in data]
    if isinstance(data, dict):
        return {
            key: [round(t + lead, 6) for t in value] if key == "timestamp" else _moved(value, lead)
            for key, value in data.items()
        }
    return data


def speech_end_latencies(directory: Path, turn_end: dict[str, float]) -> tuple[list[float], int]:
    """First audio after the annotated speech end (s) of each session of a level, and how many
    sessions had no reply after it."""
    found, missing = [], 0
    for session in load_level(directory):
        end = turn_end.get(session.record.sample_id)
        if end is None:
            continue
        value = speech_end_first_audio_s(
            session.trace, get_dialect(session.record.profile), session.record.output_rate, end
        )
        if value is None:
            missing += 1
        else:
            found.append(value)
    return found, missing


def model_loads(log: Path) -> int:
    """How often the server loaded its reply LLM (one line per load in its log)."""
    return log.read_text(errors="replace").count("loaded SmolLM2") if log.is_file() else 0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def table(
    rows: list[ServingRow], latencies: dict[int, tuple[list[float], int]], peaks: dict[int, int]
):
    out = Table(
        "sessions at once",
        "sessions",
        "failed",
        "503",
        "pacing violations",
        "client-limited",
        "client CPU",
        "RTF p90",
        "meets",
        "first audio after speech end p50 / p90 ms",
        "no reply",
        "server RSS peak MiB",
        title="Embedded cascade capacity",
    )
    for row in rows:
        values, missing = latencies[row.concurrency]
        p50, p90 = quantile_ms(values, Fraction(1, 2)), quantile_ms(values, Fraction(9, 10))
        first = "-" if p50 is None else f"{p50:.0f} / {p90:.0f} (n={len(values)})"
        peak = peaks.get(row.concurrency)
        out.add_row(
            str(row.concurrency),
            str(row.sessions),
            str(row.sessions_failed),
            str(row.admission_denied),
            str(row.pacing_violations),
            "yes" if row.client_limited else "no",
            "-" if row.client_cpu is None else f"{row.client_cpu * 100:.0f}%",
            "-" if row.rtf_p90 is None else f"{row.rtf_p90:.2f}",
            "yes" if row.meets_targets else "no: " + "; ".join(row.missed_targets),
            first,
            str(missing),
            "-" if peak is None else f"{peak / MIB:.0f}",
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--levels", default="1,2,4,8", help="rising concurrency levels")
    parser.add_argument(
        "--sessions", type=int, default=8, help="candor_turn_taking samples in the cohort"
    )
    parser.add_argument("--repeats", type=int, default=1, help="recordings per level")
    parser.add_argument(
        "--dataset-root", type=Path, help="a v1.0 tree (default: a synthetic one under OUTPUT)"
    )
    parser.add_argument(
        "--output", type=Path, help="working directory (default: a new temporary one)"
    )
    parser.add_argument(
        "--turn-detection",
        help="the sessions' turn detection as JSON, e.g. "
        '\'{"type": "semantic_vad", "eagerness": "high"}\' (default: the sweep\'s server_vad)',
    )
    args = parser.parse_args()
    console = Console(width=max(160, Console().width))
    output = args.output or Path(tempfile.mkdtemp(prefix="cascade-capacity-"))
    os.environ.setdefault("SERVER_PORT", str(_free_port()))
    root = args.dataset_root or synthetic_tree(output / "dataset", args.sessions)
    record = parse_record_options(
        [
            "--dataset-root",
            str(root),
            "--per-subset",
            "0",
            "--subset-count",
            f"{SUBSET}={args.sessions}",
            *(["--turn-detection", args.turn_detection] if args.turn_detection else []),
        ]
    )
    opts = SweepOptions(
        output=output / "sweep",
        concurrency=parse_levels(args.levels),
        dataset="v1.0",
        record=record,
        repeats=args.repeats,
    )
    loaded, _ = load_v10(root, [SUBSET], strict=False)
    turn_end = {
        s.sample_id: s.turn_end_s for s in loaded.get(SUBSET, []) if s.turn_end_s is not None
    }
    server = bundled_server(opts)
    server.start()
    sampler = RssSampler(server.proc.pid)
    sampler.start()
    try:
        opts.record = record.model_copy(update={"url": server.ws_url})
        data = sweep(opts, Console(stderr=True), around_level=sampler.level)
    finally:
        sampler.stop.set()
        server.stop()
    rows = [ServingRow.model_validate(row) for row in data["rows"]]
    latencies = {
        row.concurrency: speech_end_latencies(level_dir(opts.output, row.concurrency), turn_end)
        for row in rows
    }
    console.print(table(rows, latencies, sampler.peaks))
    console.print(
        data["capacity"]["line"] + " (targets: no failed session, no 503, no pacing violation, "
        "reply RTF p90 < 1)"
    )
    idle = "-" if sampler.idle is None else f"{sampler.idle / MIB:.0f} MiB"
    console.print(
        f"Server RSS at idle after loading the models: {idle}. Models are loaded once per server "
        f"process (ModelHub; {model_loads(server.log_path)} LLM load(s) in its log for "
        f"{sum(r.sessions for r in rows)} sessions); sessions add only their own state."
    )
    console.print(
        f"Speech end: the {SUBSET} turn_taking.json annotation E, from the send end of the packet "
        f"holding it. {os.cpu_count()} CPUs; client and server share them. Output: {opts.output}"
    )


if __name__ == "__main__":
    main()
