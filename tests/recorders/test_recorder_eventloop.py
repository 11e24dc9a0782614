"""The recorder's loop (uvloop where installed, FDB_EVENT_LOOP=asyncio for the stock one), its
clock, ``sleep_until`` never waking before the due time, the shared ``Pacer``, ``paced_gc`` and the
trace rows that the garbage collector does not track."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import pickle
import statistics
import sys
import weakref

import pytest

from recorders import looplag
from recorders.eventloop import CLOCK, TimerFd, pacer, run, sleep_until
from recorders.looplag import paced_gc
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


def test_paced_gc_turns_the_collector_off_freezes_what_exists_and_restores_both():
    assert gc.isenabled()
    with paced_gc():
        assert not gc.isenabled() and gc.get_freeze_count() > 0
        with paced_gc():  # nested batches (one per shard) share it
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled() and gc.get_freeze_count() == 0


class _Node:
    pass


def test_the_gc_valve_collects_cycles_only_past_its_threshold_and_only_while_paced(monkeypatch):
    monkeypatch.setattr(looplag, "GC_VALVE", 5000)

    def cycles(n: int) -> list[weakref.ref]:
        refs = []
        for _ in range(n):
            a, b = _Node(), _Node()
            a.other, b.other = (
                b,
                a,
            )  # unreachable once this loop moves on: only a collection frees it
            refs.append(weakref.ref(a))
        return refs

    assert not looplag.gc_valve()  # not paced: the collector is on and the valve does nothing
    with paced_gc():
        few = cycles(100)
        assert not looplag.gc_valve() and all(r() is not None for r in few)  # under the threshold
        many = cycles(5000)
        assert looplag.gc_valve()
        assert all(r() is None for r in few + many)
        assert gc.get_count()[0] < 5000 and not gc.isenabled()


@pytest.mark.parametrize("timer", ["timerfd", "loop timer"])
@pytest.mark.parametrize("kind", ["uvloop", "asyncio"])
def test_the_pacer_wakes_many_waits_from_one_timer_in_due_order_never_early(
    monkeypatch, kind, timer
):
    if kind == "uvloop":
        pytest.importorskip("uvloop")
    if timer == "timerfd" and not sys.platform.startswith("linux"):
        pytest.skip("timerfd is Linux only")
    if timer == "loop timer":
        monkeypatch.setattr(TimerFd, "create", classmethod(lambda cls, loop, callback: None))
    monkeypatch.setenv("FDB_EVENT_LOOP", kind)
    fires = []

    async def main() -> tuple[list[tuple[float, float]], int]:
        paced = pacer()
        original = paced._fire
        monkeypatch.setattr(paced, "_fire", lambda: (fires.append(CLOCK()), original()))
        # head room for the 400 waits to be registered first: a wait registered after its due
        # time resumes at once (sleep_until), out of due order, which is not what is tested here;
        # 5 ms was too little on a busy 2-core VM (one CI-like run in three failed that way)
        base = CLOCK() + 0.05
        dues = [base + (k * 7919 % 400) * 0.00005 for k in range(400)]  # 400 waits within 20 ms
        woke: list[tuple[float, float]] = []

        async def one(due: float) -> None:
            woke.append((due, await sleep_until(due)))

        cancelled = asyncio.ensure_future(sleep_until(base + 0.002))  # a cancelled wait is dropped
        await asyncio.sleep(0)
        cancelled.cancel()
        await asyncio.gather(*(one(due) for due in dues))
        assert (paced._fd is not None) == (timer == "timerfd")
        return woke, len(paced)

    woke, left = run(main())
    assert len(woke) == 400 and left == 0
    assert all(at >= due for due, at in woke)  # never before its time
    assert [due for due, _ in woke] == sorted(due for due, _ in woke)  # resumed in due order
    assert fires
    if timer == "loop timer":
        assert len(fires) < 60  # about one timer callback per millisecond, not one per wait
    else:
        assert len(fires) <= len(set(due for due, _ in woke))  # at most one per distinct due time


def test_the_pacer_of_run_wakes_from_a_timerfd_to_a_fraction_of_a_millisecond_and_closes_it():
    if not sys.platform.startswith("linux"):
        pytest.skip("timerfd is Linux only")
    pytest.importorskip("uvloop")

    async def main() -> tuple[list[float], int]:
        late = []
        for k in range(30):  # due times that are not whole milliseconds away
            due = CLOCK() + 0.0017 + k * 0.00011
            late.append(await sleep_until(due) - due)
        fd = pacer()._fd
        assert fd is not None
        return late, fd.fd

    late, fd = run(main())
    assert min(late) >= 0.0
    # uvloop's own timers count whole milliseconds: a wake-up 0.5-1 ms late is typical there
    assert statistics.median(late) < 0.0005
    with pytest.raises(OSError):
        os.fstat(fd)  # closed with its loop


def test_a_pacer_on_a_loop_not_made_by_run_uses_the_loop_timer():
    async def main() -> bool:
        paced = pacer()
        await sleep_until(CLOCK() + 0.002)
        return paced._fd is None

    assert asyncio.run(main())


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


def test_the_loop_monitor_gives_each_session_the_ticks_of_its_own_span_batch_after_batch():
    async def batch_after_batch():
        monitor = looplag.LoopMonitor(asyncio.get_running_loop(), interval=0.002)
        first = monitor.acquire()
        await asyncio.sleep(0.03)
        alone = monitor.release(first, 80.0)  # the last user: the ticks are dropped
        early = monitor.acquire()  # a second batch on the same loop (base > 0 now)
        await asyncio.sleep(0.03)
        late = monitor.acquire()
        await asyncio.sleep(0.03)
        return alone, monitor.release(late, 80.0), monitor.release(early, 80.0), monitor.base

    alone, late, early, base = asyncio.run(batch_after_batch())
    assert base == len(alone.lags) + len(early.lags) and len(alone.lags) > 0
    assert 0 < len(late.lags) < len(early.lags)  # late saw only the ticks since it started
    assert (
        list(early.times[-len(late.times) :]) == list(late.times)
        and early.times[0] > alone.times[-1]
    )
    assert late.stats().ticks == len(late.lags) and early.stats().interval_ms == 2.0
