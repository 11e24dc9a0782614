"""Where a first reply's time goes inside the server: the stage marks of a server run with
``FDB_STAGE_MARKS=1`` (``serving.graph.runtime``: the first chunk of each node and kind in each
session graph, with its wall time), read from the server's log::

    FDB_STAGE_MARKS=1 python -m fdb serve ... > server.log 2>&1
    python benchmarks/server_stages.py server.log [--after turn_detection:speech.stopped]
        [--per 32] [--out stages.json]

For every session graph with the ``--after`` mark (default: the turn detection's first
speech.stopped, the end of the first turn), each other mark of that graph that comes after it is
taken as seconds after it; per mark (``node:kind``, e.g. ``asr:transcript``,
``llm:text_delta``, ``tts:reply.chunk``, ``tts:pcm_f32le``) the script prints how many graphs
had it and p50 / p90 / max, in the order of their p50. A mark before the ``--after`` mark (a
prefetch's transcript that came before the turn ended) is negative. ``--per N``: the graphs in
the order the server made them, in groups of N, each reported on its own (a sweep's levels, each
of N sessions, run one after another against one server).

CSM's first-frame lines (``csm first frame``, logged under the same variable by
``serving.gpu.csm``) are summed over the whole log: per request, the wait for a slot, the time
from its prefill to its first frame, and the two together (request → first frame), in ms.
So are the batchers' lines (``serving.batching.Batcher`` with ``stage_marks``: the recognizer's
``whisper_gpu batch``): per batcher, its batches' rows, the wait of each batch's oldest and
newest request (from its submit to its batch's start) and the run time, and the batches per lane.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

from fdb.stats import P50, P90, ceil_quantile

MARK = re.compile(r"stage mark (\d+) (\S+) (\S+) ([0-9.]+)")
BATCH = re.compile(
    r"(\S+) batch [0-9.]+: (\d+) rows, lane (\d+), waited ([0-9.]+) ms oldest, "
    r"([0-9.]+) ms newest, ran ([0-9.]+) ms"
)
CSM_FIRST = re.compile(
    r"csm first frame [0-9.]+: waited ([0-9.]+) ms for a slot, ([0-9.]+) ms from its prefill"
)


def read_marks(log: Path) -> dict[str, dict[str, float]]:
    """graph id -> {"node:kind": wall time} of a server log."""
    graphs: dict[str, dict[str, float]] = defaultdict(dict)
    with log.open(encoding="utf-8", errors="replace") as lines:
        for line in lines:
            found = MARK.search(line)
            if found:
                graph, node, kind, t = found.groups()
                graphs[graph].setdefault(f"{node}:{kind}", float(t))
    return dict(graphs)


def groups(graphs: dict[str, dict[str, float]], per: int) -> list[dict[str, dict[str, float]]]:
    """The graphs in serial order, in consecutive groups of ``per``."""
    ordered = sorted(graphs, key=int)
    return [{g: graphs[g] for g in ordered[i : i + per]} for i in range(0, len(ordered), per)]


def csm_first_frames(log: Path) -> dict[str, dict] | None:
    """CSM's first-frame lines of a server log: for ``waited`` (for a slot), ``prefill`` (from
    the prefill to the first frame) and ``total`` (the two), the requests and p50 / p90 / max
    ms (nearest-rank quantiles); None without such a line."""
    waited, prefill = [], []
    with log.open(encoding="utf-8", errors="replace") as lines:
        for line in lines:
            found = CSM_FIRST.search(line)
            if found:
                waited.append(float(found.group(1)))
                prefill.append(float(found.group(2)))
    if not waited:
        return None
    total = [a + b for a, b in zip(waited, prefill, strict=True)]
    return {
        name: _spread(values, 1, "requests")
        for name, values in (("waited", waited), ("prefill", prefill), ("total", total))
    }


def _spread(values: list[float], digits: int = 1, count: str = "n") -> dict:
    """``count``: how many, then p50 / p90 (nearest rank) and max of ``values``, rounded to
    ``digits``."""
    return {
        count: len(values),
        "p50": round(ceil_quantile(values, P50), digits),
        "p90": round(ceil_quantile(values, P90), digits),
        "max": round(max(values), digits),
    }


def batches(log: Path) -> dict[str, dict] | None:
    """The batchers' lines of a server log, per batcher name: ``rows``, ``waited_oldest``,
    ``waited_newest`` and ``ran`` (ms) with their count, p50 / p90 / max, and ``lanes`` (lane ->
    batches); None without such a line."""
    found: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    with log.open(encoding="utf-8", errors="replace") as lines:
        for line in lines:
            m = BATCH.search(line)
            if m:
                name, rows, lane, oldest, newest, ran = m.groups()
                values = found[name]
                values["rows"].append(int(rows))
                values["lane"].append(int(lane))
                values["waited_oldest"].append(float(oldest))
                values["waited_newest"].append(float(newest))
                values["ran"].append(float(ran))
    if not found:
        return None
    return {
        name: {
            "rows": _spread(values["rows"], 0),
            "waited_oldest": _spread(values["waited_oldest"]),
            "waited_newest": _spread(values["waited_newest"]),
            "ran": _spread(values["ran"]),
            "lanes": {str(k): values["lane"].count(k) for k in sorted(set(values["lane"]))},
        }
        for name, values in sorted(found.items())
    }


def stages(graphs: dict[str, dict[str, float]], after: str) -> dict[str, dict]:
    """Per mark: graphs, p50, p90 and max seconds after ``after`` (nearest-rank quantiles)."""
    delays: dict[str, list[float]] = defaultdict(list)
    for marks in graphs.values():
        start = marks.get(after)
        if start is None:
            continue
        for name, t in marks.items():
            if name != after:
                delays[name].append(t - start)
    table = {name: _spread(values, 3, "graphs") for name, values in delays.items()}
    return dict(sorted(table.items(), key=lambda item: item[1]["p50"]))


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("log", type=Path, help="the server's log (FDB_STAGE_MARKS=1)")
    parser.add_argument("--after", default="turn_detection:speech.stopped")
    parser.add_argument("--per", type=int, help="report the graphs in groups of this many")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    graphs = read_marks(args.log)
    tables = []
    for group in groups(graphs, args.per or max(1, len(graphs))):
        table = stages(group, args.after)
        first, last = min(group, key=int), max(group, key=int)
        print(f"graphs {first}-{last}: seconds after {args.after} (p50 / p90 / max, graphs)")
        for name, row in table.items():
            p50, p90, top = row["p50"], row["p90"], row["max"]
            print(f"  {name:<34} {p50:>7} / {p90:>7} / {top:>7}  ({row['graphs']})")
        tables.append({"graphs": f"{first}-{last}", "marks": table})
    if not any(t["marks"] for t in tables):
        print(f"no graph in {args.log} has the mark {args.after}", file=sys.stderr)
    csm = csm_first_frames(args.log)
    if csm is not None:
        print(
            f"CSM request → first frame, ms (p50 / p90 / max, {csm['total']['requests']} requests)"
        )
        for name, row in csm.items():
            print(f"  {name:<34} {row['p50']:>7} / {row['p90']:>7} / {row['max']:>7}")
    batched = batches(args.log)
    for name, row in (batched or {}).items():
        print(
            f"{name} batches, ms (p50 / p90 / max, {row['ran']['n']} batches, lanes {row['lanes']})"
        )
        for key in ("rows", "waited_oldest", "waited_newest", "ran"):
            r = row[key]
            print(f"  {key:<34} {r['p50']:>7} / {r['p90']:>7} / {r['max']:>7}")
    summary = {"after": args.after, "groups": tables, "csm_first_frame": csm, "batches": batched}
    if args.out:
        args.out.write_text(json.dumps(summary, indent=2) + "\n")
    return summary


if __name__ == "__main__":
    main()
