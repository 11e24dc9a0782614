"""Streaming voice-cloning TTS on CSM (transformers' ``CsmForConditionalGeneration``), batched.

CSM speaks in Mimi frames (12.5 Hz, 80 ms, 32 codebooks). Per frame, the backbone (a Llama-3.2-1B
in the csm-1b configuration) predicts codebook 0 from everything so far; the depth decoder (4
layers) predicts codebooks 1–31 one after another from the backbone's last hidden state; Mimi
turns the frame into 1,920 samples at 24 kHz. The prompt is CsmProcessor's layout: the reference
transcript and the reference audio's frames (the voice to clone), an audio end frame, then the
text to speak.

One :class:`CsmEngine` per process serves every request: a GPU thread admits new requests (a
backbone prefill of all prompt tokens but the last into a free slot of
:class:`~serving.gpu.slots.SlotCache`: with ``prefill_graphs`` on CUDA a prompt of up to 512
positions is right-padded to a length of ``PREFILL_BUCKETS`` and prefilled by that length's CUDA
graph, one request a replay; otherwise one eager pass each for a lone arrival, one for a burst
of ``BURST`` or more; a reference's Mimi codes are cached by its sha256), then
advances every busy slot by one frame in one batched step (the new slot's last prompt token is its
first input, so its first frame comes from the batched step too) (:meth:`CsmEngine._step`:
backbone, 31 depth steps and the sampling, captured as one CUDA graph per batch bucket when
``cuda_graphs`` is on), and decodes the new frame of each busy slot with Mimi: ``codec: streaming``
(the default, :mod:`serving.gpu.mimi_static`) continues the slot's own decoder stream, one frame
per call, captured as a CUDA graph per bucket (a reference's last frames are primed into the stream
at prefill); ``codec: window`` decodes a window of its last ``decode_context`` frames with
transformers' Mimi, eagerly (Mimi's convolutions are causal, so the window's last frame matches a
full decode up to the decoder transformer's longer context). A request ends at the end frame (every
codebook ``codebook_eos_token_id``, 0), which is not spoken, or at its length bound.

With dummy weights (no tokenizer) the text becomes its UTF-8 bytes, and since a random model
never says "end", the length bound is ``dummy_s_per_char`` seconds per character: a speaking
rate, so that the traffic has the shape of real speech. The audio is noise; label it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import queue
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field

import numpy as np

from fdb.errors import FdbError
from fdb.models import BackendIdentity
from fdb.provenance import package_version
from serving.gpu.requests import LoopQueue, PendingRequests, received

log = logging.getLogger("fdb.serving")

RATE = 24000
REF_CACHE = 256  # reference voices whose codes are kept
BURST = 3  # waiting requests prefilled in one pass from this many (fewer: one prefill each)
PREFILL_TOKENS = 16384  # padded prompt tokens in one prefill pass at most
# With prefill_graphs (CUDA, cuda_graphs), a prompt of up to the largest of these (less max_len)
# is prefilled right-padded to the next, by that length's captured graph: a handful of launches
# where the eager pass launches hundreds, each of which waits for the GIL while the reply model
# and Whisper launch theirs (docs/gpu.md measured what an eager prefill took under load)
PREFILL_BUCKETS = (16, 32, 64, 128, 256, 512)
FRAME_HZ = 12.5
SLOW_STEP_S = 0.05  # a step logged under FDB_STAGE_MARKS when it takes longer


class PromptTooLong(FdbError):
    """The request's fault (reference + text longer than ``max_len``): HTTP 400 at the endpoint."""

    status = 400
    code = "input_too_long"


@dataclass
class CsmOptions:
    max_batch: int = 64  # slots: requests generating at once (more wait)
    max_len: int = 1024  # frames + prompt tokens per request
    max_audio_s: float = 60.0
    temperature: float = 0.9
    top_k: int = 50
    decode_context: int = 8  # frames of Mimi context per decoded frame (codec "window"), or of a
    # reference primed into a slot's decoder (codec "streaming")
    # "streaming": serving.gpu.mimi_static, one frame per call over the slot's decoder state, a CUDA
    # graph per bucket; "window": transformers' Mimi over the last decode_context frames, eagerly
    codec: str = "streaming"
    cuda_graphs: bool = True
    # serving.gpu.slots.fuse_layers: fused QKV and gate-up projections, RMSNorm and rotary
    # embedding in fewer kernels (False: the transformers modules' own operations, for an A/B)
    fuse: bool = True
    dummy_s_per_char: float = 0.07
    speaker: int = 0
    # prompts prefilled right-padded to a length, one CUDA graph a length (PaddedPrefill; CUDA
    # with cuda_graphs only): PREFILL_BUCKETS below max_len
    prefill_graphs: bool = True
    prefill_lengths: tuple[int, ...] | None = None  # other lengths (on CPU: run eagerly, padded)
    # the CUDA stream priority of the GPU thread (serving.gpu.slots.engine_stream)
    stream_priority: int = 0
    # the next frame's step launched before the last one's audio is read and handed to the
    # requests, so that the GPU does not wait for the thread (and the GIL) between steps (off by
    # default: under the GPU cascade's load its first frames came later, docs/gpu.md)
    overlap: bool = False


