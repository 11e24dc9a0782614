"""``causal_lm_gpu``: a causal LM's replies, streamed per session from one continuous-batching loop.

:class:`ChatEngine` loads the model (``serving.weights.load_model``: a verified checkpoint,
or dummy weights of the qwen3-4b configuration) and runs transformers' continuous batching
(``model.init_continuous_batching()``, a ``ContinuousBatchingManager`` with a paged KV cache and,
on CUDA, its CUDA graphs): each reply is a streaming request; requests join and leave the decode
batch at every step, and each session's tokens come back on the event loop through the
manager's result handler (``register_result_handler``), decoded incrementally into text.

The prompt is the checkpoint tokenizer's chat template (Qwen3: thinking off). Dummy weights come
without a tokenizer: :class:`ByteTokenizer` stands in, labeled dummy: the prompt is its UTF-8
bytes, and each generated id becomes a syllable, in words and sentences of English's length, so
that the speech node receives speakable sentences of noise.

On CPU (tests, ``--tiny`` benchmarks) transformers reads the free memory with psutil; without
it the cache would see 0 bytes, so the engine gives the manager the CPU cache size it asked for.
"""

from __future__ import annotations

import asyncio
import importlib.util
import itertools
import logging
import threading
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

from fdb.errors import FdbError
from serving.batching import identity, shared
from serving.conversation.chunker import FIRST_CHUNK, SpeechChunker
from serving.graph.kinds import CausalLmGpuOptions
from serving.graph.nodes import AheadHeld, PrefetchingChatNode, _Prefetch
from serving.graph.runtime import Emit, NodeContext
from serving.graph.streams import Chunk, TextDelta, control
from serving.hub import ModelHub
from serving.weights import WeightSource, _transformers, load_model

log = logging.getLogger("fdb.serving")
CPU_BATCH_TOKENS = (
    512  # tokens per step on CPU (on CUDA transformers sizes it from the free memory)
)
_ids = itertools.count()


class ByteTokenizer:
    """The stand-in tokenizer of dummy weights (no checkpoint, so no vocabulary): byte-level ids
    for the prompt, a syllable per generated id for the reply, with English's shape: about 1.5
    tokens a word (a space after two tokens of three) and a full stop every twelfth token, so the
    speech node cuts its first chunk (up to 7 words) after about as many tokens as a real
    reply's."""

    label = "byte-level stand-in tokenizer (dummy weights)"
    OFFSET = 3  # ids 0-2 stay free for pad / bos / eos
    CONSONANTS, VOWELS = "bdfklmnprstvz", "aeiou"

    def __init__(self, vocab_size: int):
        self.vocab_size = vocab_size

    def prompt(self, messages: Sequence[dict[str, str]]) -> list[int]:
        text = "".join(f"<{m['role']}>{m['content']}\n" for m in messages) + "<assistant>"
        return [(b + self.OFFSET) % self.vocab_size for b in text.encode("utf-8")]

    def decode(self, ids: Sequence[int]) -> str:
        parts = []
        for i, token in enumerate(ids, 1):
            parts.append(
                self.CONSONANTS[token % len(self.CONSONANTS)]
                + self.VOWELS[token // len(self.CONSONANTS) % 5]
            )
            parts.append(". " if i % 12 == 0 else " " if i % 3 != 1 else "")
        return "".join(parts)


class HfTokenizer:
    """A checkpoint's tokenizer and chat template."""

    def __init__(self, path: str):
        self.inner = _transformers().AutoTokenizer.from_pretrained(path, local_files_only=True)
        self.label = f"tokenizer of {path}"

    def prompt(self, messages: Sequence[dict[str, str]]) -> list[int]:
        ids = self.inner.apply_chat_template(
            list(messages), add_generation_prompt=True, tokenize=True, enable_thinking=False
        )
        return list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)

    def decode(self, ids: Sequence[int]) -> str:
        return self.inner.decode(list(ids), skip_special_tokens=True)


