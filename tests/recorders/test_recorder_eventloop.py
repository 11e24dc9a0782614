"""The recorder's loop (uvloop where installed, FDB_EVENT_LOOP=asyncio for the stock one), its
clock, ``sleep_until`` never waking before the due time, and ``paced_gc``."""

from __future__ import annotations

import asyncio
import gc

import pytest

from recorders.eventloop import CLOCK, run, sleep_until
from recorders.looplag import GC_FULL_EVERY, paced_gc


async def _loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_the_recorder_runs_on_uvloop_unless_told_otherwise(monkeypatch):
    pytest.importorskip("uvloop")
    monkeypatch.delenv("FDB_EVENT_LOOP", raising=False)
    assert run(_loop_module()).startswith("uvloop")
    monkeypatch.setenv("FDB_EVENT_LOOP", "asyncio")
    assert run(_loop_module()).startswith("asyncio")


@pytest.mark.parametrize("kind", ["uvloop", "asyncio"])
def test_sleep_until_never_wakes_before_the_due_time(monkeypatch, kind):
    if kind == "uvloop":
        pytest.importorskip("uvloop")
    monkeypatch.setenv("FDB_EVENT_LOOP", kind)

    async def wakes() -> list[float]:
        early = []
        for k in range(40):  # due times that are not whole milliseconds away
            due = CLOCK() + 0.0003 + k * 0.00013
            early.append(due - await sleep_until(due))
        return early

    assert max(run(wakes())) <= 0.0


def test_paced_gc_freezes_and_defers_full_collections_and_restores_them():
    before = gc.get_threshold()
    with paced_gc():
        assert gc.get_threshold() == (before[0], before[1], GC_FULL_EVERY)
        assert gc.get_freeze_count() > 0
        with paced_gc():  # nested batches (one per shard) share it
            assert gc.get_threshold()[2] == GC_FULL_EVERY
        assert gc.get_threshold()[2] == GC_FULL_EVERY
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
