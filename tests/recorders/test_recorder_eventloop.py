"""The recorder's loop (uvloop where installed, FDB_EVENT_LOOP=asyncio for the stock one), its
clock, ``sleep_until`` never waking before the due time, the shared ``Pacer``, ``paced_gc`` and the
trace rows that the garbage collector does not track."""

from __future__ import annotations

import asyncio
import gc
import json
import pickle

import pytest

from recorders.eventloop import CLOCK, pacer, run, sleep_until
from recorders.looplag import GC_FULL_EVERY, paced_gc
from recorders.session import RawTrace, trace_from_raw


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


@pytest.mark.parametrize("kind", ["uvloop", "asyncio"])
def test_the_pacer_wakes_many_waits_from_one_timer_in_due_order_never_early(monkeypatch, kind):
    if kind == "uvloop":
        pytest.importorskip("uvloop")
    monkeypatch.setenv("FDB_EVENT_LOOP", kind)
    fires = []

    async def main() -> tuple[list[tuple[float, float]], int]:
        paced = pacer()
        original = paced._fire
        monkeypatch.setattr(paced, "_fire", lambda: (fires.append(CLOCK()), original()))
        base = CLOCK() + 0.005
        dues = [base + (k * 7919 % 400) * 0.00005 for k in range(400)]  # 400 waits within 20 ms
        woke: list[tuple[float, float]] = []

        async def one(due: float) -> None:
            woke.append((due, await sleep_until(due)))

        cancelled = asyncio.ensure_future(sleep_until(base + 0.002))  # a cancelled wait is dropped
        await asyncio.sleep(0)
        cancelled.cancel()
        await asyncio.gather(*(one(due) for due in dues))
        return woke, len(paced)

    woke, left = run(main())
    assert len(woke) == 400 and left == 0
    assert all(at >= due for due, at in woke)  # never before its time
    assert [due for due, _ in woke] == sorted(due for due, _ in woke)  # resumed in due order
    assert len(fires) < 60  # about one timer callback per millisecond, not one per wait


def test_raw_trace_rows_allocate_nothing_the_garbage_collector_tracks():
    raw = RawTrace()
    texts = [json.dumps({"type": "x", "k": k}) for k in range(2000)]
    gc.disable()
    try:
        before = gc.get_count()[0]
        for k, text in enumerate(texts):
            index = raw.append(float(k), "recv", "x", text, None if k % 2 else k - 0.5)
            raw.set_end(index, k + 0.25)
        grown = gc.get_count()[0] - before
    finally:
        gc.enable()
    assert grown < 20  # a tuple per row would count 2000 or more
    copy = pickle.loads(pickle.dumps(raw.copy()))
    events = trace_from_raw(copy, origin=1.0)
    assert len(events) == 2000
    assert events[3].t == 2.0 and events[3].scheduled is None and events[3].t_end == 2.25
    assert events[4].scheduled == 2.5 and events[4].event == {"type": "x", "k": 4}
