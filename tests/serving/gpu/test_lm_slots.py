"""The slot-cache decode loop (``serving.gpu.lm_slots``) on CPU with a tiny random Qwen3 in
float32: each reply's greedy tokens equal transformers' ``generate`` of its prompt alone, however
the replies were admitted (together, one after another while others decode, across length
buckets), with the fused layers and with the modules' operations, with the next step launched
before the last one's tokens are read (``overlap``) and without; an end token ends a reply, and
the slot it frees serves the next request while the step launched ahead for it is still read;
leaving a stream frees its slot; closing fails every waiting request; a prompt that cannot fit
is one line."""

from __future__ import annotations

import asyncio
import threading

import pytest

from tests.serving.gpu.conftest import TINY_QWEN

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from fdb.errors import FdbError  # noqa: E402
from serving.gpu.lm_slots import SlotLmEngine, length_bucket  # noqa: E402
from serving.weights import WeightSource, load_model  # noqa: E402

TINY = {**TINY_QWEN, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}
NEW = 12


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(3)
    source = WeightSource(load_format="dummy", preset="qwen3-4b", overrides=TINY)
    model = load_model(source, "causal_lm_gpu", "cpu", "float32")
    with torch.no_grad():  # wider than the default init, so that greedy choices vary
        for p in model.parameters():
            p.normal_(0, 0.5)
    return model


def _prompt(length: int, seed: int) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, TINY["vocab_size"], (length,), generator=g).tolist()


def _generate(model, ids: list[int], new: int = NEW) -> list[int]:
    with torch.inference_mode():
        out = model.generate(
            torch.tensor([ids]),
            max_new_tokens=new,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=0,
        )
    return out[0, len(ids) :].tolist()


async def _reply(engine, ids, new=NEW, started: asyncio.Event | None = None, leave_after=None):
    tokens = []
    async for token in engine.stream(ids, new):
        tokens.append(token)
        if started is not None and len(tokens) == 2:
            started.set()
        if leave_after is not None and len(tokens) == leave_after:
            break
    return tokens


@pytest.mark.parametrize(
    "fuse, prefill_lengths, overlap",
    [(True, None, True), (False, None, True), (True, (8, 64, 256), True), (True, None, False)],
)
def test_replies_equal_generate_however_they_were_admitted(model, fuse, prefill_lengths, overlap):
    """(True, (8, 64, 256)): the prompts that fit a length are prefilled alone, right-padded to
    it (what CUDA runs as one graph a length, ``serving.gpu.slots.PaddedPrefill``); the 300-token
    one takes the eager pass."""
    engine = SlotLmEngine(
        model,
        max_batch=4,
        max_len=600,
        temperature=0.0,
        fuse=fuse,
        prefill_lengths=prefill_lengths,
        overlap=overlap,
    )
    assert engine.padded.lengths == tuple(prefill_lengths or ())  # on CPU none unless asked
    # lengths across the length buckets (256, 512, 600); the long one crosses 256 while decoding
    prompts = [_prompt(n, seed) for seed, n in enumerate((5, 40, 250, 300, 17))]

    async def main():
        first = asyncio.Event()
        early = [asyncio.ensure_future(_reply(engine, p, started=first)) for p in prompts[:2]]
        await first.wait()  # the others join while the first two decode
        late = [asyncio.ensure_future(_reply(engine, p)) for p in prompts[2:]]
        return await asyncio.gather(*early, *late)

    try:
        replies = asyncio.run(main())
    finally:
        engine.close()
    assert replies == [_generate(model, p) for p in prompts]
    assert engine.prefills == 5 and all(r is None for r in engine._slots)
    if prefill_lengths:
        assert sorted(engine.padded._passes) == [8, 64, 256]
    assert engine.steps < 5 * NEW  # replies shared steps


@pytest.mark.parametrize("overlap", [True, False])
def test_an_end_token_ends_the_reply_and_leaving_frees_the_slot(model, overlap):
    """Each reply alone, one after another: each new one starts in the row the last one left
    (the loop idle between them), and takes its own prompt's token, not the row's last."""
    ids = _prompt(9, 11)
    free = _generate(model, ids)
    k = next(i for i in range(1, NEW) if free[i] not in free[:i])
    engine = SlotLmEngine(
        model, max_batch=2, max_len=64, temperature=0.0, eos=[free[k]], overlap=overlap
    )

    async def main():
        ended = await _reply(engine, ids)
        left = await _reply(engine, _prompt(7, 12), leave_after=2)
        await asyncio.sleep(0.2)
        after = await _reply(engine, _prompt(7, 13))
        return ended, left, after

    try:
        ended, left, after = asyncio.run(main())
    finally:
        engine.close()
    assert ended == free[:k]
    assert len(left) == 2 and all(r is None for r in engine._slots)
    want = _generate(model, _prompt(7, 13))
    stop = next((i for i, t in enumerate(want) if t == free[k]), len(want))
    assert after == want[:stop]


