"""`--log-level debug`: print the server and recorder logs a step writes, each line prefixed
with the log's name, e.g. `[model-server-gpu0] ...` or `[record-shard-0] ...`."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path


def prefixed(name: str, line: str) -> str:
    return f"[{name}] {line.rstrip()}"


class LogFollower:
    """Follow a growing log file from its current end in a daemon thread (like `tail -f`)."""

    def __init__(self, name: str, path: Path, stream=None, poll_s: float = 0.2):
        self.name = name
        self.path = path
        self.stream = stream or sys.stderr
        self.poll_s = poll_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"follow-{name}", daemon=True)
        self._offset = path.stat().st_size if path.exists() else 0

    def start(self) -> LogFollower:
        self._thread.start()
        return self

    def _drain(self) -> None:
        if not self.path.exists():
            return
        with open(self.path, encoding="utf-8", errors="replace") as handle:
            handle.seek(self._offset)
            while True:
                line = handle.readline()
                if not line.endswith("\n"):
                    break  # keep a partial last line for the next poll
                self._offset += len(line.encode("utf-8"))
                print(prefixed(self.name, line), file=self.stream, flush=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._drain()
            time.sleep(self.poll_s)
        self._drain()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2)


class RecordLog:
    """Appends one line per finished session to `record-shard-K.log` (and echoes it at debug)."""

    def __init__(self, directory: Path, shard: int, echo: bool, stream=None):
        self.name = f"record-shard-{shard}"
        self.path = directory / f"{self.name}.log"
        self.echo = echo
        self.stream = stream or sys.stderr
        directory.mkdir(parents=True, exist_ok=True)

    def write(self, line: str) -> None:
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(line.rstrip() + "\n")
        if self.echo:
            print(prefixed(self.name, line), file=self.stream, flush=True)
