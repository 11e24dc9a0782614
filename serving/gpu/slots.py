"""Decoder steps over a KV cache with one slot per request: the batched core of the GPU nodes.

transformers' caches advance every row of a batch to the same position, so requests that start
at different times cannot share one. Here each request owns a *slot*: a row of a preallocated
per-layer key/value tensor ``[slots, kv_heads, max_len, head_dim]`` with its own position. A
decode step runs the rows ``0..n-1`` of the cache (``n`` a bucket: the smallest power of two
above the highest busy slot) with per-row positions, a per-row mask and per-row rotary angles.
Every shape in a step depends on ``n`` alone, so a step can be captured in a CUDA graph per
bucket. The layer weights are the transformers modules' own (``q_proj`` … ``mlp``); only the
cache handling is written here.

A decode step is bound by kernel count, not by arithmetic (docs/gpu.md counts a CSM step's
kernels and times them). :func:`fuse_layers` lays a layer's weights out
for fewer: the query, key and value projections as one matrix and the gate and up projections as
one (the modules' own weights become views into them, so nothing is stored twice); a known RMSNorm
runs as ``F.rms_norm`` (one fused kernel on CUDA instead of seven); the rotary embedding turns the
queries and keys together with angles made once a step (:func:`rope_tables`), three kernels for
what took ten.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

log = logging.getLogger("fdb.serving")


# Every stream an engine, a lane, a codec or a capture uses is made here for it alone
# (``cudaStreamCreateWithPriority``, non-blocking as torch's own), never drawn from torch's pool.
# torch hands out its pool's 32 streams a priority in turn to whoever asks (transformers'
# continuous batching draws its streams there and captures its graphs on one), so a stream drawn
# from it may be another library's. A CUDA graph that is freed clears the cuBLAS workspaces of
# its capture stream for every thread (torch's ``CUDAGraph::reset``): another library's graph
# freed on a stream one of ours captured on would take our graphs' workspace away, and they would
# go on writing their partial sums into memory handed to someone else. torch's clearing of every
# stream's workspaces (``torch._C._cuda_clearCublasWorkspaces``, which torch.compile's graph trees
# call) would still reach ours; nothing here calls it. A Whisper lane that stops repeating itself
# where other CUDA tests ran first was thought to be the pool's doing; it is not: it fails the same
# way on streams made here (docs/gpu.md, fourteenth session). A stream made here is never
# destroyed: a graph captured on it may be freed after its owner, and a stream made later could
# take a destroyed one's address and lose its workspace to that late free. A stream is a few
# kilobytes of driver state, but the cuBLAS workspaces of an engine's eager calls on it (tens of
# MiB on Hopper) stay in torch's map while the process lives; a server makes about a dozen
# streams, once.
_STREAMS_LOCK = threading.RLock()
_CAPTURE_LOCK = threading.RLock()  # one capture at a time; taken before _STREAMS_LOCK
_CAPTURE_STREAMS: dict[int, torch.cuda.Stream] = {}  # the capture stream, by device index
_FAILED_GRAPHS: list = []  # graphs whose capture failed, kept (see capture)
_CUDART: list = []  # the CUDA runtime this process loaded (ctypes), found once
_NON_BLOCKING = 0x01  # cudaStreamNonBlocking: no implicit wait on the legacy default stream


def loaded_library(prefix: str, maps: str = "/proc/self/maps") -> str | None:
    """The path of the first library this process has mapped whose file name starts with
    ``prefix`` (``libcudart.so``: torch's CUDA runtime, whichever package shipped it), or None."""
    try:
        lines = Path(maps).read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split(maxsplit=5)  # address, perms, offset, dev, inode, path
        if len(fields) == 6 and Path(fields[5]).name.startswith(prefix):
            return fields[5]
    return None


def _cudart() -> ctypes.CDLL:
    """The CUDA runtime torch loaded (its major version's, already mapped in this process), for
    the one call torch has no binding of. Never another runtime from the library path."""
    with _STREAMS_LOCK:
        if not _CUDART:
            major = (torch.version.cuda or "").split(".")[0]
            path = loaded_library(f"libcudart.so.{major}") if major else None
            if path is None:
                raise RuntimeError(
                    f"torch's CUDA runtime (libcudart.so.{major or '?'}) is not loaded in this "
                    "process, so no CUDA stream of an engine's own can be made: install a CUDA "
                    "build of torch"
                )
            lib = ctypes.CDLL(path)
            lib.cudaStreamCreateWithPriority.argtypes = [
                ctypes.POINTER(ctypes.c_void_p),
                ctypes.c_uint,
                ctypes.c_int,
            ]
            lib.cudaStreamCreateWithPriority.restype = ctypes.c_int
            lib.cudaGetLastError.argtypes = []
            lib.cudaGetLastError.restype = ctypes.c_int
            _CUDART.append(lib)
        return _CUDART[0]


def _create_stream(device_index: int, priority: int) -> int:
    """A new CUDA stream's handle on ``device_index``, non-blocking, at ``priority`` (CUDA clamps
    it to the device's range)."""
    handle = ctypes.c_void_p()
    runtime = _cudart()
    with torch.cuda.device(device_index):
        err = runtime.cudaStreamCreateWithPriority(ctypes.byref(handle), _NON_BLOCKING, priority)
        if err != 0:
            runtime.cudaGetLastError()  # not left for torch's next check to blame a kernel for
    if err != 0 or not handle.value:
        raise RuntimeError(
            f"cudaStreamCreateWithPriority failed on cuda:{device_index}: CUDA error {err}"
        )
    return handle.value


def _own_stream(device, priority: int = 0) -> torch.cuda.Stream:
    """A CUDA stream no one else has: made for the caller, never one of torch's pool (above)."""
    device = torch.device(device)
    index = device.index if device.index is not None else torch.cuda.current_device()
    handle = _create_stream(index, priority)  # CUDA's stream creation is thread-safe
    return torch.cuda.ExternalStream(handle, device=torch.device("cuda", index))


def _capture_stream() -> torch.cuda.Stream:
    """The current device's capture stream, made once: every capture's warm-up and capture run
    on it (one stream, as torch's own default capture stream, so the graphs that share a memory
    pool can reuse each other's blocks)."""
    device = torch.cuda.current_device()
    with _CAPTURE_LOCK, _STREAMS_LOCK:
        if device not in _CAPTURE_STREAMS:
            _CAPTURE_STREAMS[device] = _own_stream(torch.device("cuda", device))
        return _CAPTURE_STREAMS[device]


def capture(fn, warmups: int = 2, pool=None, owner=None) -> torch.cuda.CUDAGraph:
    """``fn()`` as a CUDA graph: ``warmups`` eager calls on the capture stream first (kernels
    chosen and autotuned before capture), then one call captured on it; ``pool``: a memory pool
    to share with other graphs (``graph.pool()``). Captures from several threads run one at a
    time.

    ``owner`` (an engine, a recognizer's lane, a codec: whatever replays its graphs in one
    thread, one after another) gets a capture stream of its own, made at its first capture and
    kept on it (``_capture_on``). A graph keeps the cuBLAS workspace it was captured with, and
    torch keys that workspace by the capturing thread's cuBLAS handle and the stream. Handles
    are per thread but pooled: one thread captures for several engines when they are built in
    it, and a thread that has ended hands its handle to the next. So the graphs of two owners
    captured on one stream may share a workspace, and when they replay at once (two engines'
    threads, two lanes) write over each other's partial sums: a review measured wrong results
    in about half of such concurrent replays on an H100 (docs/gpu.md, tenth session). A stream
    of its own for each owner keeps their workspaces apart whichever thread captures. Without
    an owner: one capture stream for all (tests, benchmarks)."""
    with _CAPTURE_LOCK:
        if owner is None:
            stream = _capture_stream()
        else:
            stream = getattr(owner, "_capture_on", None)
            if stream is None:
                stream = _own_stream(torch.device("cuda", torch.cuda.current_device()))
                owner._capture_on = stream
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(warmups):
                fn()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph, pool=pool, stream=stream):
                fn()
        except BaseException:
            # a failed capture may still have ended (torch's capture_end): freeing its graph
            # would clear the stream's cuBLAS workspaces, which the owner's other graphs use
            _FAILED_GRAPHS.append(graph)
            raise
        # the stream it was captured on, for whoever reads the graph (its freeing clears that
        # stream's cuBLAS workspaces: torch's CUDAGraph::reset)
        graph.capture_stream = stream
        return graph


