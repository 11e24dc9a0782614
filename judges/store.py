"""A judge task's directory: its frozen identity, the append-only exchange ledger and the
append-only per-sample results from which a rerun resumes.

- ``identity.json`` is written once; a rerun whose judge, prompt or parameters differ stops with
  an error that names the directory (results of two configurations are never mixed).
- ``ledger.jsonl``: one line per exchange (request body, raw reply or error, outcome). Never the
  key or auth headers: requests carry none, and each line is scrubbed of known key values.
- ``results.jsonl``: one line per finished sample; the last line of a sample wins. A finished
  sample is skipped on a rerun; ``failed`` ones (transport or parse) only with ``retry_failed``.
  A finished sample whose request would now differ (its transcripts changed) stops the rerun.
"""

from __future__ import annotations

import fcntl
import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from fdb.errors import FdbError
from fdb.io import atomic_write_json, read_json, read_jsonl
from fdb.provenance import current
from judges.client import redact, secret_values

TASK_SCHEMA = "fdb-judge-task-1"
Outcome = Literal["valid", "invalid_label", "model_mismatch", "failed"]
RETRYABLE: frozenset[str] = frozenset({"failed"})


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class SampleResult(BaseModel):
    sample_id: str
    outcome: Outcome
    reason: str | None = None
    value: dict[str, Any] | None = None
    attempts: int
    retries: int = 0
    request_sha256: str
    reply_model: str | None = None
    finished_utc: str


class Ledger:
    """Append-only JSONL; each line is flushed and fsynced before the next exchange is logged."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._secrets = secret_values()

    def append(self, row: dict[str, Any]) -> None:
        line = redact(
            json.dumps(row, sort_keys=True, ensure_ascii=False, default=str), self._secrets
        )
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(line + "\n")
            handle.flush()
            os.fsync(handle.fileno())


class TaskDir:
    """Open (or create) one task's output directory for one judge identity."""

    def __init__(
        self, root: Path, task: str, judge_identity: dict[str, Any], params: dict[str, Any]
    ):
        self.root = Path(root)
        self.task = task
        self.identity = {
            "schema": TASK_SCHEMA,
            "task": task,
            "judge": judge_identity,
            "params": params,
        }
        self.ledger = Ledger(self.root / "ledger.jsonl")
        self.results_path = self.root / "results.jsonl"
        self._lock_handle = None

    def open(self) -> TaskDir:
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock()
        path = self.root / "identity.json"
        if path.exists():
            stored = read_json(path)
            diff = [
                k
                for k in ("schema", "task", "judge", "params")
                if stored.get(k) != self.identity[k]
            ]
            if diff:
                raise FdbError(
                    f"{self.root} changed since this directory was created ({', '.join(diff)} "
                    "differ)",
                    f"delete {self.root} and rerun judge, or keep the earlier settings",
                )
        else:
            atomic_write_json(
                path,
                {
                    **self.identity,
                    "created_utc": utc_now(),
                    "provenance": current().model_dump(mode="json"),
                },
            )
        return self

    def _lock(self) -> None:
        handle = open(self.root / ".lock", "a")  # noqa: SIM115 - held for the phase
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            handle.close()
            raise FdbError(
                f"{self.root} is being judged by another process",
                "wait for it to finish; two judges must not write one directory",
            ) from exc
        self._lock_handle = handle

    def close(self) -> None:
        if self._lock_handle is not None:
            self._lock_handle.close()
            self._lock_handle = None

    def __enter__(self) -> TaskDir:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def results(self) -> dict[str, SampleResult]:
        out: dict[str, SampleResult] = {}
        for row in read_jsonl(self.results_path, partial=True):
            try:
                result = SampleResult.model_validate(row)
            except ValidationError:
                continue
            out[result.sample_id] = result
        return out

    def record(self, result: SampleResult) -> None:
        Ledger(self.results_path).append(result.model_dump(mode="json"))

    def needs_judging(
        self, done: SampleResult | None, request_sha256: str, retry_failed: bool
    ) -> bool:
        """Whether a sample is sent again. A finished sample's inputs must be unchanged."""
        if done is None:
            return True
        if done.outcome in RETRYABLE:
            return retry_failed
        if done.request_sha256 != request_sha256:
            raise FdbError(
                f"{done.sample_id}: its inputs changed since {self.root} judged it",
                f"delete {self.root} and rerun judge (transcripts were redone)",
            )
        return False
