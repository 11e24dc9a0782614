"""The cross-session batcher: what waits together runs together, each request gets its own
result, a failed batch fails its requests with one line, and a shared engine loads once."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from fdb.errors import FdbError
from serving.batching import Batcher, shared


def test_concurrent_requests_become_one_batch_with_their_own_results():
    calls = []

    def run(batch):
        calls.append(list(batch))
        return [x * 10 for x in batch]

    async def main():
        batcher = Batcher(run, max_batch=8, name="t")
        results = await asyncio.gather(*[batcher.submit(i) for i in range(5)])
        return results, batcher.batch_sizes

    results, sizes = asyncio.run(main())
    assert results == [0, 10, 20, 30, 40]
    assert sizes == [5] and calls == [[0, 1, 2, 3, 4]]


def test_max_batch_splits_and_arrivals_during_a_batch_form_the_next():
    def run(batch):
        time.sleep(0.05)
        return [x + 1 for x in batch]

    async def main():
        batcher = Batcher(run, max_batch=2, name="t")
        first = [asyncio.ensure_future(batcher.submit(i)) for i in range(3)]
        await asyncio.sleep(0.01)  # the first batch (2) runs; these join the third request
        later = [asyncio.ensure_future(batcher.submit(i)) for i in (10, 11)]
        return await asyncio.gather(*first, *later), batcher.batch_sizes

    results, sizes = asyncio.run(main())
    assert results == [1, 2, 3, 11, 12]
    assert sizes == [2, 2, 1]


def test_a_failed_batch_fails_its_requests_with_one_line_and_the_next_batch_runs():
    def run(batch):
        if "bad" in batch:
            raise RuntimeError("CUDA out of memory\nsecond line")
        return [s.upper() for s in batch]

    async def main():
        batcher = Batcher(run, max_batch=4, name="whisper_gpu")
        failed = await asyncio.gather(
            batcher.submit("a"), batcher.submit("bad"), return_exceptions=True
        )
        return failed, await batcher.submit("c")

    failed, after = asyncio.run(main())
    assert all(isinstance(e, FdbError) for e in failed)
    line = failed[0].one_line()
    assert (
        "\n" not in line
        and "whisper_gpu: a batch of 2 failed: RuntimeError: CUDA out of memory" in line
    )
    assert after == "C"


def test_a_cancelled_request_is_left_out_of_the_batch():
    seen = []

    def run(batch):
        seen.extend(batch)
        return list(batch)

    async def main():
        batcher = Batcher(run, max_batch=4, name="t")
        gone = asyncio.ensure_future(batcher.submit("gone"))
        await asyncio.sleep(0)
        gone.cancel()
        kept = await batcher.submit("kept")
        return kept

    assert asyncio.run(main()) == "kept" and seen == ["kept"]


def test_sessions_opening_at_once_share_one_engine_built_once():
    builds = []

    class Owner:
        async def run(self, fn):
            return await asyncio.get_running_loop().run_in_executor(None, fn)

    def build():
        builds.append(threading.get_ident())
        time.sleep(0.05)
        return object()

    async def main():
        owner = Owner()
        engines = await asyncio.gather(*[shared(owner, ("k",), build, owner.run) for _ in range(4)])
        other = await shared(owner, ("other",), build, owner.run)
        return engines, other

    engines, other = asyncio.run(main())
    assert len({id(e) for e in engines}) == 1 and other is not engines[0] and len(builds) == 2


def test_max_batch_must_be_positive():
    with pytest.raises(ValueError):
        Batcher(lambda b: b, max_batch=0, name="t")


def test_close_shared_closes_every_engine_built():
    from serving.batching import close_shared

    closed = []

    class Engine:
        def close(self):
            closed.append(self)

    class Owner:
        async def run(self, fn):
            return fn()

    owner = Owner()

    async def main():
        return [await shared(owner, (k,), Engine, owner.run) for k in "ab"]

    engines = asyncio.run(main())
    close_shared(owner)
    assert closed == engines


def test_a_request_that_comes_while_a_batch_runs_starts_at_once_on_a_free_lane():
    """Two lanes: the second request does not wait for the first batch's end; it runs in lane 1's
    function, in a thread of its own, while lane 0's batch still runs. With every lane busy the
    arrivals gather into one batch, as with one lane."""
    first_running, release = threading.Event(), threading.Event()
    ran: list[tuple[int, list, str]] = []

    def lane(k):
        def run(batch):
            ran.append((k, list(batch), threading.current_thread().name))
            if batch == ["a"]:
                first_running.set()
                assert release.wait(10)
            return [f"{x}@{k}" for x in batch]

        return run

    async def main():
        batcher = Batcher([lane(0), lane(1)], max_batch=4, name="t")
        a = asyncio.ensure_future(batcher.submit("a"))
        await asyncio.get_running_loop().run_in_executor(None, first_running.wait, 10)
        b = await asyncio.wait_for(batcher.submit("b"), 10)  # lane 0 still holds "a"
        assert not a.done()
        held = asyncio.ensure_future(batcher.submit("c"))  # lane 1 free again: runs at once
        c = await asyncio.wait_for(held, 10)
        release.set()
        return await a, b, c, batcher.batch_sizes, batcher.batch_lanes

    a, b, c, sizes, lanes = asyncio.run(main())
    assert (a, b, c) == ("a@0", "b@1", "c@1")
    assert sizes == [1, 1, 1] and lanes == [0, 1, 1]
    assert {name.rsplit("_", 1)[0] for k, _, name in ran if k == 1} == {"fdb-t-1"}
    assert all(name.startswith("fdb-t-0") for k, _, name in ran if k == 0)


def test_with_every_lane_busy_arrivals_wait_and_gather_into_one_batch():
    release = threading.Event()
    started = threading.Semaphore(0)

    def run(batch):
        if batch[0] in ("a", "b"):
            started.release()
            assert release.wait(10)
        return list(batch)

    async def main():
        batcher = Batcher([run, run], max_batch=4, name="t")
        first = [asyncio.ensure_future(batcher.submit(x)) for x in "a"]
        await asyncio.sleep(0.05)
        first.append(asyncio.ensure_future(batcher.submit("b")))
        loop = asyncio.get_running_loop()
        for _ in range(2):
            assert await loop.run_in_executor(None, started.acquire, True, 10)
        later = [asyncio.ensure_future(batcher.submit(x)) for x in "cde"]
        await asyncio.sleep(0.05)
        assert not any(f.done() for f in later)  # both lanes busy: they wait
        release.set()
        return await asyncio.gather(*first, *later), batcher.batch_sizes

    results, sizes = asyncio.run(main())
    assert results == list("abcde") and sizes == [1, 1, 3]


def test_run_alone_waits_for_every_lane_and_no_batch_starts_meanwhile():
    events: list[str] = []
    release = threading.Event()

    def run(batch):
        events.append(f"start {batch[0]}")
        if batch[0] == "a":
            assert release.wait(10)
        events.append(f"end {batch[0]}")
        return list(batch)

    def alone():
        events.append("alone")
        return "done"

    async def main():
        batcher = Batcher([run, run], max_batch=4, name="t")
        a = asyncio.ensure_future(batcher.submit("a"))
        await asyncio.sleep(0.05)
        solo = asyncio.ensure_future(batcher.run_alone(alone))
        await asyncio.sleep(0.05)
        b = asyncio.ensure_future(batcher.submit("b"))  # a lane is free, but run_alone waits
        await asyncio.sleep(0.05)
        assert not solo.done() and not b.done()
        release.set()
        return await solo, await a, await b

    assert asyncio.run(main()) == ("done", "a", "b")
    assert events == ["start a", "end a", "alone", "start b", "end b"]


def test_a_failed_lane_fails_its_batch_only_and_the_lane_serves_again():
    def run(batch):
        if "bad" in batch:
            raise RuntimeError("lane broke")
        return list(batch)

    async def main():
        batcher = Batcher([run, run], max_batch=1, name="t")
        results = await asyncio.gather(
            *[batcher.submit(x) for x in ("bad", "ok", "also")], return_exceptions=True
        )
        return results, await batcher.submit("after")

    (bad, ok, also), after = asyncio.run(main())
    assert isinstance(bad, FdbError) and "a batch of 1 failed: RuntimeError: lane broke" in str(bad)
    assert (ok, also, after) == ("ok", "also", "after")


def test_stage_marks_log_each_batch_and_server_stages_sums_them(monkeypatch, caplog, tmp_path):
    """With stage_marks and FDB_STAGE_MARKS=1 one line a batch (rows, lane, the oldest and newest
    request's wait, run time), which benchmarks/server_stages.py reads back; none without either."""
    from benchmarks.server_stages import batches

    def run(batch):
        time.sleep(0.02)
        return list(batch)

    def lines(marks: bool, env: bool) -> list[str]:
        if env:
            monkeypatch.setenv("FDB_STAGE_MARKS", "1")
        else:
            monkeypatch.delenv("FDB_STAGE_MARKS", raising=False)
        caplog.clear()

        async def main():
            batcher = Batcher([run, run], max_batch=2, name="whisper_gpu", stage_marks=marks)
            await asyncio.gather(*[batcher.submit(i) for i in range(5)])

        with caplog.at_level("INFO", logger="fdb.serving"):
            asyncio.run(main())
        return [r.getMessage() for r in caplog.records if " batch " in r.getMessage()]

    assert lines(False, True) == [] and lines(True, False) == []
    found = lines(True, True)
    assert len(found) == 3  # 5 requests, batches of at most 2
    log = tmp_path / "server.log"
    log.write_text("".join(f"2026-12-06 INFO fdb.serving: {line}\n" for line in found))
    summary = batches(log)["whisper_gpu"]
    assert summary["rows"]["n"] == 3 and summary["rows"]["max"] == 2
    assert sum(summary["lanes"].values()) == 3 and set(summary["lanes"]) <= {"0", "1"}
    assert summary["ran"]["p50"] >= 15  # each batch sleeps 20 ms
    # the third batch waited for a lane: its oldest request waited about one batch
    assert summary["waited_oldest"]["max"] >= 15
    (tmp_path / "quiet.log").write_text("nothing here\n")
    assert batches(tmp_path / "quiet.log") is None


def test_a_batcher_needs_a_lane():
    with pytest.raises(ValueError):
        Batcher([], max_batch=1, name="t")


def test_a_batcher_serves_a_second_event_loop_after_the_first_ended_with_a_request_left():
    """The first loop ends while a request still waits (its caller left with the loop): the
    next loop's requests are served on every lane (found by a review: the lane stayed taken)."""
    for lanes in (1, 2):
        batcher = Batcher([lambda b: list(b)] * lanes, max_batch=4, name="t")

        async def first(batcher=batcher):
            asyncio.ensure_future(batcher.submit("left"))
            await asyncio.sleep(0)

        async def second(batcher=batcher):
            return await asyncio.wait_for(asyncio.gather(*[batcher.submit(x) for x in "bc"]), 5)

        asyncio.run(first())
        assert asyncio.run(second()) == ["b", "c"]
        batcher.close()


def test_run_alone_holds_every_lane_until_fn_ends_even_when_its_caller_leaves():
    """run_alone's caller cancelled while fn runs (a warm-up at a server's stop): no batch
    starts on any lane before fn's end; cancelled before fn starts: fn never runs and the lanes
    go on (found by a review: the lanes were handed back while fn still ran)."""
    log: list[str] = []
    lock = threading.Lock()
    fn_running, release = threading.Event(), threading.Event()

    def note(x):
        with lock:
            log.append(x)

    def run(batch):
        note(f"batch {batch[0]}")
        return list(batch)

    def capture():
        note("fn starts")
        fn_running.set()
        assert release.wait(10)
        note("fn ends")

    async def main():
        batcher = Batcher([run, run], max_batch=1, name="t")
        alone = asyncio.ensure_future(batcher.run_alone(capture))
        loop = asyncio.get_running_loop()
        assert await loop.run_in_executor(None, fn_running.wait, 10)
        alone.cancel()
        await asyncio.sleep(0.01)
        requests = asyncio.gather(batcher.submit("x"), batcher.submit("y"))
        await asyncio.sleep(0.1)
        assert not requests.done()  # both lanes held by fn, though its caller left
        release.set()
        got = await asyncio.wait_for(requests, 10)
        # a run_alone cancelled while queued behind a batch never runs its fn
        hold = threading.Event()
        batcher._runs[0] = lambda b: hold.wait(10) and list(b)
        busy = asyncio.ensure_future(batcher.submit("slow"))
        await asyncio.sleep(0.01)  # its batch started on lane 0
        queued = asyncio.ensure_future(batcher.run_alone(lambda: note("never")))
        await asyncio.sleep(0.05)
        queued.cancel()
        await asyncio.sleep(0.05)
        hold.set()
        after = await asyncio.wait_for(asyncio.gather(busy, batcher.submit("z")), 10)
        batcher.close()
        return got, after

    got, after = asyncio.run(main())
    assert got == ["x", "y"] and after[1] == "z"
    assert log[:2] == ["fn starts", "fn ends"] and sorted(log[2:4]) == ["batch x", "batch y"]
    assert "never" not in log


def test_close_fails_the_waiting_requests_and_every_later_one_with_one_line():
    release = threading.Event()

    def run(batch):
        assert release.wait(10)
        return list(batch)

    async def main():
        batcher = Batcher(run, max_batch=1, name="whisper_gpu")
        running = asyncio.ensure_future(batcher.submit("running"))
        await asyncio.sleep(0.01)  # its batch started
        waiting = asyncio.ensure_future(batcher.submit("waiting"))
        alone = asyncio.ensure_future(batcher.run_alone(lambda: "alone"))
        await asyncio.sleep(0.05)
        batcher.close()
        release.set()
        results = await asyncio.wait_for(
            asyncio.gather(running, waiting, alone, return_exceptions=True), 10
        )
        with pytest.raises(FdbError, match="whisper_gpu: the engine is closed"):
            await batcher.submit("later")
        return results

    running, waiting, alone = asyncio.run(main())
    assert running == "running"
    for failed in (waiting, alone):
        assert isinstance(failed, FdbError) and "\n" not in failed.one_line()
        assert "whisper_gpu: the engine is closed" in failed.one_line()


def test_run_alone_each_runs_fn_in_every_lanes_own_thread_in_turn_while_no_batch_runs():
    """``each``: fn(lane) in lane 0's thread, then lane 1's, then lane 2's (a lane's CUDA graphs
    are captured in its own thread: cuBLAS's workspace is per thread), no batch running
    meanwhile; the results in lane order. An error in a later lane's fn is raised, and the lanes
    serve again."""
    log: list[str] = []
    lock = threading.Lock()

    def note(x):
        with lock:
            log.append(x)

    def run(batch):
        note(f"batch {batch[0]}")
        time.sleep(0.02)
        note(f"end {batch[0]}")
        return list(batch)

    def each(lane):
        note(f"fn {lane} in {threading.current_thread().name.rsplit('_', 1)[0]}")
        time.sleep(0.02)
        return lane * 10

    def fails(lane):
        if lane == 1:
            raise RuntimeError("capture failed")
        return lane

    async def main():
        batcher = Batcher([run, run, run], max_batch=1, name="t")
        first = asyncio.ensure_future(batcher.submit("a"))
        await asyncio.sleep(0.005)
        results = asyncio.ensure_future(batcher.run_alone(each, each=True))
        await asyncio.sleep(0.005)
        later = asyncio.ensure_future(batcher.submit("b"))
        got = await asyncio.wait_for(results, 10)
        with pytest.raises(RuntimeError, match="capture failed"):
            await asyncio.wait_for(batcher.run_alone(fails, each=True), 10)
        after = await asyncio.wait_for(asyncio.gather(first, later, batcher.submit("c")), 10)
        batcher.close()
        return got, after

    got, after = asyncio.run(main())
    assert got == [0, 10, 20] and after == ["a", "b", "c"]
    fns = [x for x in log if x.startswith("fn")]
    assert fns == ["fn 0 in fdb-t-0", "fn 1 in fdb-t-1", "fn 2 in fdb-t-2"]
    # a ran before every fn; b only after the last
    assert log.index("end a") < log.index("fn 0 in fdb-t-0")
    assert log.index("fn 2 in fdb-t-2") < log.index("batch b")


@pytest.mark.parametrize("returned", [None, 7, "generator"])
def test_a_batch_that_gives_back_no_result_a_request_fails_with_one_line_and_the_next_runs(
    returned,
):
    """A batch function that returns None, a number (no length) or a generator: the first two
    fail every request of the batch with one line and the requests that came meanwhile still
    run; a generator's items are the results (found by a review: the callers waited forever)."""
    release = threading.Event()

    def run(batch):
        if batch == ["x"]:
            assert release.wait(10)
            return (r for r in batch) if returned == "generator" else returned
        return list(batch)

    async def main():
        batcher = Batcher(run, max_batch=1, name="t")
        first = asyncio.ensure_future(batcher.submit("x"))
        await asyncio.sleep(0.02)
        meanwhile = asyncio.ensure_future(batcher.submit("y"))
        await asyncio.sleep(0.02)
        release.set()
        got = await asyncio.wait_for(asyncio.gather(first, meanwhile, return_exceptions=True), 5)
        batcher.close()
        return got

    first, meanwhile = asyncio.run(main())
    assert meanwhile == "y"
    if returned == "generator":
        assert first == "x"
    else:
        assert isinstance(first, FdbError) and "\n" not in first.one_line()
        assert "t: a batch of 1 failed: TypeError" in first.one_line()


def test_after_run_alone_every_lane_takes_a_batch_at_once():
    """The parked lanes go on as soon as fn ends (found by a review: they waited up to one
    50 ms poll)."""
    started: dict[str, float] = {}

    def run(batch):
        started[batch[0]] = time.perf_counter()
        return list(batch)

    def alone():
        time.sleep(0.1)
        return time.perf_counter()

    async def main():
        batcher = Batcher([run, run], max_batch=1, name="t")
        lags = []
        for _ in range(3):  # a 50 ms poll would be caught at least once in three
            started.clear()
            ended = asyncio.ensure_future(batcher.run_alone(alone))
            await asyncio.sleep(0.02)
            got = await asyncio.wait_for(asyncio.gather(*[batcher.submit(x) for x in "ab"]), 5)
            assert got == ["a", "b"]
            lags.append(max(started.values()) - await ended)
        batcher.close()
        return lags

    assert max(asyncio.run(main())) < 0.03  # both lanes, at once


def test_in_lane_runs_fn_in_that_lanes_thread_from_anywhere_and_at_once_from_there():
    """``in_lane``: from the calling thread the function runs in the lane's own thread (queued
    behind its batches); from the lane's own thread (a batch, a run_alone ``each``) it runs at
    once, in place, without queueing behind itself. After close it fails with one line."""

    def where() -> str:
        return threading.current_thread().name.rsplit("_", 1)[0]

    batcher = Batcher([lambda b: list(b), lambda b: list(b)], max_batch=1, name="t")
    assert [batcher.in_lane(lane, where) for lane in (0, 1, 0)] == [
        "fdb-t-0",
        "fdb-t-1",
        "fdb-t-0",
    ]
    # inside lane 1's thread: in place (a queued call there would wait for itself forever)
    inner = batcher.in_lane(1, lambda: (where(), batcher.in_lane(1, where)))
    assert inner == ("fdb-t-1", "fdb-t-1")

    async def each():
        return await batcher.run_alone(lambda lane: batcher.in_lane(lane, where), each=True)

    assert asyncio.run(each()) == ["fdb-t-0", "fdb-t-1"]
    # another batcher's lane thread is not this one's
    other = Batcher([lambda b: list(b)], max_batch=1, name="u")
    assert other.in_lane(0, lambda: batcher.in_lane(0, where)) == "fdb-t-0"
    batcher.close()
    other.close()
    with pytest.raises(FdbError, match="t: the engine is closed"):
        batcher.in_lane(0, where)
