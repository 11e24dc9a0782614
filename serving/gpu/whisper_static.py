"""Whisper's greedy transcription on fixed tensors: the decoder on a static cache, one CUDA graph
per batch bucket.

transformers' ``generate`` grows a dynamic cache, recomputes nothing it can avoid but launches
every kernel of every layer from Python at every token (docs/gpu.md: 7 s for 16 utterances of
whisper-large-v3 on an H200, three quarters of the GPU cascade's first audio). Here a batch of
utterances is decoded as:

1. the encoder over the batch's log-mel features (the model's own layers, once per batch), in
   the batch's window (:func:`window_frames`): the whole 30 s, or with ``window_s`` the longest
   utterance plus 1 s rounded up to a multiple of ``window_s``, as the embedded recognizer does
   (``fdb.models.asr.FasterWhisperAsr.transcribe_utterance``): the encoder's positions are the
   window's first ones (:func:`encode`), and a shorter window is faster for a slightly higher WER;
2. every decoder layer's cross-attention keys and values made once from the encoder's output,
   written into tensors allocated once for ``max_batch`` rows of the whole window
   (:class:`StaticWhisper`; a shorter window uses the front of the same memory);
3. with ``prompt_pass`` (the default) the forced prompt (start, language, task, no timestamps:
   four tokens for large-v3 in English) in one pass of its positions, which chooses the first
   generated token, where a step a token took four; then
   one decoder step per token for every row at once, with the self-attention keys and values
   written at the step's position into a cache of ``prompt + max_new_tokens`` positions. Every
   shape in a step depends only on the bucket ``n`` (the smallest power of two holding the
   batch) and the window, so the step (and the prompt's pass) is captured as one CUDA graph per
   (bucket, window) and replayed. With ``overlap`` (the default) whether every row has ended is
   read one step late (a flag copied to the host behind its step), so the next step is queued
   before the thread waits for the GPU and then for the GIL; a batch that ends at an end token
   has had one step more launched, not read.

The decoding rule is transformers' ``generate`` for short-form Whisper without timestamps: the
forced prompt (``decoder_start_token_id``, then the language, the task and ``<|notimestamps|>``
where the generation config names them), ``suppress_tokens`` at every step,
``begin_suppress_tokens`` at the first free step, greedy choice over float32 scores, a row done
at ``eos_token_id``. ``tests/serving/gpu/test_whisper_static.py`` checks the tokens equal
``generate``'s on CPU (float32, tiny configurations, with and without a multilingual prompt and
with a row that ends early).

The layer weights are the transformers modules' own; only the cache handling and the loop are
written here (transformers' static cache for encoder-decoder models cannot hold rows of one
batch in fixed per-bucket tensors shared by every batch).
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Sequence

import torch
from torch.nn import functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from fdb.errors import FdbError
from serving.gpu.slots import HostCopies, bucket, capture

# The decoder's cross-attention kernels on CUDA, as (most rows, kernels) pairs, the first whose
# bound holds: flash attention for a batch of up to 4 rows, memory-efficient attention above.
# Both give the same result from the same inputs every time (torch's own choice did not: it
# behaves as cuDNN's attention); on an H100 a step took 3.17-3.24 ms with flash attention at 1
# and 4 rows against 3.55 with the memory-efficient kernel, and 4.20 against 3.97 at 16
# (docs/gpu.md, eighteenth session). A bound of None takes any number of rows.
CROSS_KERNELS: tuple[tuple[int | None, list[SDPBackend] | None], ...] = (
    (4, [SDPBackend.FLASH_ATTENTION]),
    (None, [SDPBackend.EFFICIENT_ATTENTION]),
)


CROSS_CHOICES = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION}


def cross_kernels(device_type: str, dtype: torch.dtype, choice: str | None = None) -> tuple:
    """The cross-attention's kernels of a decoder on ``device_type`` in ``dtype``: torch's
    choice on a CPU; on CUDA :data:`CROSS_KERNELS` in float16 or bfloat16 and the
    memory-efficient kernel alone in float32 (flash attention takes half precision only), or
    one kernel for every batch when ``choice`` (else ``FDB_WHISPER_CROSS``: flash or
    efficient) names it, the A/B of docs/gpu.md."""
    if device_type != "cuda":
        return ((None, None),)
    half = dtype in (torch.float16, torch.bfloat16)
    choice = choice or os.environ.get("FDB_WHISPER_CROSS") or None
    if choice is None:
        return CROSS_KERNELS if half else ((None, [SDPBackend.EFFICIENT_ATTENTION]),)
    if choice not in CROSS_CHOICES:
        raise FdbError(
            f"FDB_WHISPER_CROSS={choice!r} is not a cross-attention kernel",
            "set it to flash or efficient, or unset it for flash attention up to 4 rows "
            "and the memory-efficient kernel above",
        )
    if choice == "flash" and not half:
        raise FdbError(
            f"FDB_WHISPER_CROSS=flash: flash attention takes float16 or bfloat16, not {dtype}",
            "unset it, or set it to efficient",
        )
    return ((None, [CROSS_CHOICES[choice]]),)


def describe_cross(kernels) -> list[list]:
    """``cross_kernels`` as JSON: ``[most rows or null, [kernel names] or null]`` pairs."""
    return [[most, [str(b) for b in backends] if backends else None] for most, backends in kernels]


def prompt_ids(generation, language: str | None) -> list[int]:
    """The forced prompt of ``generation`` (a Whisper ``GenerationConfig``) for ``language``:
    start, then language, task and no-timestamps where the configuration has them."""
    ids = [int(generation.decoder_start_token_id)]
    lang_to_id = getattr(generation, "lang_to_id", None) or {}
    task_to_id = getattr(generation, "task_to_id", None) or {}
    if lang_to_id:
        if language is None:
            raise ValueError(
                "a multilingual checkpoint needs a language for the static decoder (detecting "
                "it is generate's): set the node's language, or decoder: generate"
            )
        key = language if language.startswith("<|") else f"<|{language}|>"
        if key not in lang_to_id:
            raise ValueError(f"language {language!r} is not in the checkpoint's lang_to_id")
        ids.append(int(lang_to_id[key]))
        if task_to_id:
            ids.append(int(task_to_id["transcribe"]))
    no_timestamps = getattr(generation, "no_timestamps_token_id", None)
    if no_timestamps is not None:
        ids.append(int(no_timestamps))
    return ids


def _window_step(window_s: float) -> int:
    """``window_s`` in log-mel frames, even: the encoder's second convolution halves them."""
    return 2 * math.ceil(window_s * 50)


