"""Mimi with static shapes: a streaming encoder and decoder for a fixed number of slots whose
every call can be captured in a CUDA graph.

transformers' ``MimiModel`` streams through objects that grow (``MimiConv1dPaddingCache``, a
``DynamicCache`` whose keys are concatenated every call), so it cannot be captured, and eagerly
one frame costs hundreds of tiny kernel launches. :class:`StaticMimi` runs the same modules
(their own ``nn.Conv1d`` / ``nn.ConvTranspose1d`` / linear / norm / quantizer weights; nothing
is copied) over state that lives in tensors allocated once, one row per *slot*:

- every causal ``MimiConv1d`` keeps its last ``padding_total`` inputs (``[slots, C, P]``); a
  ``replicate``-padded one (the encoder's downsampling) starts from its first input column, as
  transformers' padding cache does;
- every ``MimiConvTranspose1d`` keeps the tail of its last output that overlaps the next frame
  (without the bias), added to the next frame's head: the overlap-add of a streaming
  transposed convolution;
- each transformer keeps a ring of ``sliding_window + tokens_per_call - 1`` keys and values per
  layer, the absolute position of what each ring entry holds, and the slot's next position
  (rotary angles and the sliding-window mask follow from them, row by row).

A call is one 80 ms frame for every slot: :meth:`StaticMimi.encode` takes ``[n, frame]``
samples and returns ``[n, K]`` codes, :meth:`StaticMimi.decode` takes ``[n, K]`` codes and
returns ``[n, frame]`` samples (rows ``0..n-1``). State is written with ``copy_`` / ``scatter_``
only; nothing branches on a tensor's value or reads one on the host. ``active`` (``[n]`` bool)
keeps the rows that are off this call exactly as they were (their output is garbage): slots may
sit at different positions. :meth:`StaticMimi.reset` zeroes slots for a new session.

What it equals (tests/serving/gpu/test_mimi_static.py, float32 on CPU): the encoder equals
transformers' streaming encode (``encode(frame, padding_cache=…, encoder_past_key_values=…,
use_streaming=True)`` frame after frame), which equals its encode of the whole signal. The
decoder equals transformers' decode of all codes so far (the last frame of it): transformers'
frame-by-frame ``decode(…, decoder_past_key_values=…)`` keeps no convolution state, so its
frames restart from zero padding; serving/gpu's window of the last frames decoded whole
approximates the same full decode, up to the window.

:class:`MimiGraphs` captures encode and decode as CUDA graphs (one per batch bucket, static
input and output buffers) on CUDA and runs eagerly elsewhere::

    from serving.gpu.mimi_static import MimiGraphs, StaticMimi

    # Moshi; CSM: model.codec_model
    mimi = StaticMimi(model.audio_encoder, slots=16, num_quantizers=8)
    graphs = MimiGraphs(mimi)            # captures lazily per bucket n (the first call of each)
    graphs.reset([slot])                 # a new session takes ``slot`` (outside any graph)
    codes = graphs.encode(pcm, active)   # pcm [n, 1920] float, active [n] bool -> [n, 8] long
    audio = graphs.decode(codes, active) # [n, 8] long -> [n, 1920] float
    graphs.prime_decoder(slot, ref_codes[:, -8:])  # CSM: a reference's last frames as context
    # the results are the graphs' output buffers: copy what must outlive the next call
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
from torch import nn
from torch.nn import functional as F

from serving.gpu.slots import capture


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class _Conv:
    """A causal ``MimiConv1d`` with its last ``padding_total`` inputs kept per slot."""

    def __init__(self, module: nn.Module, slots: int, device, dtype):
        if not module.causal:
            raise ValueError("StaticMimi streams causal convolutions only (use_causal_conv)")
        if module.pad_mode not in ("constant", "replicate"):
            raise ValueError(
                f"padding mode {module.pad_mode!r} cannot stream (constant or replicate)"
            )
        self.conv = module.conv
        self.pad = int(module.padding_total)
        self.replicate = module.pad_mode == "replicate"
        self.state = torch.zeros(slots, module.in_channels, self.pad, device=device, dtype=dtype)

    def __call__(
        self, x: torch.Tensor, fresh: torch.Tensor, active: torch.Tensor | None
    ) -> torch.Tensor:
        if self.pad == 0:
            return self.conv(x)
        state = self.state[: x.shape[0]]
        prev = state
        if self.replicate:  # a new stream's history is its first column (transformers' _cache_init)
            prev = torch.where(fresh[:, None, None], x[..., :1].expand_as(state), state)
        padded = torch.cat([prev, x], dim=-1)
        out = self.conv(padded)
        tail = padded[..., -self.pad :]
        state.copy_(tail if active is None else torch.where(active[:, None, None], tail, state))
        return out


class _ConvTranspose:
    """A causal ``MimiConvTranspose1d`` with the overlap into the next frame kept per slot."""

    def __init__(self, module: nn.Module, slots: int, device, dtype):
        conv = module.conv
        if module.padding_left != 0 or conv.padding[0] != 0 or conv.output_padding[0] != 0:
            raise ValueError("StaticMimi streams transposed convolutions trimmed on the right only")
        self.conv = conv
        self.stride = conv.stride[0]
        self.overlap = int(module.padding_right)  # kernel - stride
        self.state = torch.zeros(slots, conv.out_channels, self.overlap, device=device, dtype=dtype)

    def __call__(
        self, x: torch.Tensor, fresh: torch.Tensor, active: torch.Tensor | None
    ) -> torch.Tensor:
        length = x.shape[-1] * self.stride
        if self.overlap > length:
            raise ValueError("a frame is shorter than the transposed convolution's overlap")
        y = self.conv(x)  # [n, C, length + overlap]
        if self.overlap == 0:
            return y
        state = self.state[: x.shape[0]]
        out = torch.cat([y[..., : self.overlap] + state, y[..., self.overlap : length]], dim=-1)
        tail = y[..., length:]
        if self.conv.bias is not None:  # the next frame's own output carries the bias once
            tail = tail - self.conv.bias[:, None]
        state.copy_(tail if active is None else torch.where(active[:, None, None], tail, state))
        return out


class _Transformer:
    """A ``MimiTransformerModel`` over a ring of keys and values per slot (sliding window)."""

    def __init__(self, module: nn.Module, config, slots: int, tokens: int, device, dtype):
        self.module = module
        self.layers = list(module.layers)
        attn = self.layers[0].self_attn
        self.heads, self.kv_heads, self.head_dim = (
            attn.num_heads,
            attn.num_key_value_heads,
            attn.head_dim,
        )
        self.scaling = attn.scaling
        self.window = int(config.sliding_window or config.max_position_embeddings)
        self.tokens = tokens
        self.ring = self.window + tokens - 1  # every key a call's queries see, after its writes
        shape = (slots, self.kv_heads, self.ring, self.head_dim)
        self.k = [torch.zeros(shape, device=device, dtype=dtype) for _ in self.layers]
        self.v = [torch.zeros(shape, device=device, dtype=dtype) for _ in self.layers]
        self.held = torch.full(
            (slots, self.ring), -1, device=device, dtype=torch.long
        )  # position per entry
        self.pos = torch.zeros(slots, device=device, dtype=torch.long)  # the next token's position
        self.steps = torch.arange(tokens, device=device, dtype=torch.long)

    def states(self) -> list[torch.Tensor]:
        return [*self.k, *self.v, self.held, self.pos]

    def reset(self, index: torch.Tensor) -> None:
        for t in [*self.k, *self.v, self.pos]:
            t.index_fill_(0, index, 0)
        self.held.index_fill_(0, index, -1)

    def __call__(self, x: torch.Tensor, active: torch.Tensor | None) -> torch.Tensor:
        n, t, _ = x.shape
        pos = self.pos[:n]
        positions = pos[:, None] + self.steps  # [n, T]
        entries = positions % self.ring
        held_now = self.held[:n].scatter(1, entries, positions)
        q_pos = positions[:, :, None]
        k_pos = held_now[:, None, :]  # [n, 1, R]
        mask = ((k_pos >= 0) & (k_pos <= q_pos) & (k_pos > q_pos - self.window))[
            :, None
        ]  # [n, 1, T, R]
        cos, sin = self.module.rotary_emb(x, positions)
        cos, sin = cos[:, None], sin[:, None]
        where = entries[:, None, :, None].expand(n, self.kv_heads, t, self.head_dim)
        groups = self.heads // self.kv_heads
        h = x
        for layer, k_cache, v_cache in zip(self.layers, self.k, self.v, strict=True):
            attn = layer.self_attn
            y = layer.input_layernorm(h)
            q = attn.q_proj(y).view(n, t, self.heads, self.head_dim).transpose(1, 2)
            k = attn.k_proj(y).view(n, t, self.kv_heads, self.head_dim).transpose(1, 2)
            v = attn.v_proj(y).view(n, t, self.kv_heads, self.head_dim).transpose(1, 2)
            q = q * cos + _rotate_half(q) * sin
            k = k * cos + _rotate_half(k) * sin
            keys, values = k_cache[:n], v_cache[:n]
            keys.scatter_(2, where, k)  # an off row writes entries that no later query sees
            values.scatter_(2, where, v)
            if groups > 1:  # transformers' repeat_kv: kv head h serves query heads h*groups..
                shape = (n, self.heads, self.ring, self.head_dim)
                keys = (
                    keys[:, :, None]
                    .expand(n, self.kv_heads, groups, self.ring, self.head_dim)
                    .reshape(shape)
                )
                values = (
                    values[:, :, None]
                    .expand(n, self.kv_heads, groups, self.ring, self.head_dim)
                    .reshape(shape)
                )
            out = F.scaled_dot_product_attention(
                q, keys, values, attn_mask=mask, scale=self.scaling
            )
            out = attn.o_proj(out.transpose(1, 2).reshape(n, t, self.heads * self.head_dim))
            h = h + layer.self_attn_layer_scale(out)
            h = h + layer.mlp_layer_scale(layer.mlp(layer.post_attention_layernorm(h)))
        if active is None:
            self.held[:n].copy_(held_now)
            pos.add_(t)
        else:
            self.held[:n].copy_(torch.where(active[:, None], held_now, self.held[:n]))
            pos.add_(active.long() * t)
        return h


def _resnet(block: nn.Module, convs: dict, x, fresh, active):
    h = x
    for sub in block.block:
        h = convs[id(sub)](h, fresh, active) if id(sub) in convs else sub(h)
    shortcut = block.shortcut
    residual = convs[id(shortcut)](x, fresh, active) if id(shortcut) in convs else shortcut(x)
    return residual + h


class StaticMimi:
    """Streaming Mimi encode and decode for ``slots`` rows over preallocated state.

    ``model`` is a loaded transformers ``MimiModel`` (its weights are used in place);
    ``num_quantizers`` the codebooks :meth:`encode` returns (Moshi 8, CSM 32; default all).
    Rows ``0..n-1`` of a call are its ``n`` slots; ``n`` defaults to the input's rows.
    """

    def __init__(self, model: nn.Module, slots: int, num_quantizers: int | None = None):
        # lazy: transformers is optional (the gpu extra)
        from transformers.models.mimi.modeling_mimi import MimiConv1d, MimiConvTranspose1d

        config = model.config
        param = next(model.parameters())
        device, dtype = param.device, param.dtype
        self.model = model
        self.slots = slots
        self.device, self.dtype = device, dtype
        self.num_quantizers = num_quantizers or config.num_quantizers
        if not config.num_semantic_quantizers <= self.num_quantizers <= config.num_quantizers:
            raise ValueError(
                f"num_quantizers {self.num_quantizers} is outside "
                f"[{config.num_semantic_quantizers}, {config.num_quantizers}]"
            )
        if model.downsample is None or model.upsample is None:
            raise ValueError(
                "StaticMimi needs Mimi's downsampling (frame_rate != encodec_frame_rate)"
            )
        self.frame = int(config.frame_size)
        hop = self.frame // model.downsample.conv.stride[0]  # samples per encoder-transformer token
        tokens = self.frame // hop

        def wrap(module):
            if isinstance(module, MimiConv1d):
                return _Conv(module, slots, device, dtype)
            if isinstance(module, MimiConvTranspose1d):
                return _ConvTranspose(module, slots, device, dtype)
            return None

        self._enc: dict[int, object] = {}
        self._dec: dict[int, object] = {}
        for table, root in ((self._enc, model.encoder), (self._dec, model.decoder)):
            for module in root.modules():
                wrapped = wrap(module)
                if wrapped is not None:
                    table[id(module)] = wrapped
        self._downsample = _Conv(model.downsample, slots, device, dtype)
        self._upsample = _ConvTranspose(model.upsample, slots, device, dtype)
        self._enc_tr = _Transformer(model.encoder_transformer, config, slots, tokens, device, dtype)
        self._dec_tr = _Transformer(model.decoder_transformer, config, slots, tokens, device, dtype)
        quantizer = model.quantizer
        for rvq in (
            quantizer.semantic_residual_vector_quantizer,
            quantizer.acoustic_residual_vector_quantizer,
        ):
            for layer in rvq.layers:
                layer.codebook.embed  # noqa: B018 - computed (and cached by transformers) now, not in a graph

    # --- state ---------------------------------------------------------------------------------

    def state_tensors(self) -> list[torch.Tensor]:
        """Every tensor that carries a slot's stream from one call to the next."""
        convs = [*self._enc.values(), *self._dec.values(), self._downsample, self._upsample]
        return [c.state for c in convs] + self._enc_tr.states() + self._dec_tr.states()

    def positions(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Frames encoded and decoded per slot (device tensors, [slots])."""
        t = self._enc_tr.tokens
        return self._enc_tr.pos // t, self._dec_tr.pos // t

    def reset(
        self, slots: Sequence[int] | torch.Tensor, encoder: bool = True, decoder: bool = True
    ) -> None:
        """Slots ``slots`` start new streams: their state zeroed, their positions 0. Runs
        ``index_fill_`` on the device (no host sync), outside any captured graph."""
        index = torch.as_tensor(slots, dtype=torch.long).to(self.device, non_blocking=True)
        parts = []
        if encoder:
            parts += [*self._enc.values(), self._downsample]
            self._enc_tr.reset(index)
        if decoder:
            parts += [*self._dec.values(), self._upsample]
            self._dec_tr.reset(index)
        for conv in parts:
            conv.state.index_fill_(0, index, 0)

    # --- one frame -----------------------------------------------------------------------------

    @torch.no_grad()
    def encode(self, frames: torch.Tensor, active: torch.Tensor | None = None) -> torch.Tensor:
        """``frames`` [n, frame] (or [n, 1, frame]) samples -> codes [n, num_quantizers] (long)."""
        n = frames.shape[0]
        x = frames.reshape(n, 1, self.frame).to(self.dtype)
        fresh = self._enc_tr.pos[:n] == 0
        for layer in self.model.encoder.layers:
            if id(layer) in self._enc:
                x = self._enc[id(layer)](x, fresh, active)
            elif hasattr(layer, "block"):
                x = _resnet(layer, self._enc, x, fresh, active)
            else:
                x = layer(x)
        x = self._enc_tr(x.transpose(1, 2), active).transpose(1, 2)
        x = self._downsample(x, fresh, active)
        codes = self.model.quantizer.encode(x, self.num_quantizers)  # [K, n, 1]: cdist + argmin
        return codes[:, :, 0].transpose(0, 1)

    @torch.no_grad()
    def decode(self, codes: torch.Tensor, active: torch.Tensor | None = None) -> torch.Tensor:
        """``codes`` [n, K] (long) -> samples [n, frame] in the model's dtype."""
        n = codes.shape[0]
        fresh = self._dec_tr.pos[:n] == 0
        x = self.model.quantizer.decode(codes[:, :, None])  # [n, hidden, 1]
        x = self._upsample(x, fresh, active)
        x = self._dec_tr(x.transpose(1, 2), active).transpose(1, 2)
        for layer in self.model.decoder.layers:
            if id(layer) in self._dec:
                x = self._dec[id(layer)](x, fresh, active)
            elif hasattr(layer, "block"):
                x = _resnet(layer, self._dec, x, fresh, active)
            else:
                x = layer(x)
        return x[:, 0]


def _set_active(buffer: torch.Tensor, active: torch.Tensor | None) -> None:
    if active is None:
        buffer.fill_(True)
    else:
        buffer.copy_(active)


class MimiGraphs:
    """:class:`StaticMimi`'s encode and decode as CUDA graphs, one per bucket of rows.

    Inputs are copied into static buffers, the graph replays, and the result is the graph's
    output buffer (``[n, K]`` codes, ``[n, frame]`` float32 samples): copy it if it must outlive
    the next call. ``active`` (``[n]`` bool, default all on) is a static buffer too. Without
    CUDA (or with ``cuda_graphs=False``) the same calls run eagerly. A capture warms up with
    every row off, so capturing never moves a stream.
    """

    def __init__(self, mimi: StaticMimi, cuda_graphs: bool = True):
        self.mimi = mimi
        s, dev = mimi.slots, mimi.device
        self.use_graphs = cuda_graphs and dev.type == "cuda"
        self.frames = torch.zeros(s, mimi.frame, device=dev, dtype=torch.float32)
        self.codes_in = torch.zeros(s, mimi.num_quantizers, device=dev, dtype=torch.long)
        self.enc_active = torch.ones(s, device=dev, dtype=torch.bool)
        self.dec_active = torch.ones(s, device=dev, dtype=torch.bool)
        self.codes_out = torch.zeros(s, mimi.num_quantizers, device=dev, dtype=torch.long)
        self.audio = torch.zeros(s, mimi.frame, device=dev, dtype=torch.float32)
        self._graphs: dict[tuple[str, int], torch.cuda.CUDAGraph] = {}
        self._pool = None

    def reset(self, slots: Iterable[int] | torch.Tensor) -> None:
        self.mimi.reset(list(slots) if not isinstance(slots, torch.Tensor) else slots)

    def _encode_rows(self, n: int) -> None:
        self.codes_out[:n].copy_(self.mimi.encode(self.frames[:n], self.enc_active[:n]))

    def _decode_rows(self, n: int) -> None:
        self.audio[:n].copy_(self.mimi.decode(self.codes_in[:n], self.dec_active[:n]))

    def _run(self, name: str, n: int, fn, active: torch.Tensor) -> None:
        if not self.use_graphs:
            fn(n)
            return
        graph = self._graphs.get((name, n))
        if graph is None:
            graph = self._capture(n, fn, active)
            self._graphs[(name, n)] = graph
        graph.replay()

    def _capture(self, n: int, fn, active: torch.Tensor) -> torch.cuda.CUDAGraph:
        keep = active[:n].clone()
        active[:n] = False  # the warm-up runs leave every stream as it was
        graph = capture(lambda: fn(n), pool=self._pool, owner=self)
        self._pool = graph.pool()
        active[:n] = keep
        return graph

    def warm(self, buckets: Iterable[int]) -> None:
        """Capture both graphs of each bucket now (before the first session)."""
        if not self.use_graphs:
            return
        for n in buckets:
            for name, fn, active in (
                ("encode", self._encode_rows, self.enc_active),
                ("decode", self._decode_rows, self.dec_active),
            ):
                if (name, n) not in self._graphs:
                    self._graphs[(name, n)] = self._capture(n, fn, active)

    def prime_decoder(self, slot: int, codes: torch.Tensor, n: int | None = None) -> None:
        """Run ``codes`` [K, F] (e.g. a voice reference's last frames) through ``slot``'s decoder
        stream, one replay per frame with only that slot on; ``n``: the bucket to replay
        (default every slot; it must hold ``slot``)."""
        n = self.mimi.slots if n is None else n
        if not 0 <= slot < n:
            raise ValueError(f"slot {slot} is outside the bucket of {n} rows")
        active = torch.zeros(n, dtype=torch.bool, device=self.mimi.device)
        active[slot] = True
        for f in range(codes.shape[1]):
            self.codes_in[slot].copy_(codes[:, f])
            self._set_and_run_decode(n, active)

    def _set_and_run_decode(self, n: int, active: torch.Tensor) -> None:
        _set_active(self.dec_active[:n], active)
        self._run("decode", n, self._decode_rows, self.dec_active)

    def encode(self, frames: torch.Tensor, active: torch.Tensor | None = None) -> torch.Tensor:
        """``frames`` [n, frame] float -> codes [n, K] (the output buffer's rows)."""
        n = frames.shape[0]
        self.frames[:n].copy_(frames.reshape(n, -1))
        _set_active(self.enc_active[:n], active)
        self._run("encode", n, self._encode_rows, self.enc_active)
        return self.codes_out[:n]

    def decode(self, codes: torch.Tensor, active: torch.Tensor | None = None) -> torch.Tensor:
        """``codes`` [n, K] long -> samples [n, frame] float32 (the output buffer's rows)."""
        n = codes.shape[0]
        self.codes_in[:n].copy_(codes)
        self._set_and_run_decode(n, active)
        return self.audio[:n]