class ChatEngine:
    """One causal LM under a continuous-batching manager; :meth:`stream` is called by every
    session."""

    def __init__(self, source: WeightSource, options: CausalLmGpuOptions):
        self.source, self.options = source, options
        self.model = load_model(source, "causal_lm_gpu", options.device, options.dtype)
        has_tokenizer = (
            not source.dummy and (Path(str(source.path)) / "tokenizer_config.json").is_file()
        )
        self.tokenizer = (
            HfTokenizer(str(source.path))
            if has_tokenizer
            else ByteTokenizer(self.model.config.vocab_size)
        )
        self.slots = None
        self.manager = None
        if options.engine == "slots":
            self.slots = self._start_slots()
        else:
            self.manager = self._start_manager()
        self.identity = identity(
            "causal_lm_gpu",
            "llm",
            source,
            {
                "device": options.device,
                "dtype": options.dtype,
                "max_batch": options.max_batch,
                "temperature": options.temperature,
                "tokenizer": self.tokenizer.label,
                "batching": "slot cache, a CUDA graph per (rows, length) bucket"
                if options.engine == "slots"
                else "transformers continuous batching",
                "cuda_graphs": options.cuda_graphs and options.device != "cpu",
                "stream_priority": None if self.slots is None else self.slots.stream_priority,
                "overlap": options.overlap if options.engine == "slots" else None,
            },
        )
        log.info(
            "causal_lm_gpu: %s, %s, on %s (%s), up to %d requests per step",
            source.label(),
            self.tokenizer.label,
            options.device,
            options.dtype,
            options.max_batch,
        )

    def _eos(self) -> list[int]:
        """A checkpoint's end tokens; none for dummy weights (a reply runs to its budget)."""
        if self.source.dummy:
            return []
        eos = getattr(self.model.generation_config, "eos_token_id", None)
        return [] if eos is None else list(eos) if isinstance(eos, list | tuple) else [eos]

    def _start_slots(self):
        # lazy: serving.gpu.lm_slots imports torch (optional: the gpu extra)
        from serving.gpu.lm_slots import SlotLmEngine

        o = self.options
        return SlotLmEngine(
            self.model,
            o.max_batch,
            o.max_prompt_tokens + o.max_reply_tokens,
            o.temperature,
            self._eos(),
            cuda_graphs=o.cuda_graphs,
            prefill_graphs=o.prefill_graphs,
            stream_priority=o.stream_priority,
            overlap=o.overlap,
        )

    def _start_manager(self):
        # lazy: transformers is optional (the gpu extra)
        from transformers import GenerationConfig
        from transformers.generation.configuration_utils import ContinuousBatchingConfig

        o = self.options
        sample = o.temperature > 0
        eos = self._eos()
        generation = GenerationConfig(
            max_new_tokens=o.max_new_tokens,
            do_sample=sample,
            temperature=o.temperature if sample else None,
            eos_token_id=eos or -1,
            pad_token_id=0,
        )
        blocks = o.cache_blocks
        cpu = o.device == "cpu"
        if cpu and blocks is None:
            blocks = o.max_batch * -(-(o.max_prompt_tokens + o.max_new_tokens) // o.block_size)
        config = ContinuousBatchingConfig(
            block_size=o.block_size,
            num_blocks=blocks,
            max_batch_tokens=CPU_BATCH_TOKENS if cpu else None,
            max_requests_per_batch=o.max_batch,
            max_memory_percent=o.cache_memory_fraction,
            # None on CPU: transformers' own choice, which is off there
            use_cuda_graph=None if cpu else o.cuda_graphs,
        )
        if cpu:
            _cpu_memory()
        manager = self.model.init_continuous_batching(
            generation_config=generation, continuous_batching_config=config
        )
        manager.start()
        return manager

    async def stream(
        self, messages: Sequence[dict[str, str]], max_new_tokens: int
    ) -> AsyncIterator[str]:
        """The reply's text as it decodes; leaving early (an interruption) cancels the request."""
        ids = self.tokenizer.prompt(messages)[-self.options.max_prompt_tokens :]
        if self.slots is not None:
            async for piece in self._stream_slots(ids, max_new_tokens):
                yield piece
            return
        request = f"reply-{next(_ids)}"
        outputs: asyncio.Queue = asyncio.Queue()
        self.manager.register_result_handler(request, outputs.put_nowait)
        if (
            self.manager.add_request(
                ids, request_id=request, max_new_tokens=max_new_tokens, streaming=True
            )
            is None
        ):
            with self.manager.output_router._lock:
                self.manager.output_router.result_handlers.pop(request, None)
            raise FdbError(
                "causal_lm_gpu: the decode loop takes no requests (it stopped or failed)",
                "see the server log for the decode loop's error; restart the server",
            )
        finished, text = False, ""
        try:
            while not finished:
                output = await outputs.get()
                if output.error:
                    raise FdbError(
                        f"causal_lm_gpu: the reply failed: {output.error.splitlines()[0]}",
                        "see the server log",
                    )
                finished = output.is_finished()
                piece, text = self._new_text(text, output.generated_tokens, finished)
                if piece:
                    yield piece
        finally:
            if not finished:
                self.manager.cancel_request(request)
                with self.manager.output_router._lock:
                    self.manager.output_router.result_handlers.pop(request, None)

    async def _stream_slots(self, ids: list[int], max_new_tokens: int) -> AsyncIterator[str]:
        tokens: list[int] = []
        text = ""
        budget = min(max_new_tokens, self.options.max_reply_tokens)
        async for token in self.slots.stream(ids, budget):
            tokens.append(token)
            piece, text = self._new_text(text, tokens, finished=False)
            if piece:
                yield piece

    def _new_text(self, text: str, tokens: list[int], finished: bool) -> tuple[str, str]:
        """(the reply's new text, its whole text) once ``tokens`` are decoded, after ``text``; a
        character split across tokens waits for its last byte unless the reply ``finished``."""
        full = self.tokenizer.decode(tokens)
        if full.endswith("\ufffd") and not finished:
            return "", text
        piece = full[len(text) :] if full.startswith(text) and len(full) > len(text) else ""
        return piece, full

    def close(self) -> None:
        """Stop the decode loop (its thread is not a daemon: a server that exits must stop it)."""
        if self.slots is not None:
            self.slots.close()
        if self.manager is not None:
            self.manager.stop(block=True, timeout=10, hard_stop=True)


def _cpu_memory() -> None:
    """Let transformers' paged cache size itself on a CPU without psutil (it would read 0 bytes)."""

    if importlib.util.find_spec("psutil") is not None:
        return
    # lazy: torch is optional (the gpu extra)
    import torch
    from transformers.generation.continuous_batching import cache

    cache.get_device_and_memory_breakdown = lambda: (torch.device("cpu"), 8 << 30, 0, 0)


def engine_key(options: CausalLmGpuOptions) -> tuple:
    return (
        "causal_lm_gpu",
        repr(options.source("causal_lm_gpu")),
        options.device,
        options.dtype,
        options.max_batch,
        options.temperature,
        options.max_prompt_tokens,
        options.block_size,
        options.cache_blocks,
        options.cache_memory_fraction,
        options.engine,
        options.max_reply_tokens,
        options.cuda_graphs,
        options.prefill_graphs,
        options.stream_priority,
        options.overlap,
    )


class CausalLmGpuNode(PrefetchingChatNode):
    """``causal_lm_gpu``: streams the shared :class:`ChatEngine`'s reply to each messages chunk as
    text_delta, then turn.done. A ``configure`` with ``sampling.max_new_tokens_per_unit`` applies
    from the next reply (the temperature is the engine's, the same for every session). An
    interruption (a preempting control edge) cancels the reply's request in the decode batch.

    Prefetch, as ``llama_chat``: a ``reply.prefetch`` (the dialog, at a pause that may end the
    turn) starts the reply to its messages at once; the next messages chunk takes it over if its
    messages and max_new_tokens are the same (greedy decoding: the same reply), else it is
    cancelled, as it is at a withdrawal, at the next prefetch, or PREFETCH_TTL_S unclaimed."""

    @classmethod
    def build(cls, ctx: NodeContext) -> CausalLmGpuNode:
        return cls(ctx.models, ctx.decl.options, ctx.decl.name, ctx.first_chunk)

    def __init__(
        self,
        models: ModelHub,
        options: CausalLmGpuOptions,
        name: str = "llm",
        first_chunk: tuple[int, int] = FIRST_CHUNK,
    ):
        self._models, self._options, self._name = models, options, name
        self.first_chunk = first_chunk
        self._max_new_tokens = options.max_new_tokens
        self._engine: ChatEngine | None = None
        self._held = AheadHeld()  # a reply started ahead, not yet claimed

    async def open(self) -> None:
        options = self._options

        def build() -> ChatEngine:
            return ChatEngine(options.source(f"session_nodes.{self._name}.weights"), options)

        self._engine = await shared(self._models, engine_key(options), build, self._models.run)

    async def warm(self) -> None:
        """One short reply (the first step's costs, CUDA graph captures, before any session)."""
        async for _ in self._engine.stream([{"role": "user", "content": "Hello."}], 4):
            pass

    def _key(self, messages: list[dict[str, str]]) -> tuple:
        return tuple((m["role"], m["content"]) for m in messages), self._max_new_tokens

    async def on_control(self, chunk: Chunk, emit: Emit) -> None:
        if chunk.control == "reply.prefetch":
            await self._on_prefetch(chunk, emit)
        sampling = chunk.payload.data.get("sampling") if chunk.control == "configure" else None
        if sampling and sampling.get("max_new_tokens_per_unit"):
            self._max_new_tokens = int(sampling["max_new_tokens_per_unit"])

    def _start_prefetch(self, messages: list[dict[str, str]], emit: Emit) -> None:
        prefetch = _Prefetch(
            key=self._key(messages),
            stop=threading.Event(),
            released=threading.Event(),
            announce=self._announcer(emit),
            chunker=SpeechChunker(*self.first_chunk),
        )
        # the engine's stream is async: no thread
        prefetch.task = asyncio.ensure_future(
            prefetch.take(self._engine.stream(messages, self._max_new_tokens))
        )
        self._held.keep(prefetch)

    async def on_chunk(self, chunk: Chunk, emit: Emit) -> None:
        if chunk.format != "messages":
            return
        messages = [{"role": m.role, "content": m.content} for m in chunk.payload.messages]
        prefetch = self._claim(messages)
        if prefetch is not None:
            pieces = prefetch.read()
        else:
            pieces = self._engine.stream(messages, self._max_new_tokens)
        try:
            async for piece in pieces:
                await emit(
                    Chunk("text_delta", TextDelta(piece, chunk.payload.language), turn=chunk.turn)
                )
        finally:
            if prefetch is not None:
                prefetch.cancel()  # an interruption stops it; no-op once it has ended
        await emit(control("turn.done", turn=chunk.turn))