def to_device(values, device, dtype=torch.long) -> torch.Tensor:
    """``values`` (a list, nested lists) as a tensor on ``device`` without waiting for the GPU:
    ``torch.tensor(values, device=cuda)`` copies from pageable memory and waits for every kernel
    queued on the stream (an engine's step just launched), then for the GIL again; this copies
    from pinned memory, queued behind them. The pinned buffer is the caching host allocator's,
    kept until the copy is done."""
    host = torch.tensor(values, dtype=dtype)
    if device.type != "cuda":
        return host.to(device)
    return host.pin_memory().to(device, non_blocking=True)


class HostCopies:
    """Two host buffers (pinned on CUDA) that a decode loop copies a step's result into, behind
    the work queued on its stream, and reads after it has launched the next step (the overlap of
    ``lm_slots`` and ``whisper_static``): copy ``k`` goes to buffer ``k % 2``, and is read once
    its event has passed, before copy ``k + 2`` reuses the buffer."""

    def __init__(self, size: int, dtype: torch.dtype, device: torch.device):
        cuda = device.type == "cuda"
        self._host = [torch.zeros(size, dtype=dtype, pin_memory=cuda) for _ in range(2)]
        self._events = [torch.cuda.Event() for _ in range(2)] if cuda else None

    def put(self, k: int, values: torch.Tensor) -> None:
        """``values`` (1-D, on the device) into buffer ``k % 2``, without waiting for the GPU."""
        self._host[k % 2][: values.shape[0]].copy_(values, non_blocking=True)
        if self._events is not None:
            self._events[k % 2].record()

    def get(self, k: int, n: int) -> torch.Tensor:
        """The first ``n`` values of copy ``k``, once it is done."""
        if self._events is not None:
            self._events[k % 2].synchronize()
        return self._host[k % 2][:n]


