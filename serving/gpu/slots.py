"""Decoder steps over a KV cache with one slot per request: the batched core of the GPU nodes.

transformers' caches advance every row of a batch to the same position, so requests that start
at different times cannot share one. Here each request owns a *slot*: a row of a preallocated
per-layer key/value tensor ``[slots, kv_heads, max_len, head_dim]`` with its own position. A
decode step runs the rows ``0..n-1`` of the cache (``n`` a bucket: the smallest power of two
above the highest busy slot) with per-row positions, a per-row mask and per-row rotary angles.
Every shape in a step depends on ``n`` alone, so a step can be captured in a CUDA graph per
bucket. The layer weights are the transformers modules' own (``q_proj`` … ``mlp``); only the
cache handling is written here.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


def capture(fn, warmups: int = 2, pool=None) -> torch.cuda.CUDAGraph:
    """``fn()`` as a CUDA graph: ``warmups`` eager calls on a side stream first (kernels chosen
    and autotuned before capture), then one captured call; ``pool``: a memory pool to share with
    other graphs (``graph.pool()``)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(warmups):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool):
        fn()
    return graph


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding of ``x`` [n, heads, T, D] with ``cos``/``sin`` [n, T, D]."""
    return x * cos[:, None] + _rotate_half(x) * sin[:, None]


class SlotCache:
    """Keys and values of ``layers`` layers for ``slots`` requests of up to ``max_len`` tokens."""

    def __init__(
        self,
        layers: int,
        slots: int,
        kv_heads: int,
        max_len: int,
        head_dim: int,
        device: torch.device | str,
        dtype: torch.dtype,
    ):
        shape = (slots, kv_heads, max_len, head_dim)
        self.k = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(layers)]
        self.v = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(layers)]
        self.max_len = max_len

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.k + self.v)


def _project(proj: nn.Module, x: torch.Tensor, codebook: torch.Tensor | None) -> torch.Tensor:
    """A projection; ``codebook``: the weights of that codebook (Moshi's depth transformer)."""
    return proj(x) if codebook is None else proj(x, codebook)


def _qkv(
    attn: nn.Module, x: torch.Tensor, kv_heads: int, dim: int, codebook: torch.Tensor | None = None
):
    n, t, _ = x.shape
    q = _project(attn.q_proj, x, codebook).view(n, t, -1, dim).transpose(1, 2)
    k = _project(attn.k_proj, x, codebook).view(n, t, kv_heads, dim).transpose(1, 2)
    v = _project(attn.v_proj, x, codebook).view(n, t, kv_heads, dim).transpose(1, 2)
    return q, k, v


def _mlp_residual(
    layer: nn.Module, x: torch.Tensor, attended: torch.Tensor, codebook: torch.Tensor | None = None
) -> torch.Tensor:
    x = x + attended
    return x + _project(layer.mlp, layer.post_attention_layernorm(x), codebook)


def decode_layer(
    layer: nn.Module,
    x: torch.Tensor,
    cos: torch.Tensor | None,
    sin: torch.Tensor | None,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    pos: torch.Tensor,
    mask: torch.Tensor,
    codebook: torch.Tensor | None = None,
) -> torch.Tensor:
    """One token per row: ``x`` [n, 1, H] at per-row positions ``pos`` [n] (written into rows
    0..n-1 of the caches), ``mask`` [n, 1, 1, max_len] (True: attend); ``cos`` None: no rotary
    embedding; ``codebook``: per-codebook weights (Moshi's depth transformer)."""
    attn = layer.self_attn
    n = x.shape[0]
    kv_heads, dim = k_cache.shape[1], k_cache.shape[3]
    q, k, v = _qkv(attn, layer.input_layernorm(x), kv_heads, dim, codebook)
    heads = q.shape[1]
    if cos is not None:
        q, k = rope(q, cos, sin), rope(k, cos, sin)
    rows = torch.arange(n, device=x.device)
    k_cache[rows, :, pos] = k[:, :, 0]
    v_cache[rows, :, pos] = v[:, :, 0]
    # grouped-query attention without copying keys: the query heads of one key head become
    # that head's "sequence" (one token per row, so no causal order among them)
    groups = heads // kv_heads
    q = q.reshape(n, kv_heads, groups, dim)
    out = F.scaled_dot_product_attention(
        q, k_cache[:n], v_cache[:n], attn_mask=mask, scale=attn.scaling
    )
    out = _project(attn.o_proj, out.reshape(n, 1, heads * dim), codebook)
    return _mlp_residual(layer, x, out, codebook)


def prefill_layer(
    layer: nn.Module,
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot: int,
    start: int,
) -> torch.Tensor:
    """``T`` tokens of one request (``x`` [1, T, H]) at positions ``start..start+T-1`` of ``slot``,
    causal over everything the slot holds before them."""
    attn = layer.self_attn
    t = x.shape[1]
    kv_heads, dim = k_cache.shape[1], k_cache.shape[3]
    q, k, v = _qkv(attn, layer.input_layernorm(x), kv_heads, dim)
    heads = q.shape[1]
    q, k = rope(q, cos, sin), rope(k, cos, sin)
    k_cache[slot, :, start : start + t] = k[0]
    v_cache[slot, :, start : start + t] = v[0]
    keys = k_cache[slot : slot + 1, :, : start + t].repeat_interleave(heads // kv_heads, dim=1)
    values = v_cache[slot : slot + 1, :, : start + t].repeat_interleave(heads // kv_heads, dim=1)
    if start == 0:
        out = F.scaled_dot_product_attention(q, keys, values, is_causal=True, scale=attn.scaling)
    else:
        allowed = torch.ones(t, start + t, dtype=torch.bool, device=x.device).tril(diagonal=start)
        out = F.scaled_dot_product_attention(q, keys, values, attn_mask=allowed, scale=attn.scaling)
    out = attn.o_proj(out.transpose(1, 2).reshape(1, t, heads * dim))
    return _mlp_residual(layer, x, out)


def sample_top_k(
    logits: torch.Tensor, top_k: int, temperature: float, noise: torch.Tensor | None = None
) -> torch.Tensor:
    """One token per row from the ``top_k`` most likely at ``temperature`` (0: the most likely),
    by the Gumbel-max trick: no host synchronization. ``noise``: uniform [0, 1) numbers of the
    shape [rows, top_k] drawn outside a CUDA graph, so that no random generator runs inside one
    (a capture that fails after drawing leaves the CUDA generator unusable)."""
    if temperature <= 0:
        return logits.argmax(dim=-1)
    values, indices = logits.float().topk(min(top_k, logits.shape[-1]), dim=-1)
    if noise is None:
        noise = torch.rand_like(values)
    noise = noise[:, : values.shape[-1]].clamp(min=1e-10)
    choice = (values / temperature - torch.log(-torch.log(noise))).argmax(dim=-1, keepdim=True)
    return indices.gather(-1, choice).squeeze(-1)


def bucket(busy_rows: int, slots: int) -> int:
    """The smallest power of two holding ``busy_rows`` rows, at most ``slots``."""
    n = 1
    while n < busy_rows:
        n *= 2
    return min(n, slots)