@pytest.mark.parametrize("overlap", [True, False])
def test_a_slot_freed_by_an_end_token_serves_the_next_request(model, overlap):
    """One slot: the second request waits for the first, which ends at an end token while the
    step launched ahead for it runs; that step's token is never read, and the second reply,
    prefilled into the same row behind it, equals ``generate``."""
    first, second = _prompt(9, 11), _prompt(6, 14)
    free = _generate(model, first)
    k = next(i for i in range(1, NEW) if free[i] not in free[:i])
    engine = SlotLmEngine(
        model, max_batch=1, max_len=64, temperature=0.0, eos=[free[k]], overlap=overlap
    )

    async def main():
        return await asyncio.gather(_reply(engine, first), _reply(engine, second))

    try:
        ended, after = asyncio.run(main())
    finally:
        engine.close()
    assert ended == free[:k]
    want = _generate(model, second)
    stop = next((i for i, t in enumerate(want) if t == free[k]), len(want))
    assert after == want[:stop] and all(r is None for r in engine._slots)


@pytest.mark.parametrize("overlap", [True, False])
def test_a_long_reply_that_ends_beside_a_short_one_stays_inside_the_length_bucket(model, overlap):
    """A 300-token prompt's reply ends (its max_new_tokens) while a 5-token one goes on: the
    next steps attend 256 positions, and the ended row, computed stale in them before it is read,
    must not write at its old position past them."""
    engine = SlotLmEngine(model, max_batch=2, max_len=600, temperature=0.0, overlap=overlap)
    long, short = _prompt(300, 40), _prompt(5, 41)

    async def main():
        return await asyncio.gather(_reply(engine, long, new=2), _reply(engine, short))

    try:
        got = asyncio.run(main())
    finally:
        engine.close()
    assert got == [_generate(model, long, 2), _generate(model, short)]


@pytest.mark.parametrize("overlap", [True, False])
def test_the_next_step_is_launched_before_the_tokens_are_read(model, overlap):
    """With overlap, step k+1 is launched before step k's tokens are handed out (the GPU runs it
    while the thread delivers); without, each step's tokens are read before the next launch.
    A reply of NEW tokens takes NEW steps either way."""
    engine = SlotLmEngine(model, max_batch=2, max_len=64, temperature=0.0, overlap=overlap)
    order: list[str] = []
    replay, deliver = engine._replay, engine._deliver

    def replayed(n, length):
        order.append("launch")
        replay(n, length)

    def delivered(*args):
        order.append("read")
        deliver(*args)

    engine._replay, engine._deliver = replayed, delivered
    try:
        reply = asyncio.run(_reply(engine, _prompt(5, 30)))
    finally:
        engine.close()
    assert reply == _generate(model, _prompt(5, 30))
    assert order.count("launch") == NEW == order.count("read")
    if overlap:
        assert order == ["launch"] + ["launch", "read"] * (NEW - 1) + ["read"]
    else:
        assert order == ["launch", "read"] * NEW


@pytest.mark.parametrize("overlap", [True, False])
def test_a_request_that_comes_during_a_step_is_in_the_next_step(model, overlap):
    """A request that comes while a step runs, after that step's admissions, is admitted before
    the next step is launched, and that step takes its first token (admitted after the launch,
    its first token would wait a step more). Its reply is still its prompt's alone."""
    engine = SlotLmEngine(model, max_batch=2, max_len=128, temperature=0.0, overlap=overlap)
    deliver, launch = engine._deliver, engine._launch
    armed, in_step, submitted = threading.Event(), threading.Event(), threading.Event()
    launched: list[list[int]] = []  # each step's rows' prompt lengths, from the held step on
    busy, late = _prompt(5, 40), _prompt(9, 41)

    def held_deliver(*step):
        if armed.is_set() and not in_step.is_set():
            in_step.set()  # this step's admissions are over: the request comes now
            assert submitted.wait(30)
        return deliver(*step)

    def logged_launch(rows):
        if in_step.is_set():
            launched.append([len(engine._slots[i].ids) for i in rows])
        return launch(rows)

    engine._deliver, engine._launch = held_deliver, logged_launch

    async def main():
        started = asyncio.Event()
        first = asyncio.ensure_future(_reply(engine, busy, new=40, started=started))
        await started.wait()
        armed.set()
        assert await asyncio.to_thread(in_step.wait, 30)
        second = asyncio.ensure_future(_reply(engine, late))
        while engine._pending.qsize() == 0:
            await asyncio.sleep(0.001)
        submitted.set()
        return await asyncio.gather(first, second)

    try:
        replies = asyncio.run(main())
    finally:
        engine.close()
    assert replies == [_generate(model, busy, 40), _generate(model, late)]
    assert len(late) in launched[0]  # the very next step
    assert all(r is None for r in engine._slots)