def engine_stream(device, priority: int = 0) -> torch.cuda.Stream | None:
    """An engine's own CUDA stream for its loop, at ``priority`` (None on a CPU device): one no
    other engine and no capture holds.

    0 is CUDA's default; a negative priority is more urgent: where engines share a GPU, the
    pending thread blocks of a more urgent stream are scheduled first as the GPU's units come
    free (a running kernel is never preempted). A priority beyond the device's range is clamped
    to its end (``cudaDeviceGetStreamPriorityRange``; ``stream.priority`` says which it got). The
    device is synchronized first, so the stream sees every tensor the engine's start-up made on
    the default stream."""
    device = torch.device(device)
    if device.type != "cuda":
        return None
    stream = _own_stream(device, priority)  # CUDA clamps the priority to its range
    torch.cuda.synchronize(device)
    return stream


def priority_of(stream: torch.cuda.Stream | None) -> int | None:
    """The priority an engine's stream got (None: no stream, a CPU device), for its identity."""
    return None if stream is None else stream.priority


def on_stream(stream):
    """``torch.cuda.stream(stream)``; nothing without one (CPU)."""
    return torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()


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
    q = _head_norm(attn, "q_norm", _project(attn.q_proj, x, codebook).view(n, t, -1, dim))
    k = _head_norm(attn, "k_norm", _project(attn.k_proj, x, codebook).view(n, t, kv_heads, dim))
    v = _project(attn.v_proj, x, codebook).view(n, t, kv_heads, dim).transpose(1, 2)
    return q.transpose(1, 2), k.transpose(1, 2), v


def _head_norm(attn: nn.Module, name: str, x: torch.Tensor, fused: bool = False) -> torch.Tensor:
    """``x`` through the attention's per-head norm ``name`` (Qwen3's ``q_norm``/``k_norm``, over
    the head dimension, before the rotary embedding); unchanged where there is none."""
    norm = getattr(attn, name, None)
    if norm is None:
        return x
    return rms_norm(norm, x) if fused else norm(x)


