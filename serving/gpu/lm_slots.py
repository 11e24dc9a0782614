"""A causal LM's replies from one decode loop on a slot cache: ``causal_lm_gpu`` with
``engine: slots``.

Each reply owns a *slot* (``serving.gpu.slots.SlotCache``: a row of per-layer key and value
tensors with its own position). A GPU thread runs the loop of :class:`SlotLmEngine`:

1. the waiting requests are admitted into free slots together: their prompts' keys and values
   are written by one prefill pass over all of them (``prefill_rows``, the fused layers, the
   prompts right-padded), eagerly, while the GPU runs the step just launched for the others (its
   kernels queue behind that step on the engine's stream, its own: another engine on the GPU runs
   beside it); those that came during a step are admitted before the next is launched, which
   takes their first tokens;
2. one decode step for every busy row at once (``decode_rows`` with per-row positions, masks and
   rotary angles), then the next token of each row: the most likely (``temperature`` 0) or one
   drawn among the 50 most likely (Gumbel noise made outside the graph). Every shape in a step
   depends only on the row bucket ``n`` and the length bucket ``L`` (the positions attended: the
   smallest power of two from 256 holding the busiest row's position), so each (n, L) is one
   CUDA graph, replayed;
3. each row's token goes to its request's stream on the caller's event loop; a request ends at
   its ``max_new_tokens``, at an end token (a checkpoint's ``eos_token_id``; dummy weights have
   none) or when its caller leaves (an interruption).

With ``overlap`` (the default) the loop reads a step's tokens after it has launched the next
step: the rows that go on take their chosen token on the device (queued behind the step that
chose it), and each step's tokens are copied to a host buffer whose event the loop waits for. So
the GPU runs step k+1 while the thread waits for the GIL, hands step k's tokens to the sessions'
loops and admits new requests; without it the GPU waits for all of that every step. A reply that
ends at an end token or an interruption has had one more step launched for it, which nobody
reads; a reply never takes more than its ``max_new_tokens`` steps.

transformers' continuous batching (``engine: continuous_batching``) stays for the A/B: on CUDA
its decode step took about 60 ms for 16 replies of the qwen3-4b configuration (docs/gpu.md),
where reading the weights once takes about 3 ms. ``tests/serving/gpu/test_lm_slots.py`` checks
on CPU (float32, a tiny Qwen3) that each reply's greedy tokens equal transformers' ``generate``
of its prompt alone, whenever it was admitted.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import queue
import threading
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

import torch

from fdb.errors import FdbError
from serving.gpu.requests import LoopQueue, PendingRequests, received
from serving.gpu.slots import (
    HostCopies,
    PaddedPrefill,
    SlotCache,
    bucket,
    capture,
    decode_rows,
    engine_stream,
    fuse_layers,
    gumbel,
    module_norm,
    on_stream,
    prefill_rows,
    priority_of,
    rms_norm,
    rope_tables,
    sample_top_k,
    to_device,
)

log = logging.getLogger("fdb.serving")
TOP_K = 50  # temperature > 0 draws among the 50 most likely tokens
MIN_LENGTH = 256  # the smallest length bucket
PREFILL_TOKENS = 16384  # padded prompt tokens in one prefill pass at most
# With prefill_graphs (CUDA, cuda_graphs) a prompt of up to the largest of these (less max_len)
# is prefilled alone, right-padded to the next, by that length's graph (slots.PaddedPrefill)
PREFILL_LENGTHS = (64, 128, 256, 512, 1024, 2048)
_ids = itertools.count()


@dataclass
class _Request:
    ids: list[int]
    max_new_tokens: int
    out: LoopQueue | queue.SimpleQueue = field(default_factory=queue.SimpleQueue)
    made: int = 0  # tokens delivered
    launched: int = 0  # steps launched with this request's row (ahead of made by one at most)
    cancelled: bool = False
    name: str = field(default_factory=lambda: f"reply-{next(_ids)}")


def length_bucket(positions: int, max_len: int) -> int:
    """The smallest power of two from MIN_LENGTH holding ``positions``, at most ``max_len``."""
    n = MIN_LENGTH
    while n < positions:
        n *= 2
    return min(n, max_len)


class SlotLmEngine(PendingRequests):
    """``model`` (a transformers causal LM of the Llama family: Qwen3, Llama) decoding the replies
    of up to ``max_batch`` requests at once; :meth:`stream` is awaited by every session.
    ``max_len``: prompt and reply tokens a slot holds; ``eos``: the end token ids (none: a reply
    runs to its ``max_new_tokens``); ``cuda_graphs``: capture each (rows, length) step (CUDA
    only); ``fuse``: ``serving.gpu.slots.fuse_layers`` (False: the modules' own operations)."""

    def __init__(
        self,
        model,
        max_batch: int,
        max_len: int,
        temperature: float,
        eos: Sequence[int] = (),
        cuda_graphs: bool = True,
        fuse: bool = True,
        prefill_graphs: bool = True,
        prefill_lengths: Sequence[int] | None = None,
        stream_priority: int = 0,
        overlap: bool = True,
    ):
        config = model.config
        self.model, self.max_batch, self.max_len = model, max_batch, max_len
        self.overlap = overlap
        self.temperature = temperature
        self.eos = frozenset(int(e) for e in eos)
        inner = model.model
        self.layers, self.norm, self.rotary = inner.layers, inner.norm, inner.rotary_emb
        self.embed = inner.embed_tokens
        weight = self.embed.weight
        self.device, self.dtype = weight.device, weight.dtype
        self.cuda_graphs = cuda_graphs and self.device.type == "cuda"
        attn = self.layers[0].self_attn
        self.head_dim = attn.head_dim
        kv_heads = config.num_key_value_heads
        self.cache = SlotCache(
            len(self.layers), max_batch, kv_heads, max_len, self.head_dim, self.device, self.dtype
        )
        self.plans = (
            fuse_layers(self.layers, kv_heads, self.head_dim) if fuse else [None] * len(self.layers)
        )
        self._norm = rms_norm if fuse else module_norm
        self.padded = PaddedPrefill(
            self.layers,
            self.cache,
            self.plans,
            self.rotary,
            PaddedPrefill.lengths_for(
                prefill_lengths, PREFILL_LENGTHS, max_len, self.cuda_graphs and prefill_graphs
            ),
            config.hidden_size,
            self.cuda_graphs,
        )
        s = max_batch
        self.tokens = torch.zeros(s, dtype=torch.long, device=self.device)  # each row's input
        self.pos = torch.zeros(s, dtype=torch.long, device=self.device)
        self.chosen = torch.zeros(s, dtype=torch.long, device=self.device)
        self.noise = torch.zeros(s, TOP_K, device=self.device)
        self._arange = torch.arange(max_len, device=self.device)
        self._rows = torch.arange(s, device=self.device)
        self._graphs: dict[tuple[int, int], torch.cuda.CUDAGraph] = {}
        self._pool = None
        self._slots: list[_Request | None] = [None] * s
        self._positions = [0] * s  # each busy row's next step's position, known on the host
        # each step's tokens, read after the next step is launched (overlap)
        self._copies = HostCopies(s, torch.long, self.device)
        self._buffer = 0  # the last step's copy
        self._inflight: tuple[list[tuple[int, _Request]], int, int] | None = None  # unread
        self._last_rows: set[int] = set()  # the rows of the step launched last
        self._pending: queue.SimpleQueue[_Request] = queue.SimpleQueue()
        self._wake = threading.Event()
        self._stop = False
        self.steps, self.step_s, self.prefills, self.prefill_s = 0, 0.0, 0, 0.0
        self.prefill_passes = 0
        self.warm_s = self.warm()
        # the loop runs on its own stream, so that another engine's kernels on the same GPU (a
        # recognizer's encoder, the speech model's steps) run beside its steps, not before them
        self.cuda_stream = engine_stream(self.device, stream_priority)
        self.stream_priority = priority_of(self.cuda_stream)  # the one it got (None: a CPU)
        self._thread = threading.Thread(target=self._run, name="lm-slots", daemon=True)
        self._thread.start()

    # --- requests ------------------------------------------------------------------------------

    async def stream(self, ids: Sequence[int], max_new_tokens: int) -> AsyncIterator[int]:
        """The reply's token ids as they are chosen; leaving early cancels the request."""
        if len(ids) + max_new_tokens > self.max_len:
            raise FdbError(
                f"a prompt of {len(ids)} tokens and {max_new_tokens} new ones is more than the "
                f"{self.max_len} a slot holds",
                "shorten the history (max_prompt_tokens) or raise the engine's max_len",
            )
        tokens: asyncio.Queue = asyncio.Queue()
        request = _Request(list(ids), max_new_tokens, LoopQueue(asyncio.get_running_loop(), tokens))
        self._submit(request)
        async for token in received(tokens, request):
            yield token

    def warm(self) -> float:
        """Every (rows, length) step captured (CUDA graphs), before the GPU thread starts (it
        uses the step's buffers)."""
        started = time.perf_counter()
        if self.cuda_graphs:
            rows = sorted({bucket(b, self.max_batch) for b in range(1, self.max_batch + 1)})
            lengths = sorted({length_bucket(p, self.max_len) for p in range(1, self.max_len + 1)})
            with torch.inference_mode():
                for n in rows:
                    for length in lengths:
                        self._replay(n, length)
                failed = self.padded.warm()  # no slot is in use yet: a capture writes slot 0
                if failed:
                    log.warning("lm slots: prefill capture failed (%s); eager prefills", failed)
            log.info(
                "lm slots: %d step graphs (rows %s, lengths %s), prefill lengths %s in %.1f s",
                len(self._graphs),
                rows,
                lengths,
                list(self.padded.lengths),
                time.perf_counter() - started,
            )
        return round(time.perf_counter() - started, 1)

    def _closed(self) -> FdbError:
        return FdbError(
            "causal_lm_gpu: the decode loop takes no requests (it stopped or failed)",
            "see the server log for the decode loop's error; restart the server",
        )

    # --- the GPU thread ------------------------------------------------------------------------

    def _run(self) -> None:
        self._run_loop(self._streamed_loop, "the reply model")

    def _streamed_loop(self) -> None:
        with torch.inference_mode(), on_stream(self.cuda_stream):
            self._loop()

    def _loop(self) -> None:
        while not self._stop:
            rows = self._launchable()
            if not rows and self._inflight is None:
                self._busy()  # nothing launched, nothing to read: admit, or wait for a request
                continue
            launched = None
            try:
                started = time.perf_counter()
                if rows and self._pending.qsize():
                    # requests that came during the last step are admitted before the next,
                    # which takes their first tokens (admitted after its launch, they would wait
                    # one step more, as CSM's did: docs/gpu.md, fifth session); their prefill
                    # queues behind the step in flight, as one admitted after the launch does
                    self._admit()
                    rows = self._launchable()
                if rows:
                    launched = self._launch(rows)
                self._last_rows = set(rows)
                # admitted while the GPU runs the step: the prefill's kernels queue behind it
                self._admit()
                if self._inflight is not None:  # the step before: read while this one runs
                    self._deliver(*self._inflight)
                if not self.overlap and launched is not None:
                    self._deliver(*launched)
                    launched = None
                self._inflight = launched
                self.steps += 1 if rows else 0
                self.step_s += time.perf_counter() - started
            except BaseException as exc:  # every request in flight fails with the error
                log.exception("lm slots: a decode step failed")
                self._inflight, self._last_rows = None, set()
                for i in self._in_flight():
                    self._finish(i, FdbError(f"the reply failed: {exc}", "see the server log"))

    def _launchable(self) -> list[int]:
        """The busy rows the next step takes: those not cancelled that have tokens left to
        launch. A row left out whose last step has been read (a request cancelled before its
        first step) ends here: no step will read it again."""
        reading = {i for i, _ in self._inflight[0]} if self._inflight is not None else set()
        rows = []
        for i, request in enumerate(self._slots):
            if request is None:
                continue
            if request.cancelled or request.launched >= request.max_new_tokens:
                if i not in reading:
                    self._finish(i, None)
                continue
            rows.append(i)
        return rows

    def _launch(self, rows: list[int]) -> tuple[list[tuple[int, _Request]], int, int]:
        """One step for ``rows`` launched without waiting for the GPU: the rows that were in the
        step before take its token at the next position (on the device, queued behind it: their
        tokens need not have been read), then the step, then its tokens' copy to the host.
        Returns what :meth:`_deliver` reads: the rows' requests, the row bucket, the buffer."""
        n = bucket(max(rows) + 1, self.max_batch)
        length = length_bucket(max(self._positions[i] for i in rows) + 1, self.max_len)
        going_on = [i for i in rows if i in self._last_rows]
        # busy rows that launch no more (their last step unread yet; _launchable has ended the
        # others, at position 0): back to position 0, as _finish does later, so that this step's
        # stale computation of them stays inside its length bucket. A long reply that ended
        # beside short ones would write past it, and so would one admitted before this launch
        # into a slot whose last step is unread that launches no step (its caller left at once,
        # or it asked for no token: found by a review)
        left = [i for i in self._in_flight() if i not in rows]
        if left:
            self.pos[to_device(left, self.device)] = 0
        if going_on:
            index = to_device(going_on, self.device)
            self.tokens[index] = self.chosen[index]
            self.pos[index] += 1
        if self.temperature > 0:
            self.noise.uniform_()
        self._replay(n, length)
        self._buffer ^= 1
        self._copies.put(self._buffer, self.chosen[:n])
        requests = [(i, self._slots[i]) for i in rows]
        for i, request in requests:
            request.launched += 1
            self._positions[i] += 1
        return requests, n, self._buffer

    def _admit(self) -> None:
        """Every waiting request that has a free slot, prefilled together (one pass of the
        layers for all their prompts, right-padded: what the layers' launches cost is paid once,
        not once a request), up to ``PREFILL_TOKENS`` padded tokens a pass. Those waiting now,
        not those that come meanwhile (they wait for the next step, as CSM's)."""
        arrived = self._pending.qsize()
        while arrived > 0:
            free = [i for i, r in enumerate(self._slots) if r is None]
            batch: list[_Request] = []
            while len(batch) < len(free) and arrived > 0:
                request = self._arrival()
                if request is None:
                    return
                arrived -= 1
                if request.cancelled:
                    continue
                longest = max(len(r.ids) for r in [*batch, request])
                if batch and longest * (len(batch) + 1) > PREFILL_TOKENS:
                    self._prefill(batch, free[: len(batch)])
                    free, batch = free[len(batch) :], []
                batch.append(request)
            if not batch:
                return
            self._prefill(batch, free[: len(batch)])

    def _prefill(self, requests: list[_Request], slots: list[int]) -> None:
        """Each request's prompt but its last token into its slot; the next step takes the last
        one. A failure fails these requests, not the others."""
        started = time.perf_counter()
        requests, slots = self._prefill_padded(requests, slots)
        if not requests:
            self.prefill_s += time.perf_counter() - started
            return
        prompts = [r.ids or [0] for r in requests]
        t = max(len(p) for p in prompts) - 1
        try:
            if t > 0:
                padded = [p[:-1] + [0] * (t - len(p) + 1) for p in prompts]
                h = self.embed(to_device(padded, self.device))
                positions = torch.arange(t, device=self.device)[None]
                rotary = rope_tables(*self.rotary(h, positions))
                rows = to_device(slots, self.device)
                layers = zip(self.layers, self.cache.k, self.cache.v, self.plans, strict=True)
                for layer, k, v, plan in layers:
                    h = prefill_rows(layer, h, k, v, rows, rotary, plan=plan)
        except BaseException as exc:
            self._refuse(requests, exc)
            return
        for request, slot, ids in zip(requests, slots, prompts, strict=True):
            self._started_or_refused(request, slot, ids)
        self.prefills += len(requests)
        self.prefill_passes += 1
        self.prefill_s += time.perf_counter() - started

    def _prefill_padded(
        self, requests: list[_Request], slots: list[int]
    ) -> tuple[list[_Request], list[int]]:
        """Each request whose prompt fits one of ``padded.lengths`` prefilled alone, right-padded
        to it (on CUDA by that length's graph), and started; returns the others with their slots
        (longer prompts, or all of them without prefill lengths)."""
        rest: tuple[list[_Request], list[int]] = ([], [])
        for request, slot in zip(requests, slots, strict=True):
            ids = request.ids or [0]
            if len(ids) < 2 or self.padded.length_for(len(ids) - 1) is None:
                rest[0].append(request)
                rest[1].append(slot)
                continue
            try:
                self.padded.run(self.embed(to_device([ids[:-1]], self.device)), slot)
            except BaseException as exc:
                self._refuse([request], exc)
                continue
            self._started_or_refused(request, slot, ids)
            self.prefills += 1
            self.prefill_passes += 1
        return rest

    def _refuse(self, requests: list[_Request], exc: BaseException) -> None:
        """These requests end with ``exc`` (a failed prefill or start), logged once."""
        log.exception("lm slots: a prefill failed")
        for request in requests:
            request.out.put(FdbError(f"the reply's prefill failed: {exc}", "see the server log"))
            request.out.put(None)

    def _started_or_refused(self, request: _Request, slot: int, ids: list[int]) -> None:
        """:meth:`_start` after a prefill; if its device writes fail (a failed device), the
        request is refused, not left taken from the queue without a slot."""
        try:
            self._start(request, slot, ids)
        except BaseException as exc:
            self._refuse([request], exc)

    def _start(self, request: _Request, slot: int, ids: list[int]) -> None:
        """``slot``'s next step takes the prompt's last token at its position."""
        self.tokens[slot] = ids[-1]
        self.pos[slot] = len(ids) - 1
        self._positions[slot] = len(ids) - 1
        self._slots[slot] = request
        self._last_rows.discard(slot)  # its first step takes this token, not the last step's

    def _deliver(self, requests: list[tuple[int, _Request]], n: int, buffer: int) -> None:
        """Each row's token of a launched step (:meth:`_launch`) to its request, once the step is
        done. A row whose request ended since (an end token, an interruption; its slot may hold a
        new request now) is skipped: the step computed it, nobody reads it."""
        chosen = self._copies.get(buffer, n).tolist()
        for i, request in requests:
            if self._slots[i] is not request:
                continue
            token = chosen[i]
            if token in self.eos:
                self._finish(i, None)
                continue
            request.made += 1
            request.out.put(token)
            if request.cancelled or request.made >= request.max_new_tokens:
                self._finish(i, None)

    def _finish(self, slot: int, error: BaseException | None) -> None:
        """The request of ``slot`` ends; the free row goes back to position 0, so that the
        stale computations of later steps stay inside every length bucket."""
        request = self._slots[slot]
        self._slots[slot] = None
        self._positions[slot] = 0
        if request is not None:
            if error is not None:
                request.out.put(error)
            request.out.put(None)
        # after the request's end: on a failed device (a step's CUDA error) this write fails too,
        # and no request may be left waiting because of it
        with contextlib.suppress(Exception):
            self.pos[slot] = 0

    # --- one token for every busy row ----------------------------------------------------------

    def _replay(self, n: int, length: int) -> None:
        if not self.cuda_graphs:
            self._step(n, length)
            return
        graph = self._graphs.get((n, length))
        if graph is None:
            graph = capture(lambda: self._step(n, length), pool=self._pool, owner=self)
            self._pool = self._pool or graph.pool()
            self._graphs[(n, length)] = graph
        graph.replay()

    def _step(self, n: int, length: int) -> None:
        """Rows 0..n-1: ``tokens`` at ``pos`` in, the next token of each in ``chosen``; the keys
        and values of the first ``length`` positions are attended. Idle rows compute on stale
        inputs and are ignored."""
        pos = self.pos[:n]
        x = self.embed(self.tokens[:n])[:, None]  # [n, 1, H]
        rotary = rope_tables(*self.rotary(x, pos[:, None]))
        rows = self._rows[:n]
        x = decode_rows(
            self.layers, x, rotary, self.cache, self.plans, pos, rows, self._arange, length
        )
        logits = self.model.lm_head(self._norm(self.norm, x)[:, -1]).float()
        if self.temperature > 0:
            noise = gumbel(self.noise[:n])
            self.chosen[:n] = sample_top_k(logits, TOP_K, self.temperature, gumbel_noise=noise)
        else:
            self.chosen[:n] = logits.argmax(-1)
