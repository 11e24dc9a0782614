"""A native full-duplex model on the GPU: Moshi (transformers' ``MoshiForConditionalGeneration``).

Moshi listens and speaks at once in Mimi frames (12.5 Hz, 80 ms): per frame it reads the user's
audio codes and its own last codes and text token, and writes one text token and 8 audio codes.
One :class:`MoshiEngine` per process holds the model; every live session owns a slot of its KV
cache (:class:`serving.gpu.slots.SlotCache`, per-row positions). A GPU thread takes the frames
that sessions handed in, waits at most ``gather_ms`` for the other busy sessions' frames, and
advances all of them in one batched step:

1. Mimi encodes each session's new frame (``codec: streaming``, the default:
   :mod:`serving.gpu.mimi_static`, one frame per call over the slot's own codec state) into its
   first 8 codebooks; ``codec: window`` instead encodes the last ``codec_context`` frames with
   transformers' Mimi and keeps the newest frame (Mimi is causal: a window's last frame is the
   streaming encoding up to the encoder transformer's longer context);
2. the temporal transformer (7B in the moshi-7b configuration) reads the sum of the text
   embedding and the 16 audio embeddings (Moshi's 8, the user's 8; codebooks 1–7 one frame
   behind codebook 0, Moshi's acoustic delay) and predicts the text token;
3. the depth transformer predicts Moshi's 8 codebooks one after another from that state;
4. Mimi decodes Moshi's newest frame into 1,920 samples at 24 kHz (streaming: over the slot's
   decoder state; window: the last frames decoded whole).

A session that handed in no frame this step is not advanced (its position and its codec state
stay; whatever the step wrote at that position is overwritten by its next real step). The
temporal transformer attends the first ``L`` positions of its cache, ``L`` the length bucket
(``serving.gpu.lm_slots.length_bucket``: 256, 512, ... up to ``max_len``) holding every slot of
the batch bucket, not the whole ``max_len``: a session 10 s in reads 256 frames of keys, not
2,048. Every shape in a step depends on the batch bucket and the length bucket only, so steps 2–3
run as one CUDA graph per (bucket, length), and the streaming codec's encode and decode as one
per bucket (``MimiGraphs``); the window codec runs
eagerly (transformers' Mimi cannot be captured, and a failed capture would leave the CUDA
generator unusable).

With dummy weights the text is token noise (no tokenizer: no transcript) and the audio is noise;
the protocol and the timing are real. :mod:`serving.duplex.native` serves an engine behind fdb's
native session protocol.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass

import numpy as np

from fdb.errors import FdbError
from fdb.models import BackendIdentity
from fdb.provenance import package_version

log = logging.getLogger("fdb.serving")

RATE = 24000
FRAME_HZ = 12.5
LOG_EVERY = 500  # steps between two timing lines in the log


@dataclass
class MoshiOptions:
    max_batch: int = 32  # sessions at once (the server's max_sessions should not exceed it)
    max_len: int = 2048  # frames per session (164 s); Moshi's own context is 3000
    text_temperature: float = 0.7
    text_top_k: int = 25
    audio_temperature: float = 0.8
    audio_top_k: int = 250
    codec_context: int = 8  # codec "window": frames of Mimi context per encoded / decoded frame
    # "streaming": serving.gpu.mimi_static (one frame per call over per-slot state, a CUDA graph
    # per bucket); "window": transformers' Mimi over the last codec_context frames, eagerly
    codec: str = "streaming"
    gather_ms: float = 2.0  # how long a step waits for the other busy sessions' frames
    cuda_graphs: bool = True
    # serving.gpu.slots.fuse_layers on the temporal transformer (fused QKV and gating
    # projections, RMSNorm and rotary embedding in fewer kernels); False: the modules' own
    fuse: bool = True


@dataclass
class _Frame:
    slot: int
    samples: np.ndarray  # 1920 float32 at 24 kHz
    future: Future


class MoshiEngine:
    """The shared Moshi model, its slots and its step thread."""

    def __init__(
        self,
        model,
        options: MoshiOptions,
        tokenizer=None,
        dummy: bool = True,
        weights_label: str = "",
    ):
        # lazy: torch is optional (the gpu extra)
        import torch

        from serving.gpu.slots import SlotCache, depth_tables

        self.torch = torch
        self.model = model
        self.opts = options
        self.tokenizer = tokenizer
        config = model.config
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self.k = config.num_codebooks  # 8 per stream
        self.audio_pad = config.audio_vocab_size  # the embeddings' extra row: "no code yet"
        codec = config.audio_encoder_config
        self.codec_size = codec.codebook_size
        self.frame = int(round(codec.sampling_rate / codec.frame_rate))
        decoder = model.decoder.model
        attn = decoder.layers[0].self_attn
        s, w = options.max_batch, options.codec_context
        self.cache = SlotCache(
            len(decoder.layers),
            s,
            attn.num_key_value_heads,
            options.max_len,
            attn.head_dim,
            self.device,
            self.dtype,
        )
        depth = model.depth_decoder
        dattn = depth.layers[0].self_attn
        self.depth_cache = SlotCache(
            len(depth.layers),
            s,
            dattn.num_key_value_heads,
            self.k,
            dattn.head_dim,
            self.device,
            self.dtype,
        )
        zeros = dict(device=self.device, dtype=torch.long)
        self.pos = torch.zeros(s, **zeros)
        self.active = torch.zeros(s, dtype=torch.bool, device=self.device)
        self.text = torch.zeros(s, **zeros)  # the last text token
        # the last two frames of codes per stream ([:, 0] newest): Moshi's 8, then the user's 8
        self.codes = torch.full((s, 2, 2 * self.k), self.audio_pad, **zeros)
        self.user_audio = torch.zeros(s, 1, w * self.frame, dtype=torch.float32, device=self.device)
        self.out_history = torch.zeros(s, self.k, w, **zeros)
        self.out_audio = torch.zeros(s, self.frame, dtype=torch.float32, device=self.device)
        self._arange = torch.arange(options.max_len, device=self.device)
        self._positions = [0] * s  # self.pos on the host: the length bucket of a step
        self._codebook = [
            torch.tensor([c], device=self.device) for c in range(self.k)
        ]  # no copies in a graph
        self._rows = torch.arange(s, device=self.device)
        # the depth steps' positions and causal masks, made once (the same in every step)
        self._depth_pos, self._depth_mask = depth_tables(self.k, s, self.device)
        self._plans = [None] * len(decoder.layers)
        # lazy: serving.gpu.slots imports torch (optional: the gpu extra)
        from serving.gpu.slots import fuse_layers, module_norm, rms_norm

        self._norm = rms_norm if options.fuse else module_norm
        if options.fuse:
            self._plans = fuse_layers(decoder.layers, attn.num_key_value_heads, attn.head_dim)
        if options.codec not in ("streaming", "window"):
            raise FdbError(f"Moshi codec {options.codec!r} is not known", "use streaming or window")
        self.mimi = None
        if options.codec == "streaming":
            # lazy: serving.gpu.mimi_static imports torch (optional: the gpu extra)
            from serving.gpu.mimi_static import MimiGraphs, StaticMimi

            self.mimi = MimiGraphs(
                StaticMimi(model.audio_encoder, s, num_quantizers=self.k),
                cuda_graphs=options.cuda_graphs,
            )
            self.user_frame = torch.zeros(s, self.frame, dtype=torch.float32, device=self.device)
        # the sampling's uniform numbers, drawn before each step outside its graph
        self.text_noise = torch.zeros(s, options.text_top_k, device=self.device)
        self.audio_noise = torch.zeros(self.k, s, options.audio_top_k, device=self.device)
        self._graphs: dict[tuple[str, int], object] = {}
        self._free = list(range(s))
        self._lock = threading.Lock()
        self._pending: dict[int, _Frame] = {}
        self._resets: set[int] = set()
        self._wake = threading.Condition(self._lock)
        self._stop = False
        self.steps = 0
        self.step_s = 0.0
        self.rows = 0
        self.identity = BackendIdentity(
            kind="native",
            name="transformers/moshi",
            version=package_version("transformers"),
            settings={
                "weights": weights_label,
                "dummy": dummy,
                "max_batch": s,
                "max_len": options.max_len,
                "cuda_graphs": options.cuda_graphs,
                "codec": options.codec,
                "fused_layers": options.fuse,
                "codec_context_frames": w if options.codec == "window" else None,
                "frame_hz": FRAME_HZ,
                "gather_ms": options.gather_ms,
            },
        )
        self.warm_s = self._warm()
        self._thread = threading.Thread(target=self._run, name="moshi-gpu", daemon=True)
        self._thread.start()

    def _warm(self) -> float:
        """Every bucket's step once (its CUDA graphs captured) before the first session, so no
        session pays for a capture; all slots are free, so what the steps write is never read."""
        # lazy: serving.gpu.lm_slots and serving.gpu.slots import torch (the gpu extra)
        from serving.gpu.lm_slots import length_bucket
        from serving.gpu.slots import bucket

        started = time.perf_counter()
        if not (self.opts.cuda_graphs and self.device.type == "cuda"):
            return 0.0
        buckets = sorted(
            {bucket(b, self.opts.max_batch) for b in range(1, self.opts.max_batch + 1)}
        )
        max_len = self.opts.max_len
        lengths = sorted({length_bucket(p, max_len) for p in range(1, max_len + 1)})
        with self.torch.inference_mode():
            if self.mimi is not None:
                self.mimi.warm(buckets)
            for n in buckets:
                for length in lengths:
                    self._run_graph("step", n, self._step, length)
        log.info(
            "Moshi buckets %s, lengths %s warm in %.1f s",
            buckets,
            lengths,
            time.perf_counter() - started,
        )
        return round(time.perf_counter() - started, 1)

    # --- sessions ------------------------------------------------------------------------------

    def open(self) -> int:
        """A free slot for a new session (its state reset); FdbError when all are taken."""
        with self._lock:
            if not self._free:
                raise FdbError(
                    f"all {self.opts.max_batch} Moshi slots are in use",
                    "lower max_sessions to the node's max_batch, or raise max_batch",
                )
            slot = self._free.pop(0)
            self._resets.add(slot)  # cleared by the step thread before the slot's first step
        return slot

    def close(self, slot: int) -> None:
        with self._lock:
            self._pending.pop(slot, None)
            self._resets.add(slot)  # back to position 0: its stale rows stay in every length
            if slot not in self._free:
                self._free.append(slot)
                self._free.sort()

    def submit(self, slot: int, samples: np.ndarray) -> Future:
        """One 80 ms frame of the session's input (24 kHz float32); the future gives
        ``(text, samples)``: the text of Moshi's token ('' when none) and its 80 ms of audio."""
        future: Future = Future()
        frame = np.zeros(self.frame, dtype=np.float32)
        frame[: min(len(samples), self.frame)] = samples[: self.frame]
        with self._lock:
            if slot in self._pending:
                raise FdbError(
                    f"slot {slot} handed in a frame before its last one was answered",
                    "send one unit at a time",
                )
            self._pending[slot] = _Frame(slot, frame, future)
            self._wake.notify()
        return future

    def shutdown(self) -> None:
        with self._lock:
            self._stop = True
            self._wake.notify()
        self._thread.join(timeout=10)

    # --- the step thread -----------------------------------------------------------------------

    def _run(self) -> None:
        with self.torch.inference_mode():
            while True:
                frames = self._gather()
                if frames is None:
                    return
                try:
                    self._advance(frames)
                except BaseException as exc:  # every frame of the step fails with the error
                    log.exception("Moshi step failed")
                    error = FdbError(f"Moshi step failed: {exc}", "see the server log")
                    for frame in frames:
                        frame.future.set_exception(error)

    def _gather(self) -> list[_Frame] | None:
        """The frames handed in: after the first, up to ``gather_ms`` for the other open slots."""
        with self._lock:
            while not self._pending and not self._stop:
                self._wake.wait()
            if self._stop:
                return None
            # (the slot resets below run in this thread, between steps)
            deadline = time.monotonic() + self.opts.gather_ms / 1000
            busy = self.opts.max_batch - len(self._free)
            while len(self._pending) < busy and (left := deadline - time.monotonic()) > 0:
                self._wake.wait(left)
            frames = list(self._pending.values())
            self._pending.clear()
            resets, self._resets = sorted(self._resets), set()
        for slot in resets:  # a new (or closed) session's slot starts empty
            self.pos[slot] = 0
            self._positions[slot] = 0
            self.text[slot] = 0
            self.codes[slot] = self.audio_pad
            self.user_audio[slot] = 0
            self.out_history[slot] = 0
        if resets and self.mimi is not None:
            self.mimi.reset(resets)  # its codec streams too (outside any graph)
        return frames

    def _advance(self, frames: list[_Frame]) -> None:
        # lazy: serving.gpu.lm_slots and serving.gpu.slots import torch (the gpu extra)
        from serving.gpu.lm_slots import length_bucket
        from serving.gpu.slots import bucket

        torch = self.torch
        started = time.perf_counter()
        slots = [f.slot for f in frames]
        n = bucket(max(slots) + 1, self.opts.max_batch)
        # every row of the bucket writes at its position, so the length holds all of them
        length = length_bucket(max(self._positions[:n]) + 1, self.opts.max_len)
        index = torch.tensor(slots, device=self.device)
        new = torch.from_numpy(np.stack([f.samples for f in frames])).to(self.device)
        self.active.zero_()
        self.active[index] = True
        if self.mimi is None:
            self.user_audio[index, 0] = torch.cat(
                [self.user_audio[index, 0, self.frame :], new], dim=1
            )
        else:
            self.user_frame[index] = new
        self._encode(n)
        self.text_noise.uniform_()
        self.audio_noise.uniform_()
        self._run_graph("step", n, self._step, length)
        self._decode(n)
        self.pos[index] += 1
        audio = self.out_audio[index].cpu().numpy()
        texts = self.text[index].tolist()
        positions = self.pos[index].tolist()  # one transfer, not one per session
        for slot, position in zip(slots, positions, strict=True):
            self._positions[slot] = position
        self.steps += 1
        self.step_s += time.perf_counter() - started
        self.rows += len(frames)
        if self.steps % LOG_EVERY == 0:
            log.info(
                "Moshi: %d steps, %.1f ms per step, %.1f sessions per step",
                self.steps,
                1000 * self.step_s / self.steps,
                self.rows / self.steps,
            )
        for frame, samples, token, position in zip(frames, audio, texts, positions, strict=True):
            if position >= self.opts.max_len:
                frame.future.set_exception(
                    FdbError(
                        f"the session reached the engine's {self.opts.max_len} frames",
                        "open a new session, or raise max_len",
                    )
                )
            else:
                frame.future.set_result((self._text(token), samples))

    def _text(self, token: int) -> str:
        if self.tokenizer is None:
            return ""
        return self.tokenizer.decode([token], skip_special_tokens=True)

    def _run_graph(self, name: str, n: int, fn, *shape: int) -> None:
        """``fn(n, *shape)``, replayed from its CUDA graph (captured at the first call)."""
        # lazy: serving.gpu.slots imports torch (optional: the gpu extra)
        from serving.gpu.slots import capture

        key = (name, n, *shape)
        graph = self._graphs.get(key)
        if not (self.opts.cuda_graphs and self.device.type == "cuda") or graph is False:
            fn(n, *shape)
            return
        if graph is None:
            try:
                graph = capture(lambda: fn(n, *shape), owner=self)
                log.info("Moshi %s captured for batch %d %s", name, n, shape)
            except Exception as exc:  # noqa: BLE001 - recorded; this part runs eagerly
                log.warning(
                    "Moshi %s capture failed for batch %d %s (%s); running eagerly",
                    name,
                    n,
                    shape,
                    exc,
                )
                self.identity.settings[f"graph_{name}"] = (
                    f"off: capture failed ({type(exc).__name__})"
                )
                self._graphs[key] = False
                fn(n, *shape)
                return
            self._graphs[key] = graph
        graph.replay()

    # --- one frame for rows 0..n-1 (only the active ones keep their result) -------------------

    def _encode(self, n: int) -> None:
        """The user's newest frame of codes from a window of input, into ``codes[:, 0, k:]``."""
        torch = self.torch
        if self.mimi is not None:  # the streaming codec: this frame only, over the slot's state
            newest = self.mimi.encode(self.user_frame[:n], self.active[:n])  # [n, 8]
        else:  # a window of the last frames, eagerly (transformers' Mimi is not capturable)
            newest = self.model.audio_encoder.encode(
                self.user_audio[:n].to(self.dtype), num_quantizers=self.k
            ).audio_codes[:, :, -1]
        keep = self.active[:n, None]
        shifted = torch.where(keep[:, :, None], self.codes[:n, :1], self.codes[:n, 1:])
        self.codes[:n, 1:] = shifted
        self.codes[:n, 0, self.k :] = torch.where(keep, newest, self.codes[:n, 0, self.k :])

    def _inputs(self, n: int):
        """The temporal transformer's input: text + Moshi's and the user's codes, codebook 0 of
        the newest frame and codebooks 1..7 of the frame before (the acoustic delay)."""
        m = self.model
        x = m.decoder.model.embed_tokens(self.text[:n])
        for stream in range(2 * self.k):
            frame = 0 if stream % self.k == 0 else 1
            x = x + m.embed_tokens[stream](self.codes[:n, frame, stream])
        return x[:, None, :]

    def _step(self, n: int, length: int) -> None:
        """Rows 0..n-1 one frame on; the keys and values of the first ``length`` positions are
        attended."""
        # lazy: serving.gpu.slots imports torch (optional: the gpu extra)
        from serving.gpu.slots import decode_rows, rope_tables, sample_top_k

        torch = self.torch
        m, o = self.model, self.opts
        decoder = m.decoder.model
        pos = self.pos[:n]
        rows = self._rows[:n]
        h = self._inputs(n)
        rotary = decoder.layers[0].self_attn.rotary_emb  # the same angles in every layer
        angles = rope_tables(*rotary(h, pos[:, None]))
        h = decode_rows(
            decoder.layers, h, angles, self.cache, self._plans, pos, rows, self._arange, length
        )
        hidden = self._norm(decoder.norm, h)  # [n, 1, H]
        text = sample_top_k(
            m.decoder.lm_head(hidden[:, 0]), o.text_top_k, o.text_temperature, self.text_noise[:n]
        )
        codes = self._depth(hidden, text, n)
        keep = self.active[:n]
        self.text[:n] = torch.where(keep, text, self.text[:n])
        ours = torch.where(keep[:, None], codes, self.codes[:n, 0, : self.k])
        self.codes[:n, 0, : self.k] = ours
        if self.mimi is None:  # the window codec decodes from the code history
            playable = ours.clamp(max=self.codec_size - 1)[:, :, None]
            shifted = torch.cat([self.out_history[:n, :, 1:], playable], dim=2)
            self.out_history[:n] = torch.where(keep[:, None, None], shifted, self.out_history[:n])

    def _depth(self, hidden, text, n: int):
        """Moshi's 8 codebooks of this frame from the temporal state ``hidden`` [n, 1, H]."""
        # lazy: serving.gpu.slots imports torch (optional: the gpu extra)
        from serving.gpu.slots import decode_layer, gumbel, sample_top_k

        torch = self.torch
        depth, o = self.model.depth_decoder, self.opts
        ks = [k[:n] for k in self.depth_cache.k]
        vs = [v[:n] for v in self.depth_cache.v]
        rows = self._rows[:n]
        noise = gumbel(self.audio_noise[:, :n])  # every codebook's, at once
        codes = []
        token = text
        for c in range(self.k):
            index = self._codebook[c]
            embed = depth.text_embed_tokens(token) if c == 0 else depth.embed_tokens[c - 1](token)
            x = embed[:, None, :] + depth.input_projections(hidden, index)
            pos, mask = self._depth_pos[c, :n], self._depth_mask[c]
            for layer, k, v in zip(depth.layers, ks, vs, strict=True):
                x = decode_layer(layer, x, None, k, v, pos, mask, codebook=index, rows=rows)
            token = sample_top_k(
                depth.lm_heads(x, index)[:, 0],
                o.audio_top_k,
                o.audio_temperature,
                gumbel_noise=noise[c],
            )
            codes.append(token)
        return torch.stack(codes, dim=1)

    def _decode(self, n: int) -> None:
        if self.mimi is not None:
            playable = self.codes[:n, 0, : self.k].clamp(max=self.codec_size - 1)
            values = self.mimi.decode(playable, self.active[:n])  # [n, frame]
        else:
            values = self.model.audio_encoder.decode(self.out_history[:n]).audio_values[
                :, 0, -self.frame :
            ]
        self.out_audio[:n] = values.float().nan_to_num().clamp(-1, 1)
