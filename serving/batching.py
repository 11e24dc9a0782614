"""Batching across sessions, and the GPU models shared by the sessions of one server.

:class:`Batcher`: every session awaits :meth:`Batcher.submit`; a single task on the event loop
takes what is waiting (up to ``max_batch``), runs it as one call of the batch function in the
batcher's own thread (one model call at a time on the device) and resolves each request's future
with its own result. No timer: while a batch runs, the requests that arrive meanwhile gather
for the next one, so batches grow with the load and a lone request never waits. A failed batch
fails each of its requests with one line naming the batch; the batcher goes on with the next.

:func:`shared` loads one engine per key (weights, device, dtype …) for the whole server: the
first session's node loads it in a worker thread, the others wait for that load.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Generic, TypeVar

from fdb.errors import FdbError
from fdb.models import BackendIdentity

Req = TypeVar("Req")
Res = TypeVar("Res")


class Batcher(Generic[Req, Res]):
    """Queues requests from every session and runs them as batches of at most ``max_batch``.

    ``run_batch(requests) -> results`` is blocking (it runs in the batcher's thread) and returns
    one result per request, in order. ``name`` labels errors and the thread."""

    def __init__(
        self, run_batch: Callable[[Sequence[Req]], Sequence[Res]], max_batch: int, name: str
    ):
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        self._run_batch, self.max_batch, self.name = run_batch, max_batch, name
        self._waiting: list[tuple[Req, asyncio.Future]] = []
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self._thread = ThreadPoolExecutor(1, thread_name_prefix=f"fdb-{name}")
        self.batch_sizes: list[int] = []  # every batch run so far (for logs, benchmarks and tests)

    async def submit(self, request: Req) -> Res:
        """``request``'s result, computed in a batch with whatever else is waiting."""
        future = asyncio.get_running_loop().create_future()
        self._waiting.append((request, future))
        self._ensure_running()
        self._wake.set()
        return await future

    async def run_alone(self, fn: Callable[[], Res]) -> Res:
        """``fn()`` in the batcher's thread, so that no batch runs meanwhile (e.g. capturing CUDA
        graphs, which no other kernel may interleave)."""
        return await asyncio.get_running_loop().run_in_executor(self._thread, fn)

    def _ensure_running(self) -> None:
        loop = asyncio.get_running_loop()
        if self._task is None or self._task.done() or self._task.get_loop() is not loop:
            self._wake = asyncio.Event()
            self._task = loop.create_task(self._loop(), name=f"fdb-{self.name}-batcher")

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._waiting:
                batch = self._take()
                if batch:
                    await self._run(loop, batch)

    def _take(self) -> list[tuple[Req, asyncio.Future]]:
        """Up to max_batch waiting requests whose caller still waits (a cancelled one is
        dropped)."""
        live = [(r, f) for r, f in self._waiting if not f.done()]
        batch, self._waiting = live[: self.max_batch], live[self.max_batch :]
        return batch

    async def _run(
        self, loop: asyncio.AbstractEventLoop, batch: list[tuple[Req, asyncio.Future]]
    ) -> None:
        self.batch_sizes.append(len(batch))
        try:
            results = await loop.run_in_executor(
                self._thread, self._run_batch, [r for r, _ in batch]
            )
            if len(results) != len(batch):
                raise RuntimeError(f"{len(results)} results for {len(batch)} requests")
        except Exception as err:  # every request of the batch gets it, the batcher goes on
            error = FdbError(
                f"{self.name}: a batch of {len(batch)} failed: {type(err).__name__}: "
                f"{str(err).splitlines()[0] if str(err) else 'no message'}",
                "see the server log; the session's later requests are tried again",
            )
            for _, future in batch:
                if not future.done():
                    future.set_exception(error)
            return
        for (_, future), result in zip(batch, results, strict=True):
            if not future.done():
                future.set_result(result)

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        self._thread.shutdown(wait=False, cancel_futures=True)


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