def window_frames(seconds: float, window_s: float | None, full: int) -> int:
    """The log-mel frames (100 a second) a batch whose longest utterance lasts ``seconds`` is
    encoded in: the utterance plus 1 s of silence, rounded up to a multiple of ``window_s``, at
    most the model's whole window of ``full`` frames; ``window_s`` None: always ``full``."""
    if window_s is None:
        return full
    step = _window_step(window_s)
    return min(full, step * max(1, math.ceil(math.ceil((seconds + 1) * 100) / step)))


def windows(window_s: float | None, full: int) -> list[int]:
    """Every window (frames) :func:`window_frames` gives, shortest first."""
    if window_s is None:
        return [full]
    step = _window_step(window_s)
    return sorted({min(full, step * k) for k in range(1, math.ceil(full / step) + 1)})


def encode(encoder, features: torch.Tensor) -> torch.Tensor:
    """The output of ``encoder`` (a ``WhisperEncoder``) for ``features`` [B, mel bins, frames] of
    any even length up to its window: its own convolutions, layers and norm, with the first
    ``frames / 2`` position embeddings (transformers' ``forward`` takes the whole window only;
    for the whole window this is that ``forward``)."""
    x = F.gelu(encoder.conv1(features))
    x = F.gelu(encoder.conv2(x)).permute(0, 2, 1)
    x = x + encoder.embed_positions.weight[: x.shape[1]]
    for layer in encoder.layers:
        x = layer(x, None)
    return encoder.layer_norm(x)


