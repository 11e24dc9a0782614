"""The fault battery (#25): kill -9 every phase at seeded random points, recover as documented,
check.

    python benchmarks/faults.py [--kills 24] [--seed faults] [--out /tmp/faults] [--keep]

What it does, on a fresh $FDB_WORK with fdb's synthetic datasets (one v1.5 pair, one v1.0 sample:
the same selection as the runbook tests) and the bundled server on a free loopback port:

1. An uninterrupted reference: ``generate``, a second ``generate --export-only`` on that
   recording, ``asr``, ``judge``, ``aggregate``; a snapshot of the run after each, and how long each
   phase took (the kill points are drawn inside those durations).
2. ``--kills`` faults, spread over the kinds below in turn, each at a seeded random point:

   - ``generate``: SIGKILL while generate starts its server or records;
   - ``export``: SIGKILL of ``generate --export-only`` on the reference recording;
   - ``asr`` / ``judge`` / ``aggregate``: SIGKILL of the phase, started from the snapshot before it;
   - ``rename``: the phase kills itself (SIGKILL) right before or right after its k-th
     ``os.replace`` (the commit of an atomic write), k drawn from the renames the reference made;
     injected by a ``sitecustomize`` on PYTHONPATH, so fdb itself carries no fault hooks.

   Half the timed kills hit the phase's process only (``kill -9 PID``), half its whole process
   group (what a terminal's kill does). A draw that lands after the phase finished is not a kill;
   it is drawn again, earlier.
3. After each kill: the files of the run are parsed (a torn JSON/JSONL/WAV counts as ``torn``);
   every process that carries this battery's FDB_WORK must be gone within 30 s (the bundled
   server's watchdog gives its parent 20 s) or it is an ``orphan``; then the documented recovery
   runs: ``generate`` -> delete the repeat and generate it again (a recording is real time, so
   its bytes cannot be compared; only that it completes); ``export`` -> ``generate --export-only``;
   a later phase -> the same command again. The recovered run must equal the uninterrupted
   reference byte for byte (judge.json's finish stamp blanked) and hold no ``*.tmp`` leftover
   (``partial``).

Writes faults.json and FAULTS.md under --out and prints the table; exit 1 if any check failed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import wave
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fdb.datasets.synthetic import ensure_synthetic  # noqa: E402
from fdb.io import read_jsonl  # noqa: E402

SELECT = [
    "--v15-per-subset",
    "0",
    "--v15-subset-count",
    "user_interruption=1",
    "--v10-per-subset",
    "0",
    "--v10-subset-count",
    "candor_turn_taking=1",
]
RUN = "faults"
COMMANDS = {
    "generate": ["generate", "--run-name", RUN, *SELECT],
    "export": ["generate", "--run-name", RUN, "--export-only"],
    "asr": ["asr", "--run-name", RUN],
    "judge": ["judge", "--run-name", RUN],
    "aggregate": ["aggregate", "--run-name", RUN, "--quiet"],
}
STARTS_FROM = {"export": "export-input", "asr": "export", "judge": "asr", "aggregate": "judge"}
KINDS = ["generate", "export", "asr", "judge", "aggregate", "rename"]
RENAME_PHASES = ["export", "asr", "judge", "aggregate"]
ORPHAN_WAIT_S = 30.0
STAMP = re.compile(rb'"finished_utc": "[^"]*"')

SHIM = REPO / "benchmarks" / "fault_shim"  # sitecustomize.py: the rename faults (see its docstring)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def tree_bytes(root: Path) -> dict[str, bytes]:
    """Every file of a run except logs and atomic-write leftovers, by relative path."""
    found = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if path.is_file() and "logs" not in rel.parts and not path.name.endswith(".tmp"):
            data = path.read_bytes()
            found[str(rel)] = (
                STAMP.sub(b'"finished_utc": ""', data) if path.name == "judge.json" else data
            )
    return found


def torn_files(root: Path) -> list[str]:
    """Files that a reader would choke on: JSON/JSONL that does not parse,
    WAV shorter than its header."""
    torn = []
    for path in sorted(root.rglob("*")):
        if (
            not path.is_file()
            or path.name.endswith(".tmp")
            or "logs" in path.relative_to(root).parts
        ):
            continue
        try:
            if path.suffix == ".json":
                json.loads(path.read_bytes())
            elif (
                path.suffix == ".jsonl" and "recording" not in path.parts
            ):  # events stream while recording
                read_jsonl(path)
            elif path.suffix == ".wav" and "recording" not in path.parts:
                with wave.open(str(path)) as w:
                    frames = w.getnframes() * w.getsampwidth() * w.getnchannels()
                    if len(w.readframes(w.getnframes())) != frames:
                        raise ValueError("short")
        except Exception:  # noqa: BLE001 - any failure to read is a torn file
            torn.append(str(path.relative_to(root)))
    return torn


def leftovers(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*.tmp"))


def our_processes(work: Path) -> list[tuple[int, str]]:
    """Processes (other than this one) started with this battery's FDB_WORK in their environment."""
    mark = f"FDB_WORK={work}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if mark in (entry / "environ").read_bytes().split(b"\0"):
                cmd = (
                    (entry / "cmdline")
                    .read_bytes()
                    .replace(b"\0", b" ")
                    .decode(errors="replace")
                    .strip()
                )
                if cmd:  # a zombie has an empty command line and holds nothing
                    found.append((int(entry.name), cmd[:120]))
        except OSError:
            continue
    return found


