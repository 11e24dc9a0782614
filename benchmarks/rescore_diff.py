"""Re-score one recorded run with two checkouts of fdb and list every output that differs.

A renovation that "changes no metric" must leave every score file of a recorded run unchanged.
This script shows it on a real run::

    git worktree add /tmp/fdb-old REV       # the code before
    python benchmarks/rescore_diff.py --run $FDB_WORK/runs/demo --old /tmp/fdb-old --new . \\
        --out /tmp/rescore

For each side it copies the run's inputs into OUT/work/runs/<name>/ (run.json, each repeat's
recordings, sample lists and server.json: nothing any later phase wrote), then runs, with that
checkout first on PYTHONPATH and FDB_WORK=OUT/work, and moves the result to OUT/<side> (both sides
run at the same path, so the paths that outputs record are the same):

    python -m fdb generate --run-name NAME --export-only   (the observation windows, cut again)
    python -m fdb asr --run-name NAME                      (v1.0, v1.5 timing, listening)
    python -m fdb judge --run-name NAME                    (whatever the run's judge config gives)
    python -m fdb aggregate --run-name NAME                (RESULTS.md, results.json, tables, plots)

and compares every file the phases wrote, byte for byte. A JSON file that differs is compared
again with its provenance left out (the ``provenance`` objects and the keys in MASKED: the fdb
revision, package versions, timestamps and durations differ between two checkouts and two runs
by nature), and with the sha256s of the manifests and ASR receipts that later phases record as
their inputs (those files are compared themselves, and differ in their provenance); it is
reported as ``provenance only`` when that is the whole difference. Every other
difference is listed with its first differing line. Exit 0 when no file differs beyond
provenance, 1 otherwise, 2 when a phase failed. The run's datasets must be where run.json says.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

PHASES = (["generate", "--export-only"], ["asr"], ["judge"], ["aggregate"])
# Kept from the recorded run: what the recording phase wrote. Everything else is re-made.
KEEP_DIRS = ("recording",)
KEEP_FILES = ("run.json", "sample-ids.txt", "server.json")
SKIP_PARTS = {"recording", "logs", "__pycache__"}
MASKED = {
    "provenance",
    "fdb_revision",
    "git_revision",
    "revision_dirty",
    "created_at",
    "started_at",
    "finished_at",
    "elapsed_s",
    "wall_s",
    "duration_s",
    "timestamp",
    "command",
    "versions",
    "packages",
    "python",
    "platform",
    "host",
    "manifest_sha256",
    "asr_sha256",
}


def copy_inputs(run: Path, dest: Path) -> None:
    """run.json and, under every folder, the recordings, sample lists and server.json."""
    for path in sorted(run.rglob("*")):
        rel = path.relative_to(run)
        if any(part in KEEP_DIRS for part in rel.parts[:-1]) or (
            path.is_file() and rel.name in KEEP_FILES
        ):
            if path.is_file():
                (dest / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, dest / rel)


def rescore(checkout: Path, work: Path, name: str, python: str, log: Path) -> bool:
    env = {**os.environ, "FDB_WORK": str(work), "PYTHONPATH": str(checkout.resolve())}
    with log.open("w") as out:
        for phase in PHASES:
            command = [python, "-m", "fdb", phase[0], "--run-name", name, *phase[1:]]
            out.write(f"$ {' '.join(command)}\n")
            out.flush()
            rc = subprocess.call(
                command, cwd=checkout, env=env, stdout=out, stderr=subprocess.STDOUT
            )
            out.write(f"exit {rc}\n")
            if rc not in (0, 1):  # 1: a sample failed or a gate says so; the phase still wrote
                return False
    return True


def outputs(root: Path) -> dict[str, Path]:
    return {
        str(p.relative_to(root)): p
        for p in sorted(root.rglob("*"))
        if p.is_file() and not SKIP_PARTS.intersection(p.relative_to(root).parts)
    }


def masked(value):
    if isinstance(value, dict):
        return {k: masked(v) for k, v in value.items() if k not in MASKED}
    if isinstance(value, list):
        return [masked(v) for v in value]
    return value


def compare(old: Path, new: Path) -> tuple[list[str], list[str], list[str]]:
    """(identical, provenance only, different with their first differing line)."""
    a, b = outputs(old), outputs(new)
    same, provenance, differ = [], [], []
    for rel in sorted(set(a) | set(b)):
        if rel not in a or rel not in b:
            differ.append(f"{rel}: only in {'new' if rel in b else 'old'}")
            continue
        x, y = a[rel].read_bytes(), b[rel].read_bytes()
        if x == y:
            same.append(rel)
            continue
        if rel.endswith(".json"):
            try:
                if masked(json.loads(x)) == masked(json.loads(y)):
                    provenance.append(rel)
                    continue
            except ValueError:
                pass
        lines = [
            line
            for line in difflib.unified_diff(
                x.decode(errors="replace").splitlines(),
                y.decode(errors="replace").splitlines(),
                n=0,
                lineterm="",
            )
            if line[:1] in "+-" and line[:3] not in ("+++", "---")
        ]
        differ.append(f"{rel}: {lines[:2] if lines else 'binary'}")
    return same, provenance, differ


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--run", type=Path, required=True, help="a recorded run: $FDB_WORK/runs/NAME"
    )
    parser.add_argument(
        "--old", type=Path, required=True, help="the checkout before (a git worktree)"
    )
    parser.add_argument("--new", type=Path, required=True, help="the checkout after")
    parser.add_argument("--out", type=Path, required=True, help="where the two re-scored copies go")
    parser.add_argument(
        "--python", default=sys.executable, help="the interpreter (its packages serve both)"
    )
    args = parser.parse_args()
    name = args.run.name
    work = args.out / "work"
    for side, checkout in (("old", args.old), ("new", args.new)):
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(args.out / side, ignore_errors=True)
        copy_inputs(args.run, work / "runs" / name)
        log = args.out / f"rescore-{side}.log"
        print(f"{side}: re-scoring with {checkout} (log: {log}) …", flush=True)
        ok = rescore(checkout, work, name, args.python, log)
        work.rename(args.out / side)
        if not ok:
            print(f"{side}: a phase failed; see {log}", file=sys.stderr)
            return 2
    same, provenance, differ = compare(
        args.out / "old" / "runs" / name, args.out / "new" / "runs" / name
    )
    print(
        f"{len(same)} files identical, {len(provenance)} differ in provenance only, "
        f"{len(differ)} differ"
    )
    for rel in provenance:
        print(f"  provenance only: {rel}")
    for line in differ:
        print(f"  DIFFERS: {line}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
