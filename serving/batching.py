"""Batching across sessions, and the GPU models shared by the sessions of one server.

:class:`Batcher`: every session awaits :meth:`Batcher.submit`; a single task on the event loop
takes what is waiting (up to ``max_batch``), runs it as one call of the batch function in the
batcher's own thread (one model call at a time on the device) and resolves each request's future
with its own result. No timer: while a batch runs, the requests that arrive meanwhile gather
for the next one, so batches grow with the load and a lone request never waits. A failed batch
fails each of its requests with one line naming the batch; the batcher goes on with the next.
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
    each, one batch a lane at a time): lane ``i`` runs its batches with ``run_batch[i]``.
    ``name`` labels errors, logs and the threads; ``stage_marks``: log each batch under
    ``FDB_STAGE_MARKS=1`` (not for a batcher of every 32 ms frame)."""

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
        self._waiting: list[tuple[Req, asyncio.Future, float]] = []
        self._wake: asyncio.Event | None = None
        self._freed: asyncio.Event | None = None  # set as a lane comes free
        self._alone: asyncio.Lock | None = None
        self._task: asyncio.Task | None = None
        self._free: list[int] = list(range(self.lanes))  # lanes with no batch running
        self._running: set[asyncio.Task] = set()
        self._reserving = 0  # run_alone calls taking every lane: no batch starts meanwhile
        self._threads = [
            ThreadPoolExecutor(1, thread_name_prefix=f"fdb-{name}-{lane}")
            for lane in range(self.lanes)
        ]
        self._marks = stage_marks and os.environ.get("FDB_STAGE_MARKS") == "1"
        self.batch_sizes: list[int] = []  # every batch run so far (for logs, benchmarks and tests)
        self.batch_lanes: list[int] = []  # the lane of each, in the same order

    async def submit(self, request: Req) -> Res:
        """``request``'s result, computed in a batch with whatever else is waiting."""
        future = asyncio.get_running_loop().create_future()
        self._waiting.append((request, future, time.perf_counter()))
        self._ensure_running()
        self._wake.set()
        return await future

    async def run_alone(self, fn: Callable[[], Res]) -> Res:
        """``fn()`` in lane 0's thread while no batch runs on any lane (e.g. capturing CUDA
        graphs, which no other kernel may interleave): it waits for the batches running to end,
        and the batches waiting start after it."""
        self._ensure_running()
        async with self._alone:  # one at a time: two would each hold a part of the lanes
            self._reserving += 1
            taken: list[int] = []
            try:
                while len(taken) < self.lanes:
                    if self._free:
                        taken.append(self._free.pop(0))
                        continue
                    self._freed.clear()
                    await self._freed.wait()
                return await asyncio.get_running_loop().run_in_executor(self._threads[0], fn)
            finally:
                self._reserving -= 1
                self._release(*taken)

    def _release(self, *lanes: int) -> None:
        self._free = sorted(self._free + list(lanes))
        self._freed.set()
        self._wake.set()

    def _ensure_running(self) -> None:
        loop = asyncio.get_running_loop()
        if self._task is None or self._task.done() or self._task.get_loop() is not loop:
            self._wake, self._freed, self._alone = asyncio.Event(), asyncio.Event(), asyncio.Lock()
            self._task = loop.create_task(self._loop(), name=f"fdb-{self.name}-batcher")

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._waiting and self._free and not self._reserving:
                batch = self._take()
                if batch:
                    lane = self._free.pop(0)
                    task = loop.create_task(self._run(loop, batch, lane))
                    self._running.add(task)
                    task.add_done_callback(self._running.discard)

    def _take(self) -> list[tuple[Req, asyncio.Future, float]]:
        """Up to max_batch waiting requests whose caller still waits (a cancelled one is
        dropped)."""
        live = [w for w in self._waiting if not w[1].done()]
        batch, self._waiting = live[: self.max_batch], live[self.max_batch :]
        return batch

    async def _run(
        self,
        loop: asyncio.AbstractEventLoop,
        batch: list[tuple[Req, asyncio.Future, float]],
        lane: int,
    ) -> None:
        self.batch_sizes.append(len(batch))
        self.batch_lanes.append(lane)
        started = time.perf_counter()
        try:
            results = await loop.run_in_executor(
                self._threads[lane], self._runs[lane], [r for r, _, _ in batch]
            )
            if len(results) != len(batch):
                raise RuntimeError(f"{len(results)} results for {len(batch)} requests")
        except Exception as err:  # every request of the batch gets it, the batcher goes on
            error = FdbError(
                f"{self.name}: a batch of {len(batch)} failed: {type(err).__name__}: "
                f"{str(err).splitlines()[0] if str(err) else 'no message'}",
                "see the server log; the session's later requests are tried again",
            )
            for _, future, _ in batch:
                if not future.done():
                    future.set_exception(error)
            return
        finally:
            self._release(lane)
            if self._marks:
                self._mark(batch, lane, started)
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

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        for thread in self._threads:
            thread.shutdown(wait=False, cancel_futures=True)


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