class StaticWhisper:
    """Greedy transcription of batches of up to ``max_batch`` utterances by ``model`` (a
    ``WhisperForConditionalGeneration``) under ``generation`` (its generation config: suppressed
    and end tokens); ``graphs``: capture each bucket's step (CUDA only); ``frames``: the windows
    (log-mel frames, :func:`windows`) a batch may come in (default: the whole window only)."""

    def __init__(
        self,
        model,
        generation,
        prompt: Sequence[int],
        max_new_tokens: int,
        max_batch: int,
        graphs: bool,
        frames: Sequence[int] | None = None,
        encoder_graphs: bool = True,
        overlap: bool = True,
        prompt_pass: bool = True,
    ):
        config = model.config
        self.model, self.max_batch = model, max_batch
        self.decoder = model.model.decoder
        self.prompt = list(prompt)
        self.max_new_tokens = max_new_tokens
        self.length = len(self.prompt) + max_new_tokens
        if self.length > config.max_target_positions:
            raise ValueError(
                f"prompt ({len(self.prompt)}) + max_new_tokens ({max_new_tokens}) is more than "
                f"the decoder's {config.max_target_positions} positions"
            )
        weight = self.decoder.embed_tokens.weight
        device, dtype = weight.device, weight.dtype
        self.device, self.dtype = device, dtype
        self.graphs = graphs and device.type == "cuda"
        # the cross-attention's kernels (CROSS_KERNELS): torch's own choice on CUDA gave, now and
        # then, one element one rounding step apart from one pass of a clip to the next from the
        # same inputs (docs/gpu.md, seventeenth session). A CPU keeps torch's choice
        self.cross_kernels = cross_kernels(device.type, dtype)
        layers = self.decoder.layers
        self.heads = config.decoder_attention_heads
        self.head_dim = config.d_model // self.heads
        full = 2 * config.max_source_positions
        self.frames = sorted(set(frames or [full]))
        if any(f % 2 or not 2 <= f <= full for f in self.frames):
            raise ValueError(f"windows {self.frames}: even, at most the model's {full} frames")
        kv = (max_batch, self.heads, self.length, self.head_dim)
        cross = max_batch * self.heads * config.max_source_positions * self.head_dim
        self.k = [torch.zeros(kv, device=device, dtype=dtype) for _ in layers]
        self.v = [torch.zeros(kv, device=device, dtype=dtype) for _ in layers]
        # one buffer a layer for the whole window; a window's keys are a contiguous view of its
        # front ([max_batch, heads, positions, head_dim])
        self.cross_k = [torch.zeros(cross, device=device, dtype=dtype) for _ in layers]
        self.cross_v = [torch.zeros(cross, device=device, dtype=dtype) for _ in layers]
        # a step's inputs and outputs, read and written by the captured graphs
        self.tokens = torch.zeros(max_batch, dtype=torch.long, device=device)
        self.position = torch.zeros(1, dtype=torch.long, device=device)
        self.bias = torch.zeros(config.vocab_size, dtype=torch.float32, device=device)
        self.chosen = torch.zeros(max_batch, dtype=torch.long, device=device)
        self.columns = torch.arange(self.length, device=device)
        vocab = config.vocab_size
        suppress = [t for t in (generation.suppress_tokens or []) if 0 <= t < vocab]
        begin = [t for t in (generation.begin_suppress_tokens or []) if 0 <= t < vocab]
        self.plain_bias = torch.zeros(vocab, dtype=torch.float32, device=device)
        self.plain_bias[suppress] = float("-inf")
        self.begin_bias = self.plain_bias.clone()
        self.begin_bias[begin] = float("-inf")
        eos = generation.eos_token_id
        self.eos = {int(e) for e in (eos if isinstance(eos, list) else [eos]) if e is not None}
        self._graphs: dict[tuple[int, int], torch.cuda.CUDAGraph] = {}
        self._pool = None
        # with graphs, a batch's features go here and its encoder pass (and cross-attention
        # keys and values) is one graph a (bucket, window): the eager pass launches a kernel or
        # more per operation of 32 layers, each waiting for the GIL beside the other engines
        self.encoder_graphs = encoder_graphs and self.graphs
        self.features = (
            torch.zeros(max_batch, config.num_mel_bins, self.frames[-1], device=device, dtype=dtype)
            if self.encoder_graphs
            else None
        )
        self._encoders: dict[tuple[int, int], torch.cuda.CUDAGraph] = {}
        # overlap: whether every row has ended is read one step late, from a host flag (pinned on
        # CUDA) copied behind its step, so that the GPU always has the next step queued
        self.overlap = overlap
        # prompt_pass: the forced prompt (start, language, task, no timestamps) decoded in one
        # pass of its P positions instead of P steps of one (a prompt of one token: no pass)
        self.prompt_pass = prompt_pass and len(self.prompt) > 1
        self._prompt_ids = torch.tensor(self.prompt, device=device).repeat(max_batch, 1)
        self._prompt_graphs: dict[tuple[int, int], torch.cuda.CUDAGraph] = {}
        self._flags = HostCopies(1, torch.bool, device)
        # probe(name, layer, tensor): called with each decoder layer's new keys and values and
        # intermediate results as its step or prompt pass is built (captured with it under
        # graphs), for a benchmark that traces where a result first changes
        # (benchmarks/gpu_whisper_trace.py); None in service
        self.probe = None

    def nbytes(self) -> int:
        """The static tensors' size (the cross-attention keys and values are most of it)."""
        held = self.k + self.v + self.cross_k + self.cross_v
        held += [self.features] if self.features is not None else []
        return sum(t.numel() * t.element_size() for t in held)

    def warm(self, buckets: Sequence[int]) -> None:
        """Each bucket's step and encoder pass in each window captured (CUDA graphs) before a
        batch needs them."""
        with torch.inference_mode():
            for frames in self.frames:
                for n in buckets:
                    self._replay(n, frames // 2)
                    if self.prompt_pass:
                        self._replay_prompt(n, frames // 2)
                    if self.encoder_graphs:
                        self._encode(n, frames)

    def cross_backends(self, rows: int) -> list[SDPBackend] | None:
        """The kernels the cross-attention of a batch of ``rows`` may use (``None``: torch's
        choice): the first entry of ``cross_kernels`` whose bound holds."""
        for most, backends in self.cross_kernels:
            if most is None or rows <= most:
                return backends
        raise ValueError(f"no cross-attention kernel for {rows} rows in {self.cross_kernels}")

    def _cross_view(self, flat: torch.Tensor, positions: int) -> torch.Tensor:
        size = self.max_batch * self.heads * positions * self.head_dim
        return flat[:size].view(self.max_batch, self.heads, positions, self.head_dim)

    @torch.inference_mode()
    def transcribe(self, features: torch.Tensor, budget: int) -> list[list[int]]:
        """The generated token ids of each row of ``features`` [B, mel bins, frames] (frames: one
        of the windows; the prompt left out; a row ends before its end token), at most ``budget``
        tokens a row."""
        rows, frames = features.shape[0], features.shape[-1]
        if not 1 <= rows <= self.max_batch:
            raise ValueError(f"a batch of {rows} utterances (1 to {self.max_batch})")
        if frames not in self.frames:
            raise ValueError(f"a window of {frames} frames (one of {self.frames})")
        budget = min(budget, self.max_new_tokens)
        n, positions = bucket(rows, self.max_batch), frames // 2
        if self.encoder_graphs:
            self.features[:rows, :, :frames].copy_(features)
            self._encode(n, frames)
        else:
            self._cross(encode(self.model.model.encoder, features), rows)
        prompt = self.prompt
        chosen = torch.empty((n, budget), dtype=torch.long, device=self.device)
        done = torch.zeros(n, dtype=torch.bool, device=self.device)
        self.tokens[:n].fill_(prompt[0])
        steps = len(prompt) - 1 + budget
        start = 0
        if self.prompt_pass:
            # the forced prompt in one pass: it chooses the first generated token, step start's
            self._replay_prompt(n, positions)
            start = len(prompt) - 1
        unread: int | None = None  # the step whose "all ended" flag is copied but not yet read
        for step in range(start, steps):
            free = step + 1 - len(prompt)  # the generated token this step chooses (< 0: forced)
            if not (self.prompt_pass and step == start):
                self.position.fill_(step)
                self.bias.copy_(self.begin_bias if free == 0 else self.plain_bias)
                self._replay(n, positions)
            if free < 0:
                self.tokens[:n].fill_(prompt[step + 1])
                continue
            picked = self.chosen[:n]
            chosen[:, free] = picked
            self.tokens[:n].copy_(picked)
            done |= self._ended(picked)
            if not self.overlap:
                if bool(done[:rows].all()):
                    budget = free + 1
                    break
                continue
            # the flag goes to the host behind this step; the step before's is read now, while
            # this one runs (a batch that ended there has had one more step launched, not read)
            self._flags.put(free, done[:rows].all().view(1))
            if unread is not None and self._ended_at(unread):
                budget = unread + 1
                break
            unread = free
        out = chosen[:rows, :budget].tolist()
        return [self._until_eos(row) for row in out]

    def _ended_at(self, free: int) -> bool:
        """Whether every row had ended by generated token ``free`` (its flag, once copied)."""
        return bool(self._flags.get(free, 1).item())

    def _ended(self, picked: torch.Tensor) -> torch.Tensor:
        ended = torch.zeros_like(picked, dtype=torch.bool)
        for e in self.eos:
            ended |= picked == e
        return ended

    def _until_eos(self, row: list[int]) -> list[int]:
        for i, token in enumerate(row):
            if token in self.eos:
                return row[:i]
        return row

    def _cross(self, encoded: torch.Tensor, rows: int) -> None:
        """Each layer's cross-attention keys and values of the batch's rows."""
        positions = encoded.shape[1]
        shape = (rows, positions, self.heads, self.head_dim)
        for i, layer in enumerate(self.decoder.layers):
            attn = layer.encoder_attn
            k = self._cross_view(self.cross_k[i], positions)
            v = self._cross_view(self.cross_v[i], positions)
            k[:rows].copy_(attn.k_proj(encoded).view(shape).transpose(1, 2))
            v[:rows].copy_(attn.v_proj(encoded).view(shape).transpose(1, 2))

    def _encode(self, n: int, frames: int) -> None:
        """The encoder pass and cross-attention keys and values of rows ``0..n-1`` of
        ``features`` in a window of ``frames``, as a CUDA graph (rows past the batch's carry
        stale features: their keys are never read)."""
        graph = self._encoders.get((n, frames))
        if graph is None:
            encoder = self.model.model.encoder
            graph = capture(
                lambda: self._cross(encode(encoder, self.features[:n, :, :frames]), n),
                pool=self._pool,
                owner=self,
            )
            self._pool = self._pool or graph.pool()
            self._encoders[n, frames] = graph
        graph.replay()

    def _replay_prompt(self, n: int, positions: int) -> None:
        self._replayed(self._prompt_graphs, self._prompt_step, n, positions)

    def _prompt_step(self, n: int, positions: int) -> None:
        """The forced prompt's tokens at positions 0..P-1 for rows ``0..n-1`` in one pass (each
        attends to those before it): every layer's keys and values of the prompt written, and
        the first generated token (``begin_suppress_tokens`` too) in ``chosen``."""
        decoder = self.decoder
        p = self._prompt_ids.shape[1]
        x = decoder.embed_tokens(self._prompt_ids[:n]) + decoder.embed_positions.weight[:p].to(
            self.dtype
        )
        # [1, 1, P, length]: position i sees columns 0..i (later columns are stale)
        visible = (self.columns[None, :] <= self.columns[:p, None])[None, None]

        def write(i: int, k: torch.Tensor, v: torch.Tensor) -> None:
            self.k[i][:n, :, :p] = k
            self.v[i][:n, :, :p] = v

        x = self._layers(x, n, positions, visible, write)
        logits = self.model.proj_out(decoder.layer_norm(x[:, -1:]))[:, 0].float()
        self.chosen[:n].copy_((logits + self.begin_bias).argmax(-1))

    def _replay(self, n: int, positions: int) -> None:
        self._replayed(self._graphs, self._step, n, positions)

    def _replayed(self, graphs: dict, fn, n: int, positions: int) -> None:
        """``fn(n, positions)``: eagerly without graphs, else its graph in ``graphs`` (captured
        the first time)."""
        if not self.graphs:
            fn(n, positions)
            return
        graph = graphs.get((n, positions))
        if graph is None:
            graph = capture(lambda: fn(n, positions), pool=self._pool, owner=self)
            self._pool = self._pool or graph.pool()
            graphs[n, positions] = graph
        graph.replay()

    def _step(self, n: int, positions: int) -> None:
        """One token for rows ``0..n-1`` against ``positions`` encoder positions: ``tokens`` at
        ``position`` in, ``chosen`` out."""
        decoder = self.decoder
        x = decoder.embed_tokens(self.tokens[:n])[:, None] + decoder.embed_positions.weight[
            self.position
        ].to(self.dtype)
        visible = (self.columns <= self.position)[None, None, None]  # [1, 1, 1, length]

        def write(i: int, k: torch.Tensor, v: torch.Tensor) -> None:
            self.k[i][:n].index_copy_(2, self.position, k)
            self.v[i][:n].index_copy_(2, self.position, v)

        x = self._layers(x, n, positions, visible, write)
        logits = self.model.proj_out(decoder.layer_norm(x))[:, 0].float()
        self.chosen[:n].copy_((logits + self.bias).argmax(-1))

    def _layers(self, x: torch.Tensor, n: int, positions: int, visible, write) -> torch.Tensor:
        """The decoder layers over ``x`` [n, T, d] (T new positions): each layer's new keys and
        values go to ``write(layer, k, v)`` before its self-attention over the cache (``visible``:
        [1, 1, T, length]), then its cross-attention over ``positions`` encoder positions."""
        heads, dim = self.heads, self.head_dim
        t = x.shape[1]
        backends = self.cross_backends(n)  # the same for every layer
        for i, layer in enumerate(self.decoder.layers):
            attn = layer.self_attn
            h = layer.self_attn_layer_norm(x)
            q = (attn.q_proj(h) * attn.scaling).view(n, t, heads, dim).transpose(1, 2)
            k = attn.k_proj(h).view(n, t, heads, dim).transpose(1, 2)
            v = attn.v_proj(h).view(n, t, heads, dim).transpose(1, 2)
            write(i, k, v)
            probe = self.probe
            if probe is not None:
                probe("k", i, k)
                probe("v", i, v)
            a = F.scaled_dot_product_attention(
                q, self.k[i][:n], self.v[i][:n], attn_mask=visible, scale=1.0
            )
            a = a.transpose(1, 2).reshape(n, t, heads * dim)
            x = x + attn.out_proj(a)
            if probe is not None:
                probe("self_attn", i, a)
                probe("self_out", i, x)
            cross = layer.encoder_attn
            h = layer.encoder_attn_layer_norm(x)
            q = (cross.q_proj(h) * cross.scaling).view(n, t, heads, dim).transpose(1, 2)
            with sdpa_kernel(backends) if backends else contextlib.nullcontext():
                a = F.scaled_dot_product_attention(
                    q,
                    self._cross_view(self.cross_k[i], positions)[:n],
                    self._cross_view(self.cross_v[i], positions)[:n],
                    scale=1.0,
                )
            a = a.transpose(1, 2).reshape(n, t, heads * dim)
            x = x + cross.out_proj(a)
            h = layer.final_layer_norm(x)
            m = layer.fc2(layer.activation_fn(layer.fc1(h)))
            if probe is not None:
                probe("cross_attn", i, a)
                probe("cross_out", i, x)
                probe("mlp", i, m)
            x = x + m
        return x


def buckets(max_batch: int) -> list[int]:
    """Every bucket a batch of 1..``max_batch`` rows uses."""
    return sorted({bucket(b, max_batch) for b in range(1, max_batch + 1)})