@dataclass
class Fault:
    kind: str
    phase: str
    how: str  # "pid" | "group" | "before-rename-K" | "after-rename-K"
    at_s: float | None
    landed: bool = False
    torn_after_kill: list[str] = field(default_factory=list)
    tmp_after_kill: int = 0
    orphans: list[str] = field(default_factory=list)
    orphan_clear_s: float | None = (
        None  # seconds from the kill until no process of the battery was left
    )
    recovered: bool = False
    identical: bool | None = None  # None: not comparable (a new recording)
    differs: list[str] = field(default_factory=list)
    partial_after_recovery: list[str] = field(default_factory=list)
    recovery_s: float | None = None
    note: str = ""


class Battery:
    def __init__(self, work: Path, seed: str):
        self.work = work
        ensure_synthetic(work, v10_per_subset=1, v15_per_category=1)
        self.shim = SHIM
        self.env = dict(
            os.environ,
            FDB_WORK=str(work),
            SERVER_PORT=str(free_port()),
            PYTHONPATH=str(REPO),
            FDB_FAULT_PARENT=str(os.getpid()),
        )
        for name in ("CUDA_VISIBLE_DEVICES", "GPU", "JUDGE_CONFIG", "JUDGE_URL", "OPENAI_API_KEY"):
            self.env.pop(name, None)
        self.snapshots: dict[str, Path] = {}
        self.durations: dict[str, float] = {}
        self.renames: dict[str, int] = {}
        self.rng = random.Random(seed)
        self.keep_failed: Path | None = None

    @property
    def run(self) -> Path:
        return self.work / "runs" / RUN

    def fdb(self, args: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "fdb", *args],
            cwd=REPO,
            env=env or self.env,
            capture_output=True,
            text=True,
            timeout=900,
        )

    def snapshot(self, name: str) -> None:
        target = self.work / "snapshots" / name
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(self.run, target, symlinks=True)
        self.snapshots[name] = target

    def restore(self, name: str) -> None:
        shutil.rmtree(self.run, ignore_errors=True)
        shutil.copytree(self.snapshots[name], self.run, symlinks=True)

    def drop_exports(self) -> None:
        for rep in self.run.glob("repeat-*"):
            for folder in (rep / "reference-audio", rep / "v10" / "reference"):
                shutil.rmtree(folder, ignore_errors=True)

    def reference(self) -> None:
        """The uninterrupted run, its snapshots, durations and os.replace counts."""
        for phase in ["generate", "export", "asr", "judge", "aggregate"]:
            if phase == "export":
                self.restore("generate")
                self.drop_exports()
                self.snapshot("export-input")
            count_file = self.work / f"renames-{phase}"
            env = dict(
                self.env,
                PYTHONPATH=f"{self.shim}{os.pathsep}{REPO}",
                FDB_FAULT_COUNT=str(count_file),
            )
            started = time.monotonic()
            done = self.fdb(COMMANDS[phase], env)
            self.durations[phase] = time.monotonic() - started
            if done.returncode != 0:
                raise SystemExit(
                    f"reference {phase} failed ({done.returncode}):\n{done.stderr[-3000:]}"
                )
            self.renames[phase] = int(count_file.read_text()) if count_file.is_file() else 0
            self.snapshot(phase)
            print(
                f"reference {phase}: {self.durations[phase]:.1f} s, {self.renames[phase]} renames",
                flush=True,
            )

    def _kill_timed(self, args: list[str], at_s: float, group: bool) -> bool:
        proc = subprocess.Popen(
            [sys.executable, "-m", "fdb", *args],
            cwd=REPO,
            env=self.env,
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            proc.wait(timeout=at_s)
            return False
        except subprocess.TimeoutExpired:
            if group:
                os.killpg(proc.pid, signal.SIGKILL)
            else:
                os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            return True

    def _kill_at_rename(self, args: list[str], k: int, when: str) -> bool:
        env = dict(
            self.env,
            PYTHONPATH=f"{self.shim}{os.pathsep}{REPO}",
            FDB_FAULT_AT=str(k),
            FDB_FAULT_WHEN=when,
        )
        done = subprocess.run(
            [sys.executable, "-m", "fdb", *args],
            cwd=REPO,
            env=env,
            capture_output=True,
            timeout=900,
        )
        return done.returncode == -signal.SIGKILL

    def _wait_for_orphans(self, fault: Fault, after_recovery: bool = False) -> None:
        """Every process of this battery gone within ORPHAN_WAIT_S;
        else each left is an orphan (and killed)."""
        started = time.monotonic()
        while time.monotonic() - started < ORPHAN_WAIT_S:
            if not our_processes(self.work):
                if not after_recovery:
                    fault.orphan_clear_s = round(time.monotonic() - started, 2)
                return
            time.sleep(0.1)
        left = our_processes(self.work)
        fault.orphans += [
            f"{'after recovery: ' if after_recovery else ''}{pid} {cmd}" for pid, cmd in left
        ]
        for pid, _ in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def one(self, kind: str, index: int) -> Fault:
        phase = kind if kind != "rename" else RENAME_PHASES[index % len(RENAME_PHASES)]
        if phase == "generate":
            shutil.rmtree(self.run, ignore_errors=True)
        else:
            self.restore(STARTS_FROM[phase])
        if kind == "rename":
            k = self.rng.randint(1, max(1, self.renames[phase]))
            when = self.rng.choice(["before", "after"])
            fault = Fault(kind, phase, f"{when}-rename-{k}/{self.renames[phase]}", None)
            fault.landed = self._kill_at_rename(COMMANDS[phase], k, when)
        else:
            group = index % 2 == 1
            at = self.rng.uniform(0.05, 0.95) * self.durations[phase]
            fault = Fault(kind, phase, "group" if group else "pid", round(at, 2))
            for _ in range(4):  # a draw after the phase finished is no kill: draw again, earlier
                fault.landed = self._kill_timed(COMMANDS[phase], fault.at_s, group)
                if fault.landed:
                    break
                if phase != "generate":
                    self.restore(STARTS_FROM[phase])
                else:
                    shutil.rmtree(self.run, ignore_errors=True)
                fault.at_s = round(fault.at_s * 0.6, 2)
        fault.torn_after_kill = torn_files(self.run) if self.run.exists() else []
        fault.tmp_after_kill = len(leftovers(self.run)) if self.run.exists() else 0
        self._wait_for_orphans(fault)
        self._recover(fault)
        return fault

    def _recover(self, fault: Fault) -> None:
        started = time.monotonic()
        if fault.phase == "generate":
            for rep in self.run.glob("repeat-*"):
                shutil.rmtree(rep)  # the documented recovery: delete the repeat, generate it again
            done = self.fdb(COMMANDS["generate"])
        else:
            done = self.fdb(COMMANDS[fault.phase])
        fault.recovery_s = round(time.monotonic() - started, 1)
        fault.recovered = done.returncode == 0
        if not fault.recovered:
            fault.note = (
                done.stderr.strip().splitlines()[-1][:200]
                if done.stderr.strip()
                else f"exit {done.returncode}"
            )
            return
        fault.partial_after_recovery = leftovers(self.run) + torn_files(self.run)
        if fault.phase != "generate":
            expected = tree_bytes(self.snapshots[fault.phase])
            got = tree_bytes(self.run)
            fault.differs = sorted(set(expected) ^ set(got)) + [
                k for k in expected if k in got and got[k] != expected[k]
            ]
            fault.identical = not fault.differs
            if (
                fault.differs and self.keep_failed is not None
            ):  # kept for a look: what the recovery wrote
                target = (
                    self.keep_failed
                    / f"{fault.kind}-{fault.phase}-{len(list(self.keep_failed.glob('*')))}"
                )
                shutil.copytree(self.run, target, symlinks=True)
                fault.note = f"recovered run kept in {target}"
        self._wait_for_orphans(fault, after_recovery=True)


def table(faults: list[Fault]) -> str:
    lines = [
        "| kind | phase | how | at s | landed | torn after kill | .tmp after kill | orphans | "
        "orphan-free after s | recovered | identical | partial after recovery |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for f in faults:
        ident = "n/a (new recording)" if f.identical is None and f.recovered else str(f.identical)
        lines.append(
            f"| {f.kind} | {f.phase} | {f.how} | {f.at_s if f.at_s is not None else ''} | "
            f"{f.landed} | {len(f.torn_after_kill)} | {f.tmp_after_kill} | {len(f.orphans)} | "
            f"{f.orphan_clear_s} | {f.recovered} | {ident} | {len(f.partial_after_recovery)} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--kills", type=int, default=24, help="faults to inject (spread over the kinds in turn)"
    )
    parser.add_argument("--seed", default="faults")
    parser.add_argument("--out", type=Path, default=Path("/tmp/fdb-faults"))
    parser.add_argument(
        "--kinds", default=",".join(KINDS), help="comma-separated subset of " + ",".join(KINDS)
    )
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()
    kinds = [k for k in args.kinds.split(",") if k]
    if not kinds or set(kinds) - set(KINDS) or args.kills < 1:
        parser.error(f"--kinds must name some of {KINDS} and --kills must be at least 1")
    work = Path(tempfile.mkdtemp(prefix="fdb-faults-"))
    started = time.monotonic()
    battery = Battery(work, args.seed)
    battery.keep_failed = args.out / "not-identical"
    battery.keep_failed.mkdir(parents=True, exist_ok=True)
    try:
        battery.reference()
        faults = []
        for index in range(args.kills):
            kind = kinds[index % len(kinds)]
            fault = battery.one(kind, index // len(kinds))
            faults.append(fault)
            print(
                f"[{index + 1}/{args.kills}] {fault.kind} {fault.phase} {fault.how} at "
                f"{fault.at_s}: landed={fault.landed} orphans={len(fault.orphans)} "
                f"recovered={fault.recovered} identical={fault.identical} "
                f"partial={len(fault.partial_after_recovery)} {fault.note}",
                flush=True,
            )
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    landed = [f for f in faults if f.landed]
    summary = {
        "kills_landed": len(landed),
        "draws": len(faults),
        "orphans": sum(len(f.orphans) for f in faults),
        "torn_after_kill": sum(len(f.torn_after_kill) for f in faults),
        "tmp_after_kill": sum(f.tmp_after_kill for f in faults),
        "partial_after_recovery": sum(len(f.partial_after_recovery) for f in faults),
        "not_recovered": sum(1 for f in faults if not f.recovered),
        "not_identical": sum(1 for f in faults if f.identical is False),
        "compared": sum(1 for f in faults if f.identical is not None),
        "max_orphan_clear_s": max((f.orphan_clear_s or 0.0) for f in faults),
        "by_phase": {p: sum(1 for f in landed if f.phase == p) for p in COMMANDS},
        "reference_s": {k: round(v, 1) for k, v in battery.durations.items()},
        "reference_renames": battery.renames,
        "seed": args.seed,
        "wall_s": round(time.monotonic() - started, 1),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "faults.json").write_text(
        json.dumps({"summary": summary, "faults": [asdict(f) for f in faults]}, indent=2) + "\n"
    )
    text = table(faults)
    (args.out / "FAULTS.md").write_text(
        f"# Fault battery\n\n{json.dumps(summary, indent=2)}\n\n{text}\n"
    )
    print(text)
    print(json.dumps(summary, indent=2))
    bad = (
        summary["orphans"]
        or summary["torn_after_kill"]
        or summary["partial_after_recovery"]
        or summary["not_recovered"]
        or summary["not_identical"]
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
