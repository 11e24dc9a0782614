"""Batching across sessions, and the GPU models shared by the sessions of one server.

:class:`Batcher`: every session awaits :meth:`Batcher.submit`; what is waiting (up to
``max_batch``) is taken on the event loop once the requests submitted in the same loop iteration
are in, run as one call of the batch function in the batcher's own thread (one model call at a
time on the device) and each request's future gets its own result. No timer: while a batch runs,
the requests that arrive meanwhile gather for the next one, so batches grow with the load and a
lone request never waits. A failed batch fails each of its requests with one line naming the
batch; the batcher goes on with the next.
With ``lanes`` (one batch function a lane, each in a thread of its own) a request that arrives
while a batch runs starts the next batch at once on a free lane, beside the one running, instead
of waiting for its end; with every lane busy, arrivals gather as with one. With ``stage_marks``
and ``FDB_STAGE_MARKS=1`` each batch is logged with its rows, its lane, the wait of its oldest and
newest request and its run time (``benchmarks/server_stages.py`` sums these lines).

:func:`shared` loads one engine per key (weights, device, dtype …) for the whole server: the
first session's node loads it in a worker thread, the others wait for that load.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Generic, TypeVar

from fdb.errors import FdbError
from fdb.models import BackendIdentity

log = logging.getLogger("fdb.serving")
Req = TypeVar("Req")
Res = TypeVar("Res")


class Batcher(Generic[Req, Res]):
    """Queues requests from every session and runs them as batches of at most ``max_batch``.

    ``run_batch(requests) -> results`` is blocking (it runs in the batcher's thread) and returns
    one result per request, in order; a sequence of such functions is one lane each (a thread
    each, so one batch a lane at a time): lane ``i`` runs its batches with ``run_batch[i]``.
    ``name`` labels errors, logs and the threads; ``stage_marks``: log each batch under
    ``FDB_STAGE_MARKS=1`` (not for a batcher of every 32 ms frame).

    The lanes' threads are the batcher's only state that outlives an event loop: what a loop
    left (its waiting requests, the lanes it saw busy) is dropped when another loop submits.
    After :meth:`close` every request, waiting or new, fails with one line."""

    def __init__(
        self,
        run_batch: Callable[[Sequence[Req]], Sequence[Res]]
        | Sequence[Callable[[Sequence[Req]], Sequence[Res]]],
        max_batch: int,
        name: str,
        stage_marks: bool = False,
    ):
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        runs = list(run_batch) if isinstance(run_batch, Sequence) else [run_batch]
        if not runs:
            raise ValueError("a batcher needs at least one lane")
        self._runs, self.max_batch, self.name = runs, max_batch, name
        self.lanes = len(runs)
        self._local = threading.local()  # in a lane's thread: .lane, that lane's index
        self._threads = [
            ThreadPoolExecutor(
                1,
                thread_name_prefix=f"fdb-{name}-{lane}",
                initializer=self._enter_lane,
                initargs=(lane,),
            )
            for lane in range(self.lanes)
        ]
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiting: list[tuple[Req, asyncio.Future, float]] = []
        self._free: list[int] = list(range(self.lanes))  # lanes with no batch of this loop's
        self._scheduled = False  # a _schedule is queued on the loop
        self._closed = False
        # run_alone's submissions to the lanes, one call at a time (two event loops' calls
        # interleaved would each park a lane the other's function waits for)
        self._submitting = threading.Lock()
        self._marks = stage_marks and os.environ.get("FDB_STAGE_MARKS") == "1"
        self.batch_sizes: list[int] = []  # every batch run so far (for logs, benchmarks and tests)
        self.batch_lanes: list[int] = []  # the lane of each, in the same order

    def _enter_lane(self, lane: int) -> None:
        self._local.lane = lane

    def in_lane(self, lane: int, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` in ``lane``'s own thread, blocking: at once when called there, else
        queued behind the lane's batches. What a lane holds per thread (its CUDA graphs were
        captured there, with that thread's cuBLAS handle) is then only ever used from one
        thread, however the caller came (a test or a benchmark calling a lane directly). Not
        from another lane's thread during :meth:`run_alone`, whose other lanes are parked."""
        if getattr(self._local, "lane", None) == lane:
            return fn(*args)
        try:
            queued = self._threads[lane].submit(fn, *args)
        except RuntimeError:  # the lane's executor is shut down
            raise self._closed_error() from None
        return queued.result()

    async def submit(self, request: Req) -> Res:
        """``request``'s result, computed in a batch with whatever else is waiting."""
        loop = self._bound()
        future = loop.create_future()
        self._waiting.append((request, future, time.perf_counter()))
        if not self._scheduled:  # after the other submits of this iteration: one batch
            self._scheduled = True
            loop.call_soon(self._schedule)
        return await future

    async def run_alone(self, fn: Callable[..., Any], each: bool = False) -> Any:
        """``fn()`` in lane 0's thread while no batch runs on any lane (e.g. capturing CUDA
        graphs, which no other kernel may interleave): the batches already running end first,
        and those that start later wait for ``fn``'s end. Every other lane's thread is parked
        for it, so this holds even if the caller stops waiting while ``fn`` runs.

        ``each``: ``fn(lane)`` in every lane's own thread in turn, lane 0 first, under the same
        hold; returns their results in lane order. A lane's CUDA graphs must be captured in its
        own thread: cuBLAS keeps a workspace per thread's handle and stream, and graphs captured
        in one thread share it, so two lanes replaying at once would write over each other's
        (measured on an H100 by a review: about half of such concurrent replays were wrong)."""
        loop = self._bound()
        gate = threading.Event()  # set when fn is done (or will never run): the lanes go on
        parked = [threading.Event() for _ in range(self.lanes - 1)]
        turns = [threading.Event() for _ in range(self.lanes - 1)]  # each: run fn(lane) now
        finished: list[tuple[bool, Any]] = []  # each lane's (ok, result or error), in turn
        state = {"job": "queued"}  # queued -> running, or queued -> dropped (its caller left)
        lock = threading.Lock()

        def wait(event: threading.Event) -> bool:
            """Whether ``event`` came (False: the gate opened or the batcher closed first)."""
            while not event.wait(0.05):
                if self._closed or gate.is_set():
                    return False
            return True

        def release() -> None:
            """The gate opens, and every parked lane waiting for a turn sees it at once."""
            gate.set()
            for turn in turns:
                turn.set()

        def park(lane: int) -> None:
            parked[lane - 1].set()
            if wait(turns[lane - 1]) and not gate.is_set():
                try:
                    finished.append((True, fn(lane)))
                except BaseException as exc:  # noqa: BLE001 - handed to lane 0, which raises it
                    finished.append((False, exc))
                finally:
                    parked[lane - 1].set()  # done (lane 0 cleared it for this turn): it goes on
            wait(gate)  # until fn is done (or the batcher closes)

        def alone() -> Any:
            with lock:
                if state["job"] == "dropped":
                    return None
                state["job"] = "running"
            try:
                for event in parked:
                    if not wait(event):
                        raise self._closed_error()
                if not each:
                    return fn()
                results = [fn(0)]
                for lane in range(1, self.lanes):
                    done = parked[lane - 1]
                    done.clear()
                    turns[lane - 1].set()
                    if not wait(done):
                        raise self._closed_error()
                    ok, value = finished[-1]
                    if not ok:
                        raise value
                    results.append(value)
                return results
            finally:
                release()

        try:
            with self._submitting:  # a park on every lane, then alone: no other run_alone between
                for lane in range(1, self.lanes):
                    self._threads[lane].submit(park, lane)
                work = loop.run_in_executor(self._threads[0], alone)
        except RuntimeError as err:  # an executor shut down: closed
            release()
            raise self._closed_error() from err
        try:
            return await work
        except asyncio.CancelledError:
            with lock:  # not started: it never will, and the parked lanes go on now
                if state["job"] == "queued":
                    state["job"] = "dropped"
                    release()
            task = asyncio.current_task()
            if self._closed and not (task is not None and task.cancelling()):
                raise self._closed_error() from None  # not started before the close
            raise

    def close(self) -> None:
        """Stop: the batches running end, those not started and every request waiting fail."""
        self._closed = True
        for thread in self._threads:
            thread.shutdown(wait=False, cancel_futures=True)
        waiting, self._waiting = self._waiting, []
        loop = self._loop
        if waiting and loop is not None and not loop.is_closed():
            error = self._closed_error()
            for _, future, _ in waiting:
                loop.call_soon_threadsafe(_fail, future, error)

    def _closed_error(self) -> FdbError:
        return FdbError(f"{self.name}: the engine is closed", "the server is stopping")

    def _bound(self) -> asyncio.AbstractEventLoop:
        """The running loop, after what another loop left is dropped; refused once closed."""
        if self._closed:
            raise self._closed_error()
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            # a lane's thread may still run a batch of the old loop: the next one queues behind
            self._loop, self._waiting, self._scheduled = loop, [], False
            self._free = list(range(self.lanes))
        return loop

    def _schedule(self) -> None:
        """A batch on each free lane while requests wait."""
        self._scheduled = False
        while self._waiting and self._free and not self._closed:
            batch = self._take()
            if batch:
                self._start(batch, self._free.pop(0))

    def _take(self) -> list[tuple[Req, asyncio.Future, float]]:
        """Up to max_batch waiting requests whose caller still waits (a cancelled one is
        dropped)."""
        live = [w for w in self._waiting if not w[1].done()]
        batch, self._waiting = live[: self.max_batch], live[self.max_batch :]
        return batch

    def _start(self, batch: list[tuple[Req, asyncio.Future, float]], lane: int) -> None:
        """``batch`` on ``lane``'s thread; its requests are answered, and the lane is free
        again, when it is done (:meth:`_done`)."""
        self.batch_sizes.append(len(batch))
        self.batch_lanes.append(lane)
        started = time.perf_counter()
        loop = self._loop
        try:
            work = loop.run_in_executor(
                self._threads[lane], self._runs[lane], [r for r, _, _ in batch]
            )
        except RuntimeError:  # the lane's executor is shut down: closed
            work = loop.create_future()
            work.cancel()
        work.add_done_callback(lambda done: self._done(loop, batch, lane, started, done))

    def _done(
        self,
        loop: asyncio.AbstractEventLoop,
        batch: list[tuple[Req, asyncio.Future, float]],
        lane: int,
        started: float,
        work: asyncio.Future,
    ) -> None:
        if self._marks:
            self._mark(batch, lane, started)
        if loop is self._loop:  # else a later loop has counted every lane free already
            self._free = sorted(self._free + [lane])
        try:
            self._answer(batch, work)
        finally:  # whatever the batch gave back, the requests waiting go on
            if loop is self._loop:
                self._schedule()

    def _answer(self, batch: list[tuple[Req, asyncio.Future, float]], work: asyncio.Future):
        """Each request of ``batch`` its result, or every one the batch's one-line error: the
        function raised, or gave back something that is not one result a request."""
        if work.cancelled():
            for _, future, _ in batch:
                _fail(future, self._closed_error())
            return
        try:
            results = list(work.result())  # raises the batch's own error
            if len(results) != len(batch):
                raise RuntimeError(f"{len(results)} results for {len(batch)} requests")
        except Exception as err:  # every request of the batch gets it, the batcher goes on
            error = FdbError(
                f"{self.name}: a batch of {len(batch)} failed: {type(err).__name__}: "
                f"{str(err).splitlines()[0] if str(err) else 'no message'}",
                "see the server log; the session's later requests are tried again",
            )
            for _, future, _ in batch:
                _fail(future, error)
            return
        for (_, future, _), result in zip(batch, results, strict=True):
            if not future.done():
                future.set_result(result)

    def _mark(self, batch: list[tuple[Req, asyncio.Future, float]], lane: int, started: float):
        """The stage-mark line of a batch: its rows, lane, the oldest and newest request's wait
        (from its submit to the batch's start) and its run time."""
        done = time.perf_counter()
        log.info(
            "%s batch %.6f: %d rows, lane %d, waited %.1f ms oldest, %.1f ms newest, ran %.1f ms",
            self.name,
            time.time(),
            len(batch),
            lane,
            (started - batch[0][2]) * 1000,
            (started - batch[-1][2]) * 1000,
            (done - started) * 1000,
        )


def _fail(future: asyncio.Future, error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)


_LOCK = threading.Lock()


async def shared(owner: Any, key: tuple, build: Callable[[], Any], run: Callable[..., Any]) -> Any:
    """The engine ``build()`` makes for ``key``, one per ``owner`` (the server's shared models),
    built once through ``run`` (the owner's blocking-call runner) however many sessions ask at
    once."""
    with _LOCK:
        engines = owner.__dict__.setdefault("_gpu_engines", {})
        slot = engines.setdefault(key, {"lock": threading.Lock(), "engine": None})

    def load() -> Any:
        with slot["lock"]:
            if slot["engine"] is None:
                slot["engine"] = build()
            return slot["engine"]

    if slot["engine"] is not None:
        return slot["engine"]
    return await run(load)


def close_shared(owner: Any) -> None:
    """Close every engine :func:`shared` built for ``owner`` (at the server's stop)."""
    for slot in owner.__dict__.get("_gpu_engines", {}).values():
        engine = slot["engine"]
        if engine is not None and hasattr(engine, "close"):
            engine.close()


def identity(kind: str, role: str, source: Any, settings: dict[str, Any]):
    """What a GPU engine reports for ``role`` (``fdb.models.BackendIdentity``): the node kind, the
    preset, and the weights' label, so a number from dummy weights always says so."""

    name = f"{kind}/{source.preset or 'checkpoint'}" + (" (dummy weights)" if source.dummy else "")
    return BackendIdentity(
        kind=role,
        name=name,
        version=importlib.metadata.version("transformers"),
        checkpoint=None if source.dummy else source.path,
        checkpoint_sha256=None if source.dummy else source.sha256,
        settings={"weights": source.label(), **settings},
    )


def identities(owner: Any) -> dict[str, dict[str, Any]]:
    """role -> identity (JSON) of every engine :func:`shared` built for ``owner``."""
    found = {}
    for slot in owner.__dict__.get("_gpu_engines", {}).values():
        engine = slot["engine"]
        if engine is not None and hasattr(engine, "identity"):
            found[engine.identity.kind] = engine.identity.model_dump(mode="json")
    return found