@pytest.mark.parametrize("overlap", [True, False])
@pytest.mark.parametrize("how", ["left after its admission", "asked for no token"])
def test_a_request_that_launches_no_step_in_a_slot_still_read_stays_inside_the_bucket(
    model, overlap, how
):
    """A ends at an end token while C goes on, so A's slot is in the step launched ahead and not
    yet read; B (a 300-token prompt) is admitted into that slot before the next launch and then
    launches no step (its caller left at once, or it asked for no token). The next step computes
    B's row stale: it must be back at position 0, inside the step's 256-position bucket (found by
    a review: it was left at 299, and the step failed for every reply in flight)."""
    a, c, b = _prompt(9, 11), _prompt(5, 41), _prompt(300, 40)
    full_a, full_c = _generate(model, a, 12), _generate(model, c, 40)
    k = next(i for i in range(1, 12) if full_a[i] not in full_a[:i])
    eos = full_a[k]
    assert eos not in full_c[:20]  # C goes on past A's end
    engine = SlotLmEngine(
        model, max_batch=2, max_len=600, temperature=0.0, eos=[eos], overlap=overlap
    )
    start = engine._start

    def started(request, slot, ids):
        start(request, slot, ids)
        if how == "left after its admission" and len(ids) == 300:
            request.cancelled = True  # its caller leaves just after its admission

    engine._start = started

    async def main():
        first = asyncio.ensure_future(_reply(engine, a, 12))
        await asyncio.sleep(0)
        going_on = asyncio.ensure_future(_reply(engine, c, 20))
        await asyncio.sleep(0)
        late = asyncio.ensure_future(_reply(engine, b, 0 if how == "asked for no token" else 5))
        return await asyncio.gather(first, going_on, late)

    try:
        got_a, got_c, got_b = asyncio.run(main())
    finally:
        engine.close()
    assert got_a == full_a[:k] and got_c == full_c[:20]
    assert got_b == [] and all(r is None for r in engine._slots)


def test_closing_fails_waiting_requests_and_a_long_prompt_is_refused(model):
    engine = SlotLmEngine(model, max_batch=1, max_len=1100, temperature=0.0)

    async def main():
        with pytest.raises(FdbError, match="more than the 1100 a slot holds"):
            await _reply(engine, _prompt(1095, 1), new=10)
        started = asyncio.Event()
        busy = asyncio.ensure_future(_reply(engine, _prompt(5, 2), new=1000, started=started))
        waiting = asyncio.ensure_future(_reply(engine, _prompt(5, 3), new=5))
        await started.wait()  # the one slot decodes; the other request waits for it
        await asyncio.get_running_loop().run_in_executor(None, engine.close)
        return await asyncio.gather(busy, waiting, return_exceptions=True)

    results = asyncio.run(main())
    assert all(
        isinstance(r, FdbError) and "the decode loop takes no requests" in str(r) for r in results
    ), results


def test_sampling_draws_among_the_likely_tokens(model):
    engine = SlotLmEngine(model, max_batch=2, max_len=64, temperature=1.0)
    try:
        reply = asyncio.run(_reply(engine, _prompt(6, 4)))
    finally:
        engine.close()
    assert len(reply) == NEW and all(0 <= t < TINY["vocab_size"] for t in reply)
    assert [length_bucket(p, 600) for p in (1, 256, 257, 513, 600)] == [256, 256, 512, 600, 600]


def test_waiting_requests_are_prefilled_in_one_pass(model):
    """Three waiting requests of different lengths: one pass of the layers writes every prompt's
    keys and values into its own slot, as three single passes would."""
    from serving.gpu.lm_slots import _Request

    def admitted(prompts, one_by_one: bool) -> SlotLmEngine:
        engine = SlotLmEngine(model, max_batch=4, max_len=64, temperature=0.0)
        engine.close()  # the loop stops: admission runs here, by hand
        for p in prompts:
            engine._pending.put(_Request(p, 4))
            if one_by_one:
                engine._admit()
        engine._admit()
        return engine

    prompts = [_prompt(n, 20 + n) for n in (3, 11, 6)]
    together, alone = admitted(prompts, False), admitted(prompts, True)
    assert (together.prefills, together.prefill_passes) == (3, 1)
    assert (alone.prefills, alone.prefill_passes) == (3, 3)
    assert together.pos[:3].tolist() == [2, 10, 5] == alone.pos[:3].tolist()
    for k_together, k_alone in zip(together.cache.k, alone.cache.k, strict=True):
        for slot, p in enumerate(prompts):  # the positions each prompt wrote
            written = len(p) - 1
            assert torch.allclose(
                k_together[slot, :, :written], k_alone[slot, :, :written], atol=1e-5
            )
