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
