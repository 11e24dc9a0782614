"""The server's diagnosis knobs: serving.stack_samples (FDB_STACK_SAMPLES: every thread's stack
sampled into a file, read back by benchmarks/stack_samples.py; a thread that waits in one place
costs one full stack line) and FDB_SWITCH_INTERVAL_MS (serving.launcher.switch_interval)."""

from __future__ import annotations

import json
import sys
import threading
import time

import pytest

from benchmarks.stack_samples import read, summarize
from fdb.errors import FdbError
from serving.launcher import switch_interval
from serving.stack_samples import StackSampler, start_from_env


def _parked_in_a_known_place(stop: threading.Event) -> None:
    stop.wait(5)


def test_a_waiting_thread_is_found_where_it_waits(tmp_path):
    path = tmp_path / "stacks.jsonl"
    stop = threading.Event()
    worker = threading.Thread(target=_parked_in_a_known_place, args=(stop,), name="parked")
    worker.start()
    sampler = StackSampler(path, interval_s=0.01)
    sampler.start()
    time.sleep(0.3)
    sampler.stop()
    stop.set()
    worker.join()
    lines = [json.loads(raw) for raw in path.read_text().splitlines()]
    parked = [line for line in lines if line["thread"] == "parked"]
    assert len(parked) >= 10
    assert sum("stack" in line for line in parked) == 1  # then "same" lines only
    assert not any(line["thread"] == "fdb-stack-sampler" for line in lines)
    result = summarize(read(path, None, None), depth=3, top=1)
    ((stack, share),) = result["threads"]["parked"]["stacks"]
    assert "_parked_in_a_known_place" in stack and share == 1.0
    assert result["late_ms"]["max"] is not None


def test_nothing_is_sampled_without_the_variable(monkeypatch):
    monkeypatch.delenv("FDB_STACK_SAMPLES", raising=False)
    assert start_from_env() is None


def test_the_switch_interval_comes_from_the_environment(monkeypatch):
    """FDB_SWITCH_INTERVAL_MS sets the interpreter's thread switch interval; a bad value is a
    one-line error naming the variable and the fix."""
    before = sys.getswitchinterval()
    try:
        monkeypatch.setenv("FDB_SWITCH_INTERVAL_MS", "0.5")
        assert switch_interval() == pytest.approx(0.5)
        monkeypatch.setenv("FDB_SWITCH_INTERVAL_MS", "fast")
        with pytest.raises(FdbError, match="FDB_SWITCH_INTERVAL_MS"):
            switch_interval()
        monkeypatch.setenv("FDB_SWITCH_INTERVAL_MS", "0")
        with pytest.raises(FdbError, match="positive"):
            switch_interval()
    finally:
        sys.setswitchinterval(before)