def _mlp_residual(
    layer: nn.Module, x: torch.Tensor, attended: torch.Tensor, codebook: torch.Tensor | None = None
) -> torch.Tensor:
    x = x + attended
    return x + _project(layer.mlp, layer.post_attention_layernorm(x), codebook)


@dataclass(frozen=True)
class Rope:
    """A step's rotary angles, made once for every layer: ``cos`` and ``sin`` [n, 1, T, D], and
    ``signed``, ``sin`` with its first half negated, so that ``rotate_half(x) * sin`` becomes
    ``x.roll(D / 2) * signed`` (one kernel, where ``rotate_half`` takes a negation and a copy)."""

    cos: torch.Tensor
    sin: torch.Tensor
    signed: torch.Tensor

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` [n, heads, T, D] rotated in three kernels (the fused path)."""
        return torch.addcmul(x * self.cos, x.roll(x.shape[-1] // 2, dims=-1), self.signed)

    def plain(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` rotated as transformers' ``apply_rotary_pos_emb`` does it (the modules' path)."""
        return x * self.cos + _rotate_half(x) * self.sin


def rope_tables(cos: torch.Tensor, sin: torch.Tensor) -> Rope:
    """:class:`Rope` from a rotary module's ``cos``/``sin`` [n, T, D]."""
    half = sin.shape[-1] // 2
    signed = torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)
    return Rope(cos[:, None], sin[:, None], signed[:, None])


# transformers' RMSNorm classes that compute x * rsqrt(mean(x^2) + eps) * weight in float32
# (Moshi's multiplies by the weight before rounding, the others after: F.rms_norm rounds once)
_RMS_NORMS = frozenset({"CsmRMSNorm", "MoshiRMSNorm", "LlamaRMSNorm", "Qwen3RMSNorm"})