@dataclass
class _Request:
    text: str
    ref_audio: np.ndarray | None
    ref_text: str
    out: queue.SimpleQueue | LoopQueue = field(default_factory=queue.SimpleQueue)
    max_frames: int = 0
    frames: int = 0
    cancelled: bool = False
    slot: int = -1
    submitted: float = field(default_factory=time.time)  # wall clock, as the stage marks
    admitted: float = 0.0  # its prefill launched
    prompt: int = 0  # its prompt's positions
    launched: int = 0  # frames launched (with overlap, one step may be launched and not yet read)


class CsmEngine(PendingRequests):
    """The shared CSM model and its generation thread."""

    def __init__(
        self,
        model,
        options: CsmOptions,
        tokenizer=None,
        dummy: bool = True,
        weights_label: str = "",
    ):
        # lazy: torch is optional (the gpu extra)
        import torch

        self.torch = torch
        self.model = model
        self.opts = options
        self.tokenizer = tokenizer
        self.dummy = dummy
        config = model.config
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self.codebooks = config.num_codebooks
        self.eos = torch.as_tensor(
            config.codebook_eos_token_id, device=self.device
        )  # the end frame's codes
        codec = config.codec_config
        self.codec_size = codec.codebook_size
        self.frame_samples = int(round(codec.sampling_rate / codec.frame_rate))
        backbone = model.backbone_model
        depth = model.depth_decoder.model
        first = backbone.layers[0].self_attn
        self.head_dim = first.head_dim
        # lazy: serving.gpu.slots imports torch (optional: the gpu extra)
        from serving.gpu.slots import SlotCache

        s = options.max_batch
        self.cache = SlotCache(
            len(backbone.layers),
            s,
            config.num_key_value_heads,
            options.max_len,
            self.head_dim,
            self.device,
            self.dtype,
        )
        dd = model.depth_decoder.config
        self.depth_cache = SlotCache(
            len(depth.layers),
            s,
            dd.num_key_value_heads,
            self.codebooks + 1,
            depth.layers[0].self_attn.head_dim,
            self.device,
            self.dtype,
        )
        self.step_in = torch.zeros(s, 1, config.hidden_size, dtype=self.dtype, device=self.device)
        self.pos = torch.zeros(s, dtype=torch.long, device=self.device)
        self.out_codes = torch.zeros(s, self.codebooks, dtype=torch.long, device=self.device)
        self.history = torch.zeros(
            s, self.codebooks, options.decode_context, dtype=torch.long, device=self.device
        )
        self._arange = torch.arange(options.max_len, device=self.device)
        self._rows = torch.arange(s, device=self.device)
        self._depth_tables(depth, s)
        self._plans = [None] * len(backbone.layers)
        self._depth_plans = [None] * len(depth.layers)
        # lazy: serving.gpu.slots imports torch (optional: the gpu extra)
        from serving.gpu.slots import (
            HostCopies,
            PaddedPrefill,
            fuse_layers,
            module_norm,
            rms_norm,
        )

        self._norm = rms_norm if options.fuse else module_norm
        if options.fuse:
            self._plans = fuse_layers(backbone.layers, config.num_key_value_heads, self.head_dim)
            self._depth_plans = fuse_layers(
                depth.layers, dd.num_key_value_heads, depth.layers[0].self_attn.head_dim
            )
        self._graphs: dict[int, object] = {}
        graphs_on = self.device.type == "cuda" and options.cuda_graphs
        self.padded = PaddedPrefill(
            backbone.layers,
            self.cache,
            self._plans,
            backbone.rotary_emb,
            PaddedPrefill.lengths_for(
                options.prefill_lengths,
                PREFILL_BUCKETS,
                options.max_len,
                graphs_on and options.prefill_graphs,
            ),
            backbone.config.hidden_size,
            graphs_on,
        )
        self.audio = torch.zeros(s, self.frame_samples, dtype=torch.float32, device=self.device)
        if options.codec not in ("streaming", "window"):
            raise FdbError(f"CSM codec {options.codec!r} is not known", "use streaming or window")
        self.mimi = None
        if options.codec == "streaming":
            # lazy: serving.gpu.mimi_static imports torch (optional: the gpu extra)
            from serving.gpu.mimi_static import MimiGraphs, StaticMimi

            self.mimi = MimiGraphs(
                StaticMimi(model.codec_model, s, num_quantizers=self.codebooks),
                cuda_graphs=options.cuda_graphs,
            )
        # the sampling's uniform numbers, drawn before each step outside its graph
        self.noise = torch.zeros(self.codebooks, s, options.top_k, device=self.device)
        self._ref_codes: dict[str, object] = {}  # sha256 of a reference -> its Mimi codes (LRU)
        self._slots: list[_Request | None] = [None] * s
        # 1 for each busy row: a step's position advance, without a host list sent to the GPU
        self.live = torch.zeros(s, dtype=torch.long, device=self.device)
        self._pending: queue.SimpleQueue[_Request] = queue.SimpleQueue()
        self._wake = threading.Event()
        self._stop = False
        self.steps = 0
        self.prefills = 0  # requests prefilled
        # FDB_STAGE_MARKS=1: each request's first frame logged with its wait and its prefill
        self._marks = os.environ.get("FDB_STAGE_MARKS") == "1"
        self.prefill_passes = 0  # backbone prefill passes (a burst shares one)
        # launch to delivery: the admission while the step runs included, the one before not
        # (with overlap, the next step's admission and launch included)
        self.step_s = 0.0
        # with overlap: each step's audio and end flags copied to one of two host buffers behind
        # it, read after the next step is launched
        self._copies = HostCopies(s * (self.frame_samples + 1), torch.float32, self.device)
        self._buffer = 0
        self._inflight: tuple | None = None  # the launched step not yet read: _deliver's args
        self._inflight_admitted = (0.0, 0.0)  # its admissions' seconds, before and during it
        self.identity = BackendIdentity(
            kind="tts",
            name="transformers/csm",
            version=package_version("transformers"),
            settings={
                "weights": weights_label,
                "dummy": dummy,
                "max_batch": s,
                "cuda_graphs": options.cuda_graphs,
                "codec": options.codec,
                "fused_layers": options.fuse,
                "prefill_lengths": list(self.padded.lengths),
                "decode_context_frames": options.decode_context,
                "temperature": options.temperature,
                "top_k": options.top_k,
                "frame_hz": FRAME_HZ,
                "rate": RATE,
                "overlap": options.overlap,
            },
        )
        self.warm_s = self._warm()
        # lazy: serving.gpu.slots imports torch (optional: the gpu extra)
        from serving.gpu.slots import engine_stream, priority_of

        # the GPU thread's own stream, so that the other engines' kernels on the GPU (a
        # recognizer's encoder, the reply model's steps) run beside its steps, at its priority
        self.cuda_stream = engine_stream(self.device, options.stream_priority)
        self.identity.settings["stream_priority"] = priority_of(self.cuda_stream)
        self._thread = threading.Thread(target=self._run, name="csm-gpu", daemon=True)
        self._thread.start()

    def _depth_tables(self, depth, slots: int) -> None:
        """What every depth step shares, made once: each position's rotary angles (the same for
        every row), its row of positions and its causal mask."""
        # lazy: serving.gpu.slots imports torch (optional: the gpu extra)
        from serving.gpu.slots import depth_tables, rope_tables

        torch = self.torch
        length = self.codebooks + 1
        positions = torch.arange(length, device=self.device)
        probe = torch.zeros(1, 1, depth.config.hidden_size, dtype=self.dtype, device=self.device)
        cos, sin = depth.rotary_emb(probe, positions[None, :])  # [1, length, D]
        self._depth_rope = [
            rope_tables(cos[:, p : p + 1], sin[:, p : p + 1]) for p in range(length)
        ]
        self._depth_pos, self._depth_mask = depth_tables(length, slots, self.device)

    def _warm(self) -> float:
        """Every bucket's step and Mimi decode once (CUDA graphs captured) before the first
        request; no slot is busy, so what they write is overwritten by the next prefill."""
        # lazy: serving.gpu.slots imports torch (optional: the gpu extra)
        from serving.gpu.slots import bucket

        started = time.perf_counter()
        if self.device.type == "cuda" and self.opts.cuda_graphs:
            buckets = sorted(
                {bucket(b, self.opts.max_batch) for b in range(1, self.opts.max_batch + 1)}
            )
            with self.torch.inference_mode():
                if self.mimi is not None:
                    self.mimi.warm(buckets)
                for n in buckets:
                    self._run_step(n)
                    if self.mimi is None:
                        self._run_decode(n)
                # no slot is busy: what the captures write into slot 0 is overwritten by its
                # next prefill (a capture may not run later, while slot 0 may be in use)
                failed = self.padded.warm()
                if failed:
                    log.warning("CSM prefill capture failed (%s); prefills run eagerly", failed)
                    self.identity.settings["prefill_lengths"] = f"off: {failed}"
            log.info(
                "CSM buckets %s and prefill lengths %s warm in %.1f s",
                buckets,
                list(self.padded.lengths),
                time.perf_counter() - started,
            )
        return round(time.perf_counter() - started, 1)

    # --- requests ------------------------------------------------------------------------------

    def stream(
        self,
        text: str,
        ref_audio: np.ndarray | None = None,
        ref_text: str = "",
        cancelled: threading.Event | None = None,
    ) -> Iterator[np.ndarray]:
        """Float samples at 24 kHz, one 80 ms frame at a time, as they are generated (blocking;
        run it in a thread). ``cancelled`` set: the request stops at the next frame."""
        request = self._submit(_Request(text=text, ref_audio=ref_audio, ref_text=ref_text))
        try:
            while True:
                item = request.out.get()
                if item is None:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
                if cancelled is not None and cancelled.is_set():
                    request.cancelled = True
        finally:
            request.cancelled = True

    async def astream(
        self, text: str, ref_audio: np.ndarray | None = None, ref_text: str = ""
    ) -> AsyncIterator[np.ndarray]:
        """:meth:`stream`'s frames awaited on the caller's event loop (no thread waits for a
        frame, so any number of sessions can stream at once); leaving early cancels the request."""
        frames: asyncio.Queue = asyncio.Queue()
        request = _Request(
            text=text,
            ref_audio=ref_audio,
            ref_text=ref_text,
            out=LoopQueue(asyncio.get_running_loop(), frames),
        )
        self._submit(request)
        async for frame in received(frames, request):
            yield frame

    def _closed(self) -> FdbError:
        return FdbError("the CSM engine is closed", "the server is stopping")

    # --- the GPU thread ------------------------------------------------------------------------

    def _run(self) -> None:
        self._run_loop(self._loop, "CSM")

    def _loop(self) -> None:
        # lazy: serving.gpu.slots imports torch (optional: the gpu extra)
        from serving.gpu.slots import on_stream

        torch = self.torch
        with torch.inference_mode(), on_stream(self.cuda_stream):
            while not self._stop:
                # outside the step's handler: a failure here (a failed device's write) ends the
                # thread, and every request with it (PendingRequests._run_loop)
                rows = self._launchable()
                if not rows and self._inflight is None:
                    self._busy()  # nothing launched, nothing to read: admit, or wait for one
                    continue
                try:
                    before = time.perf_counter()
                    if self._pending.qsize():
                        # requests that came during the last step are admitted before the next,
                        # which takes their first frames (admitted after its launch, their first
                        # frames would wait one more step: 30-40 ms under load, docs/gpu.md)
                        self._admit()
                        rows = self._launchable()
                    before = time.perf_counter() - before
                    launched = self._launch(rows) if rows else None
                    # and those that come while the GPU runs it: a prefill's kernels queue behind
                    # it on the same stream (so it writes its slot after the step), and launching
                    # them costs the CPU time the step takes
                    during = time.perf_counter()
                    self._admit()
                    during = time.perf_counter() - during
                    if self._inflight is not None:  # the step before: read while this one runs
                        self._delivered(self._inflight, *self._inflight_admitted)
                    self._inflight, self._inflight_admitted = launched, (before, during)
                    if not self.opts.overlap and launched is not None:
                        self._delivered(launched, before, during)
                        self._inflight = None
                except BaseException as exc:  # every request in flight fails with the error
                    log.exception("CSM step failed")
                    self._inflight = None
                    for i in self._in_flight():
                        self._finish(
                            i, FdbError(f"CSM generation failed: {exc}", "see the server log")
                        )

    def _launchable(self) -> list[int]:
        """The busy rows the next step takes: those not cancelled with frames left to launch
        (``max_frames``, ``max_len``). A row left out whose last step has been read ends here;
        one whose last step is still unread (overlap) stops advancing and goes back to position
        0 before the next step, which computes it stale (a step computes every row of its
        bucket), so that it stays inside the cache; that step's frame is read as usual."""
        reading = {i for i, _ in self._inflight[0]} if self._inflight is not None else set()
        rows, left = [], []
        for i, request in enumerate(self._slots):
            if request is None:
                continue
            if (
                request.cancelled
                or request.launched >= request.max_frames
                or request.prompt - 1 + request.launched >= self.opts.max_len - 1
            ):
                if i in reading:
                    left.append(i)
                else:
                    self._finish(i, None)
                continue
            rows.append(i)
        if left:
            # lazy: serving.gpu.slots imports torch (optional: the gpu extra)
            from serving.gpu.slots import to_device

            index = to_device(left, self.device)
            self.live[index] = 0
            self.pos[index] = 0
        return rows

    def _delivered(self, launched: tuple, before: float, during: float) -> None:
        """:meth:`_deliver` of a launched step, and its stage mark when it was slow (``before``,
        ``during``: the admissions before and while it was launched)."""
        self._deliver(*launched)
        if self._marks:
            self._mark_slow_step(launched[1], launched[3], before, during)

    def _mark_slow_step(self, n: int, started: float, before: float, during: float) -> None:
        """Under FDB_STAGE_MARKS: a step that took more than ``SLOW_STEP_S`` from the admission
        before its launch (the prefills run, the step of those in flight not yet launched) to its
        delivery, with that admission's share and the one while it ran (the rest is the GPU's,
        and the GIL's). With overlap, the time includes the next step's admission and launch."""
        took = before + time.perf_counter() - started
        if took > SLOW_STEP_S:
            log.info(
                "csm slow step %.6f: %.1f ms for %d rows, %.1f ms admitting before it, "
                "%.1f ms during it",
                time.time(),
                took * 1000,
                n,
                before * 1000,
                during * 1000,
            )

    def _admit(self) -> None:
        """Every waiting request that has a free slot. With prefill lengths (CUDA graphs), a prompt
        that fits one is prefilled alone by its length's graph (:meth:`_prefill_padded`), burst or
        not. Otherwise: fewer than ``BURST`` waiting: one backbone prefill each (a lone
        arrival, the steady state: nothing is padded); a burst (many sessions' replies at once):
        their prompts in passes of up to ``PREFILL_TOKENS`` padded tokens
        (``serving.gpu.slots.prefill_rows``), so that the last of 32 does not wait for 31
        prefills, nor do the requests in flight (an admission before a step holds that step for
        its CPU time). A request whose prompt, prefill or start fails is refused alone."""
        # those waiting now, not those that come meanwhile: an admission takes the GPU thread
        # (an eager prompt, a prefill), and a burst that kept coming would hold every request in
        # flight without a frame until it ended (measured: docs/gpu.md, fourth session)
        arrived = self._pending.qsize()
        while arrived > 0:
            free = [i for i, r in enumerate(self._slots) if r is None]
            if not free:
                return
            waiting: list[tuple[_Request, object, object]] = []
            while len(waiting) < len(free) and arrived > 0:
                request = self._arrival()
                if request is None:
                    return
                arrived -= 1
                if request.cancelled:
                    continue
                try:
                    waiting.append((request, *self._checked_prompt(request)))
                except BaseException as exc:
                    self._refuse([request], exc)
            if len(waiting) < BURST:
                for (request, embeds, ref_codes), slot in zip(waiting, free, strict=False):
                    self._prefill([(request, slot, embeds, ref_codes)])
                continue
            batch: list[tuple[_Request, int, object, object]] = []
            for (request, embeds, ref_codes), slot in zip(waiting, free, strict=False):
                longest = max([embeds.shape[1]] + [e.shape[1] for _, _, e, _ in batch])
                if batch and longest * (len(batch) + 1) > PREFILL_TOKENS:
                    self._prefill(batch)
                    batch = []
                batch.append((request, slot, embeds, ref_codes))
            self._prefill(batch)

    def _refuse(self, requests: list[_Request], exc: BaseException) -> None:
        if isinstance(exc, PromptTooLong):  # the request's fault: no traceback
            log.warning("CSM request refused: %s", exc.one_line())
        else:
            log.exception("CSM prefill failed")
        for request in requests:
            request.out.put(
                exc
                if isinstance(exc, FdbError)
                else FdbError(f"CSM prefill failed: {exc}", "see the server log")
            )
            request.out.put(None)

    def _launch(self, rows: list[int]) -> tuple[list[tuple[int, _Request]], int, int, float]:
        """One frame for ``rows`` (the bucket of rows 0..n-1) launched, step and decode, and its
        audio and end flags copied to a host buffer behind it, without waiting for the GPU.
        Returns what :meth:`_deliver` reads: the rows' requests, ``n``, the buffer and the
        launch's time."""
        # lazy: serving.gpu.slots imports torch (optional: the gpu extra)
        from serving.gpu.slots import bucket

        n = bucket(max(rows) + 1, self.opts.max_batch)
        started = time.perf_counter()
        self._run_step(n)
        self.pos[:n] += self.live[:n]  # the busy rows' (queued: no wait for the step)
        self._run_decode(n)
        # one copy to the host: every row's audio and, in a last column, whether its frame is
        # the end frame
        ended = (self.out_codes[:n] == self.eos).all(dim=1, keepdim=True)
        block = self.torch.cat([self.audio[:n], ended.to(self.audio.dtype)], dim=1)
        self._buffer ^= 1
        self._copies.put(self._buffer, block.reshape(-1))
        requests = [(i, self._slots[i]) for i in rows]
        for _, request in requests:
            request.launched += 1
        return requests, n, self._buffer, started

    def _deliver(
        self, requests: list[tuple[int, _Request]], n: int, buffer: int, started: float
    ) -> None:
        """The frame of a launched step (:meth:`_launch`) to each of its requests, once the
        step is done. A row whose request ended since (its slot may hold a new request now) is
        skipped: the step computed it, nobody reads it."""
        width = self.frame_samples + 1
        # a copy: the host buffer is reused two steps later, and the requests keep their frames
        out = self._copies.get(buffer, n * width).numpy().reshape(n, width).copy()
        audio, ended = out[:, :-1], out[:, -1] > 0
        self.steps += 1
        self.step_s += time.perf_counter() - started
        for i, request in requests:
            if self._slots[i] is not request:
                continue
            if ended[i]:  # the end frame is a marker, not audio (transformers' generate cuts there)
                self._finish(i, None)
                continue
            request.frames += 1
            request.out.put(audio[i])
            if self._marks and request.frames == 1:
                log.info(
                    "csm first frame %.6f: waited %.1f ms for a slot, %.1f ms from its prefill "
                    "(%d positions, step of %d rows)",
                    time.time(),
                    (request.admitted - request.submitted) * 1000,
                    (time.time() - request.admitted) * 1000,
                    request.prompt,
                    n,
                )
            # its position: the prompt's last (where its first step began), one a frame since
            if (
                request.cancelled
                or request.frames >= request.max_frames
                or request.prompt - 1 + request.frames >= self.opts.max_len - 1
            ):
                self._finish(i, None)

    def _finish(self, slot: int, error: BaseException | None) -> None:
        request = self._slots[slot]
        self._slots[slot] = None
        if request is not None:
            if error is not None:
                request.out.put(error)
            request.out.put(None)
        # after the request's end: on a failed device (a step's CUDA error) this write fails too,
        # and no request may be left waiting because of it. Back to position 0: a free row is
        # computed stale by later steps, and one launched past its last frame (overlap) may
        # have advanced to the cache's end
        with contextlib.suppress(Exception):
            self.live[slot] = 0
            self.pos[slot] = 0

    # --- prompt and prefill --------------------------------------------------------------------

    def _text_ids(self, text: str) -> list[int]:
        if self.tokenizer is not None:
            return list(
                self.tokenizer(f"[{self.opts.speaker}]{text}", add_special_tokens=True)["input_ids"]
            )
        vocab = self.model.config.text_vocab_size
        return [b % vocab for b in text.encode("utf-8")] or [0]

    def _prompt(self, request: _Request):
        """The prompt's embeddings [1, T, H] and the reference's codes [32, F] (or None)."""
        # lazy: serving.gpu.slots imports torch (optional: the gpu extra)
        from serving.gpu.slots import to_device

        torch = self.torch
        m = self.model
        parts = []
        ref_codes = None
        if request.ref_audio is not None and len(request.ref_audio):
            parts.append(
                m.embed_text_tokens(to_device([self._text_ids(request.ref_text)], self.device))
            )
            ref_codes = self._encode_reference(request.ref_audio)  # [32, F]
            parts.append(m.backbone_model.embed_tokens(ref_codes.T[None]))
            eos = torch.full(
                (1, 1, self.codebooks), m.config.codebook_eos_token_id, device=self.device
            )
            parts.append(m.backbone_model.embed_tokens(eos))
        parts.append(m.embed_text_tokens(to_device([self._text_ids(request.text)], self.device)))
        return torch.cat(parts, dim=1).to(self.dtype), ref_codes

    def _encode_reference(self, samples: np.ndarray):
        """Mimi codes of a reference, cached by its samples' sha256 (a voice prompt is sent
        again and again; Mimi's encoder is deterministic)."""

        samples = np.ascontiguousarray(samples, dtype=np.float32)
        key = hashlib.sha256(samples.tobytes()).hexdigest()
        codes = self._ref_codes.pop(key, None)
        if codes is None:
            wav = self.torch.from_numpy(samples).to(self.device, self.dtype)[None, None]
            codes = self.model.codec_model.encode(wav).audio_codes[0, : self.codebooks]
        self._ref_codes[key] = codes
        while len(self._ref_codes) > REF_CACHE:
            self._ref_codes.pop(next(iter(self._ref_codes)))
        return codes

    def _checked_prompt(self, request: _Request):
        """:meth:`_prompt`, refused when it cannot fit a slot."""
        embeds, ref_codes = self._prompt(request)
        t = embeds.shape[1]
        if t + 2 >= self.opts.max_len:
            raise PromptTooLong(
                f"the prompt is {t} tokens, the engine holds {self.opts.max_len}",
                "send a shorter reference or text, or raise max_len",
            )
        return embeds, ref_codes

    def _prefill(self, batch: list) -> None:
        """Each request's prompt but its last token into its slot (``batch``: (request, slot,
        embeds, reference codes)); the batched step takes each last token. One request: its own
        prefill (``prefill_layer``); more: one pass, right-padded (``prefill_rows``). A failed
        pass refuses these requests, not the others."""
        # lazy: serving.gpu.slots imports torch (optional: the gpu extra)
        from serving.gpu.slots import prefill_layer, prefill_rows, rope_tables, to_device

        batch = self._prefill_padded(batch)
        if not batch:
            return
        torch = self.torch
        backbone = self.model.backbone_model
        t = max(embeds.shape[1] for _, _, embeds, _ in batch) - 1
        layers = list(zip(backbone.layers, self.cache.k, self.cache.v, self._plans, strict=True))
        try:
            if t > 0 and len(batch) == 1:  # all but the last token; the step takes that one
                ((_, slot, embeds, _),) = batch
                positions = torch.arange(t, device=self.device)[None]
                cos, sin = backbone.rotary_emb(embeds, positions)
                rotary = rope_tables(cos, sin)
                h = embeds[:, :-1]
                for layer, k, v, plan in layers:
                    h = prefill_layer(layer, h, cos, sin, k, v, slot, 0, plan=plan, rotary=rotary)
            elif t > 0:
                hidden = batch[0][2].shape[2]
                h = torch.zeros(len(batch), t, hidden, dtype=self.dtype, device=self.device)
                for row, (_, _, embeds, _) in enumerate(batch):
                    h[row, : embeds.shape[1] - 1] = embeds[0, :-1]
                positions = torch.arange(t, device=self.device)[None]
                rotary = rope_tables(*backbone.rotary_emb(h, positions))
                rows = to_device([slot for _, slot, _, _ in batch], self.device)
                for layer, k, v, plan in layers:
                    h = prefill_rows(layer, h, k, v, rows, rotary, plan=plan)
        except BaseException as exc:
            self._refuse([request for request, _, _, _ in batch], exc)
            return
        for request, slot, embeds, ref_codes in batch:
            self._started_or_refused(request, slot, embeds, ref_codes)
        self.prefills += len(batch)
        self.prefill_passes += 1

    def _prefill_padded(self, batch: list) -> list:
        """Each request of ``batch`` whose prompt fits one of ``padded.lengths`` prefilled alone,
        right-padded to it (on CUDA by that length's graph), and started; returns the others (a
        longer prompt, or all of them without prefill lengths)."""
        rest = []
        for request, slot, embeds, ref_codes in batch:
            t = embeds.shape[1] - 1
            if t == 0 or self.padded.length_for(t) is None:
                rest.append((request, slot, embeds, ref_codes))
                continue
            try:
                self.padded.run(embeds[:, :-1], slot)
            except BaseException as exc:
                self._refuse([request], exc)
                continue
            self._started_or_refused(request, slot, embeds, ref_codes)
            self.prefills += 1
            self.prefill_passes += 1
        return rest

    def _started_or_refused(self, request: _Request, slot: int, embeds, ref_codes) -> None:
        """:meth:`_start` after a prefill; if it fails (its device writes: a failed device), the
        request is refused, not left taken from the queue without a slot."""
        request.admitted, request.prompt = time.time(), embeds.shape[1]
        try:
            self._start(request, slot, embeds, ref_codes)
        except BaseException as exc:
            self._refuse([request], exc)

    def _start(self, request: _Request, slot: int, embeds, ref_codes) -> None:
        """``slot``'s step input, position and decoder stream for ``request``, after its
        prefill."""
        torch = self.torch
        t = embeds.shape[1]
        self.step_in[slot] = embeds[0, -1:]
        self.pos[slot] = t - 1
        context = torch.zeros(
            self.codebooks, self.opts.decode_context, dtype=torch.long, device=self.device
        )
        if ref_codes is not None:  # the reference's last frames: the voice continues from them
            tail = ref_codes[:, -self.opts.decode_context :]
            context[:, -tail.shape[1] :] = tail.clamp(max=self.codec_size - 1)
        self.history[slot] = context
        if self.mimi is not None:  # a new decoder stream; a reference's last frames lead into it
            # lazy: serving.gpu.slots imports torch (optional: the gpu extra)
            from serving.gpu.slots import bucket

            self.mimi.reset([slot])
            if ref_codes is not None:
                self.mimi.prime_decoder(
                    slot, context[:, -tail.shape[1] :], n=bucket(slot + 1, self.opts.max_batch)
                )
        self.live[slot] = 1  # the last device write: what follows cannot fail
        request.max_frames = self._max_frames(request.text)
        request.slot = slot
        self._slots[slot] = request

    def _max_frames(self, text: str) -> int:
        bound = self.opts.max_audio_s
        if self.dummy:
            bound = min(bound, max(0.4, len(text) * self.opts.dummy_s_per_char))
        return max(1, int(round(bound * FRAME_HZ)))

    # --- one frame for every busy slot ---------------------------------------------------------

    def _run_step(self, n: int) -> None:
        self.noise.uniform_()
        if not (self.opts.cuda_graphs and self.device.type == "cuda"):
            self._step(n)
            return
        graph = self._graphs.get(n)
        if graph is None:
            try:
                graph = self._capture(n)
            except Exception as exc:  # noqa: BLE001 - recorded, and the step runs eagerly
                log.warning("CSM step capture failed for batch %d (%s); running eagerly", n, exc)
                self.opts.cuda_graphs = False
                self.identity.settings["cuda_graphs"] = (
                    f"off: capture failed ({type(exc).__name__})"
                )
                self._step(n)
                return
            self._graphs[n] = graph
        graph.replay()

    def _capture(self, n: int, fn=None):
        """``fn(n)`` (default: the frame step) as a CUDA graph, after two eager warm-up calls."""
        # lazy: serving.gpu.slots imports torch (optional: the gpu extra)
        from serving.gpu.slots import capture

        fn = fn or self._step
        graph = capture(lambda: fn(n), owner=self)
        log.info("CSM %s captured for batch %d", getattr(fn, "__name__", "step"), n)
        return graph

    def _step(self, n: int) -> None:
        """Rows 0..n-1: one backbone step from ``step_in``, then the depth decoder; the new frame
        lands in ``out_codes``, its embedding in ``step_in`` and its codes at the end of
        ``history``. Idle rows compute on stale inputs and are ignored."""
        # lazy: serving.gpu.slots imports torch (optional: the gpu extra)
        from serving.gpu.slots import decode_rows, rope_tables

        backbone = self.model.backbone_model
        x = self.step_in[
            :n
        ]  # [n, 1, H]: the last prompt token, or the last frame's codebooks summed
        pos = self.pos[:n]
        rows = self._rows[:n]
        rotary = rope_tables(*backbone.rotary_emb(x, pos[:, None]))
        h = decode_rows(
            backbone.layers, x, rotary, self.cache, self._plans, pos, rows, self._arange
        )
        hidden = self._norm(backbone.norm, h)[:, -1]
        codes = self._depth(hidden, n)
        self.out_codes[:n] = codes
        self.step_in[:n] = backbone.embed_tokens(codes[:, None, :])
        if self.mimi is None:  # the window codec decodes from the code history
            # a dummy model may say 2048+
            playable = codes.clamp(max=self.codec_size - 1)[:, :, None]
            self.history[:n] = self.torch.cat([self.history[:n, :, 1:], playable], dim=2)

    def _depth(self, hidden, n: int):
        """Codebooks 0..31 of one frame for ``n`` rows from the backbone's last hidden state."""
        # lazy: serving.gpu.slots imports torch (optional: the gpu extra)
        from serving.gpu.slots import decode_layer, gumbel, sample_top_k

        torch = self.torch
        m = self.model
        dd = m.depth_decoder.model
        heads = m.depth_decoder.codebooks_head
        opts = self.opts
        noise = gumbel(self.noise[:, :n])  # every codebook's, at once
        c0 = sample_top_k(m.lm_head(hidden), opts.top_k, opts.temperature, gumbel_noise=noise[0])
        codes = [c0]
        ks = [k[:n] for k in self.depth_cache.k]
        vs = [v[:n] for v in self.depth_cache.v]
        rows = self._rows[:n]
        for p in range(self.codebooks):
            if p == 0:
                step_in = hidden[:, None, :]
            else:
                step_in = dd.embed_tokens(codes[-1][:, None] + (p - 1) * dd.vocab_size)
            x = dd.inputs_embeds_projector(step_in)
            pos = self._depth_pos[p, :n]
            rotary, mask = self._depth_rope[p], self._depth_mask[p]
            for layer, k, v, plan in zip(dd.layers, ks, vs, self._depth_plans, strict=True):
                x = decode_layer(layer, x, rotary, k, v, pos, mask, rows=rows, plan=plan)
            if p == 0:
                continue  # position 0 holds the backbone state; position 1 predicts codebook 1
            logits = torch.nn.functional.linear(
                self._norm(dd.norm, x)[:, -1], heads.weight[p - 1].T
            )
            codes.append(sample_top_k(logits, opts.top_k, opts.temperature, gumbel_noise=noise[p]))
        # position 0 predicts nothing; position p (1..31) predicted codebook p from codebook p-1
        return torch.stack(codes[: self.codebooks], dim=1)

    def _decode(self, n: int) -> None:
        """Rows 0..n-1: the last frame of each row's code window through Mimi into ``audio``."""
        values = self.model.codec_model.decode(self.history[:n]).audio_values  # [n, 1, W*frame]
        self.audio[:n] = values[:, 0, -self.frame_samples :].float().nan_to_num().clamp(-1, 1)

    def _run_decode(self, n: int) -> None:
        """Rows 0..n-1: the new frame through Mimi into ``audio``. Streaming: every row advances
        its decoder stream (a free row's is reset when a request takes it), in a CUDA graph per
        bucket; window: transformers' Mimi eagerly (not capturable: a failed capture also leaves the
        CUDA generator unusable, so none is tried)."""
        if self.mimi is None:
            self._decode(n)
            return
        values = self.mimi.decode(self.out_codes[:n].clamp(max=self.codec_size - 1))
        self.audio[:n] = values.float().nan_to_num().clamp(-1, 1)