def rms_norm(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``module(x)``; a known RMSNorm as ``F.rms_norm`` (one kernel on CUDA)."""
    weight = getattr(module, "weight", None)
    if type(module).__name__ not in _RMS_NORMS or weight is None or weight.dtype != x.dtype:
        return module(x)
    eps = getattr(module, "variance_epsilon", getattr(module, "eps", None))
    return F.rms_norm(x, (x.shape[-1],), weight, eps)


def module_norm(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``module(x)``: the norm of the modules' path, with :func:`rms_norm`'s signature."""
    return module(x)


def _linear_weight(proj: nn.Module) -> torch.Tensor | None:
    """The weight of a bias-free ``nn.Linear`` (or Moshi's single-codebook wrapper of one)."""
    linear = getattr(proj, "linear", proj)
    if not isinstance(linear, nn.Linear) or linear.bias is not None:
        return None
    return linear.weight


def _concat_as_views(linears: list[nn.Linear]) -> torch.Tensor:
    """The weights of ``linears`` stacked into one matrix; each linear's weight becomes a view
    into it (the same values, one copy in memory)."""
    joined = torch.cat([lin.weight.data for lin in linears], dim=0)
    start = 0
    for lin in linears:
        rows = lin.weight.shape[0]
        lin.weight.data = joined[start : start + rows]
        start += rows
    return joined


@dataclass(frozen=True)
class LayerPlan:
    """One decoder layer laid out for a decode step of few kernels (:func:`fuse_layers`)."""

    qkv: torch.Tensor  # [(heads + 2 kv_heads) * dim, hidden]
    gate_up: torch.Tensor  # [2 * ffn, hidden]: the gate's rows, then the up projection's
    heads: int
    kv_heads: int
    dim: int


def fuse_layers(layers, kv_heads: int, dim: int) -> list[LayerPlan | None]:
    """A :class:`LayerPlan` for each layer of ``layers`` whose projections are plain bias-free
    linears (None for the others, which keep the modules' path), to hand to
    :func:`decode_layer`. The layers' own weights become views into the plans' matrices: the
    modules compute as before. Call it once, before any CUDA graph is captured."""
    plans: list[LayerPlan | None] = []
    with torch.no_grad():
        for layer in layers:
            plans.append(_plan(layer, kv_heads, dim))
    return plans


def _plan(layer: nn.Module, kv_heads: int, dim: int) -> LayerPlan | None:
    attn, mlp = layer.self_attn, layer.mlp
    projections = [attn.q_proj, attn.k_proj, attn.v_proj]
    if any(_linear_weight(p) is None for p in projections):
        return None
    if hasattr(mlp, "gate_proj") and hasattr(mlp, "up_proj"):
        halves = [mlp.gate_proj, mlp.up_proj]
        if any(_linear_weight(p) is None for p in halves):
            return None
        gate_up = _concat_as_views([getattr(p, "linear", p) for p in halves])
    elif hasattr(mlp, "fc1") and _linear_weight(mlp.fc1) is not None:
        gate_up = _linear_weight(mlp.fc1)  # Moshi's gating MLP: already [gate; up]
    else:
        return None
    qkv = _concat_as_views([getattr(p, "linear", p) for p in projections])
    return LayerPlan(qkv, gate_up, qkv.shape[0] // dim - 2 * kv_heads, kv_heads, dim)


def _activation(mlp: nn.Module):
    return getattr(mlp, "act_fn", None) or mlp.activation_fn


def _mlp_down(mlp: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return (mlp.down_proj if hasattr(mlp, "down_proj") else mlp.fc2)(x)


def _attend(
    attn: nn.Module,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    pos: torch.Tensor,
    mask: torch.Tensor,
    rows: torch.Tensor,
) -> torch.Tensor:
    """One token per row: ``k``/``v`` [n, KV, 1, D] written at ``pos`` into rows 0..n-1 of the
    caches, then ``q`` [n, H, 1, D] attends over them; returns [n, 1, H * D]."""
    n, heads, _, dim = q.shape
    kv_heads = k_cache.shape[1]
    k_cache[rows, :, pos] = k[:, :, 0]
    v_cache[rows, :, pos] = v[:, :, 0]
    # grouped-query attention without copying keys: the query heads of one key head become
    # that head's "sequence" (one token per row, so no causal order among them)
    q = q.reshape(n, kv_heads, heads // kv_heads, dim)
    out = F.scaled_dot_product_attention(
        q, k_cache[:n], v_cache[:n], attn_mask=mask, scale=attn.scaling
    )
    return out.reshape(n, 1, heads * dim)


def _fused_mlp(layer: nn.Module, plan: LayerPlan, x: torch.Tensor) -> torch.Tensor:
    """``x`` plus the layer's MLP over its post-attention norm, with the fused gate-up matrix."""
    gate, up = F.linear(rms_norm(layer.post_attention_layernorm, x), plan.gate_up).chunk(2, -1)
    return x + _mlp_down(layer.mlp, _activation(layer.mlp)(gate) * up)


def depth_tables(length: int, slots: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """What every step of a depth decoder of ``length`` positions shares, made once: each
    position's row of positions ``[length, slots]`` and its causal mask
    ``[length, 1, 1, 1, length]``."""
    positions = torch.arange(length, device=device)
    rows = positions[:, None].expand(length, slots).contiguous()
    return rows, (positions[None, :] <= positions[:, None])[:, None, None, None, :]


def _qk_norms(
    attn: nn.Module, qkv: torch.Tensor, heads: int, kv_heads: int, head_axis: int
) -> torch.Tensor:
    """The queries' and keys' heads of a fused projection (heads along ``head_axis``), through
    their per-head norms where the attention has them (Qwen3)."""
    qk = qkv.narrow(head_axis, 0, heads + kv_heads)
    if getattr(attn, "q_norm", None) is None:
        return qk
    q = _head_norm(attn, "q_norm", qkv.narrow(head_axis, 0, heads), fused=True)
    k = _head_norm(attn, "k_norm", qkv.narrow(head_axis, heads, kv_heads), fused=True)
    return torch.cat([q, k], dim=head_axis)


def _fused_layer(
    layer: nn.Module,
    plan: LayerPlan,
    x: torch.Tensor,
    rotary: Rope | None,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    pos: torch.Tensor,
    mask: torch.Tensor,
    rows: torch.Tensor,
) -> torch.Tensor:
    n = x.shape[0]
    heads, kv_heads, dim = plan.heads, plan.kv_heads, plan.dim
    # one token per row: [n, 1, (H + 2 KV) * D] is [n, H + 2 KV, 1, D] without a copy
    qkv = F.linear(rms_norm(layer.input_layernorm, x), plan.qkv).view(n, -1, 1, dim)
    attn = layer.self_attn
    qk = _qk_norms(attn, qkv, heads, kv_heads, 1)
    if rotary is not None:
        qk = rotary(qk)
    q, k, v = qk[:, :heads], qk[:, heads:], qkv[:, heads + kv_heads :]
    out = _attend(attn, q, k, v, k_cache, v_cache, pos, mask, rows)
    return _fused_mlp(layer, plan, x + _project(attn.o_proj, out, None))


def decode_layer(
    layer: nn.Module,
    x: torch.Tensor,
    rotary: Rope | None,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    pos: torch.Tensor,
    mask: torch.Tensor,
    codebook: torch.Tensor | None = None,
    rows: torch.Tensor | None = None,
    plan: LayerPlan | None = None,
) -> torch.Tensor:
    """One token per row: ``x`` [n, 1, H] at per-row positions ``pos`` [n] (written into rows
    0..n-1 of the caches), ``mask`` [n, 1, 1, max_len] (True: attend); ``rotary`` the step's
    :func:`rope_tables`, None: no rotary embedding; ``codebook``: per-codebook weights (Moshi's
    depth transformer); ``rows``: ``arange(n)`` made once a step (else made here); ``plan``: the
    layer's :func:`fuse_layers` plan, to run the fused path (None: the modules' operations)."""
    n = x.shape[0]
    if rows is None:
        rows = torch.arange(n, device=x.device)
    if plan is not None and codebook is None:
        return _fused_layer(layer, plan, x, rotary, k_cache, v_cache, pos, mask, rows)
    attn = layer.self_attn
    kv_heads, dim = k_cache.shape[1], k_cache.shape[3]
    q, k, v = _qkv(attn, layer.input_layernorm(x), kv_heads, dim, codebook)
    if rotary is not None:
        q, k = rotary.plain(q), rotary.plain(k)
    out = _attend(attn, q, k, v, k_cache, v_cache, pos, mask, rows)
    return _mlp_residual(layer, x, _project(attn.o_proj, out, codebook), codebook)


def prefill_layer(
    layer: nn.Module,
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot: int,
    start: int,
    plan: LayerPlan | None = None,
    rotary: Rope | None = None,
) -> torch.Tensor:
    """``T`` tokens of one request (``x`` [1, T, H]) at positions ``start..start+T-1`` of ``slot``,
    causal over everything the slot holds before them. ``plan`` (with ``rotary``, the
    :func:`rope_tables` of ``cos``/``sin``, made once for every layer): the fused path."""
    attn = layer.self_attn
    t = x.shape[1]
    kv_heads, dim = k_cache.shape[1], k_cache.shape[3]
    if plan is not None:
        rotary = rotary or rope_tables(cos, sin)
        qkv = F.linear(rms_norm(layer.input_layernorm, x), plan.qkv)
        qkv = qkv.view(1, t, -1, dim).transpose(1, 2)  # [1, H + 2 KV, T, D]
        qk = rotary(_qk_norms(attn, qkv, plan.heads, kv_heads, 1))
        q, k, v = qk[:, : plan.heads], qk[:, plan.heads :], qkv[:, plan.heads + kv_heads :]
    else:
        q, k, v = _qkv(attn, layer.input_layernorm(x), kv_heads, dim)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
    heads = q.shape[1]
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
    if plan is None:
        return _mlp_residual(layer, x, out)
    return _fused_mlp(layer, plan, x + out)


def decode_rows(
    layers: Sequence[nn.Module],
    x: torch.Tensor,
    rotary: Rope,
    cache: SlotCache,
    plans: Sequence[LayerPlan | None],
    pos: torch.Tensor,
    rows: torch.Tensor,
    arange: torch.Tensor,
    length: int | None = None,
) -> torch.Tensor:
    """Every layer's :func:`decode_layer` for rows 0..n-1 (``x`` [n, 1, H] at positions ``pos``,
    ``rows`` = ``arange(n)``): each row attends the first ``length`` positions of its cache rows
    up to its own position (``length`` None: all of them); ``arange``: the positions
    0..max_len-1 on the device, made once."""
    length = length or arange.shape[0]
    mask = (arange[None, :length] <= pos[:, None])[:, None, None, :]
    for layer, k, v, plan in zip(layers, cache.k, cache.v, plans, strict=True):
        x = decode_layer(
            layer, x, rotary, k[:, :, :length], v[:, :, :length], pos, mask, rows=rows, plan=plan
        )
    return x


def prefill_rows(
    layer: nn.Module,
    x: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slots: torch.Tensor,
    rotary: Rope,
    plan: LayerPlan | None = None,
) -> torch.Tensor:
    """The prompts of ``B`` new requests at once, each from position 0: ``x`` [B, T, H] (each
    row's prompt, right-padded to the longest), written into the caches' rows ``slots`` [B];
    causal. ``rotary``: :func:`rope_tables` of positions ``0..T-1``. A row's padding positions are
    written too: the decode step writes each position before any step attends to it, so they are
    never read. ``plan``: the fused path."""
    attn = layer.self_attn
    b, t, _ = x.shape
    kv_heads, dim = k_cache.shape[1], k_cache.shape[3]
    if plan is not None:
        qkv = F.linear(rms_norm(layer.input_layernorm, x), plan.qkv)
        qkv = qkv.view(b, t, -1, dim).transpose(1, 2)  # [B, H + 2 KV, T, D]
        qk = rotary(_qk_norms(attn, qkv, plan.heads, kv_heads, 1))
        q, k, v = qk[:, : plan.heads], qk[:, plan.heads :], qkv[:, plan.heads + kv_heads :]
    else:
        q, k, v = _qkv(attn, layer.input_layernorm(x), kv_heads, dim)
        q, k = rotary.plain(q), rotary.plain(k)
    heads = q.shape[1]
    k_cache[slots, :, :t] = k
    v_cache[slots, :, :t] = v
    group = heads // kv_heads
    out = F.scaled_dot_product_attention(
        q,
        k.repeat_interleave(group, dim=1),
        v.repeat_interleave(group, dim=1),
        is_causal=True,
        scale=attn.scaling,
    )
    out = attn.o_proj(out.transpose(1, 2).reshape(b, t, heads * dim))
    if plan is None:
        return _mlp_residual(layer, x, out)
    return _fused_mlp(layer, plan, x + out)


def gumbel(noise: torch.Tensor) -> torch.Tensor:
    """Gumbel noise ``-log(-log(u))`` from uniform [0, 1) numbers (any shape): made once a step
    for every codebook, where each sampling made its own."""
    return -torch.log(-torch.log(noise.clamp(min=1e-10)))


def sample_top_k(
    logits: torch.Tensor,
    top_k: int,
    temperature: float,
    noise: torch.Tensor | None = None,
    gumbel_noise: torch.Tensor | None = None,
) -> torch.Tensor:
    """One token per row from the ``top_k`` most likely at ``temperature`` (0: the most likely),
    by the Gumbel-max trick: no host synchronization. ``noise``: uniform [0, 1) numbers of the
    shape [rows, top_k] drawn outside a CUDA graph, so that no random generator runs inside one
    (a capture that fails after drawing leaves the CUDA generator unusable); ``gumbel_noise``:
    :func:`gumbel` of such numbers, made beforehand (it wins over ``noise``)."""
    if temperature <= 0:
        return logits.argmax(dim=-1)
    values, indices = logits.float().topk(min(top_k, logits.shape[-1]), dim=-1)
    if gumbel_noise is None:
        gumbel_noise = gumbel(torch.rand_like(values) if noise is None else noise)
    choice = (values / temperature + gumbel_noise[:, : values.shape[-1]]).argmax(
        dim=-1, keepdim=True
    )
    return indices.gather(-1, choice).squeeze(-1)


def bucket(busy_rows: int, slots: int) -> int:
    """The smallest power of two holding ``busy_rows`` rows, at most ``slots``."""
    n = 1
    while n < busy_rows:
        n *= 2
    return min(n, slots)


class PaddedPrefill:
    """One request's prompt prefilled right-padded to the next of ``lengths``, by ``layers`` into
    row ``slot`` of ``cache`` (:func:`prefill_rows`; the padding's positions are written too and
    overwritten by the steps before any step attends to them); with ``graphs`` (CUDA) each length
    is one captured graph: a handful of launches where the eager layers launch hundreds, each of
    which waits for the GIL while the other engines of the process launch theirs. Every length
    must be captured (:meth:`warm`) while no slot is in use: a capture writes slot 0."""

    def __init__(
        self,
        layers: Sequence[nn.Module],
        cache: SlotCache,
        plans: Sequence[LayerPlan | None],
        rotary: nn.Module,
        lengths: Sequence[int],
        hidden: int,
        graphs: bool,
    ):
        self.layers, self.cache, self.plans, self.rotary = layers, cache, plans, rotary
        self.lengths, self.hidden, self.graphs = tuple(sorted(lengths)), hidden, graphs
        self._passes: dict[int, tuple] = {}  # length -> (input [1, T, H], slot [1], rope, graph)
        self._pool = None

    @staticmethod
    def lengths_for(
        given: Sequence[int] | None, candidates: Sequence[int], max_len: int, wanted: bool
    ) -> tuple[int, ...]:
        """An engine's prefill lengths: ``given`` when set, else the ``candidates`` below
        ``max_len`` when ``wanted`` (its prefill graphs asked for, on CUDA), else none."""
        if given is not None:
            return tuple(given)
        return tuple(b for b in candidates if b < max_len) if wanted else ()

    def length_for(self, tokens: int) -> int | None:
        """The padded length a prompt of ``tokens`` positions takes (None: longer than all)."""
        return next((b for b in self.lengths if b >= tokens), None)

    def warm(self) -> str | None:
        """Every length's pass made (captured with graphs); a failed capture leaves no lengths
        (every prefill runs eagerly) and returns why, for the engine's log and identity."""
        try:
            for length in self.lengths:
                self._pass(length)
        except Exception as exc:  # noqa: BLE001 - returned, and the prefills run eagerly
            self.lengths, self._passes = (), {}
            return f"{type(exc).__name__}: {exc}"
        return None

    def run(self, x: torch.Tensor, slot: int) -> None:
        """``x`` [1, t, H] (t no more than the longest length) into row ``slot``."""
        t = x.shape[1]
        length = self.length_for(t)
        if length is None:
            raise ValueError(f"a prompt of {t} positions is longer than every prefill length")
        buffer, slot_index, rope, graph = self._pass(length)
        buffer[0, :t] = x[0]
        slot_index.fill_(slot)
        if graph is not None:
            graph.replay()
        else:
            self._layers(buffer, slot_index, rope)

    def _pass(self, length: int) -> tuple:
        found = self._passes.get(length)
        if found is not None:
            return found
        k = self.cache.k[0]
        buffer = torch.zeros(1, length, self.hidden, dtype=k.dtype, device=k.device)
        slot_index = torch.zeros(1, dtype=torch.long, device=k.device)
        rope = rope_tables(*self.rotary(buffer, torch.arange(length, device=k.device)[None]))
        graph = None
        if self.graphs:
            graph = capture(
                lambda: self._layers(buffer, slot_index, rope), pool=self._pool, owner=self
            )
            self._pool = self._pool or graph.pool()
        self._passes[length] = (buffer, slot_index, rope, graph)
        return self._passes[length]

    def _layers(self, x: torch.Tensor, slot_index: torch.Tensor, rope: Rope) -> None:
        h = x
        for layer, k, v, plan in zip(
            self.layers, self.cache.k, self.cache.v, self.plans, strict=True
        ):
            h = prefill_rows(layer, h, k, v, slot_index, rope, plan=plan)
