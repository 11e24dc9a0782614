"""``whisper_gpu``: Whisper transcription on a GPU, one ``generate`` for the utterances of all
sessions.

:class:`WhisperEngine` holds the model (``serving.weights.load_model``: a verified checkpoint,
or dummy weights of the whisper-large-v3 configuration), its feature extractor and, where the
checkpoint has one, its tokenizer. Its :class:`~serving.batching.Batcher` pads every waiting
utterance with silence to the batch's window, computes the log-mel features on the device and
decodes the batch greedily, capped at ``max_new_tokens``: with ``decoder: static`` (the default)
on fixed tensors with a CUDA graph per batch bucket and window (:mod:`serving.gpu.whisper_static`,
the same tokens as ``generate``) in a window of the longest utterance plus 1 s, rounded up to a
multiple of ``window_s`` (10 s by default, as the embedded recognizer); with ``decoder:
generate`` by transformers' ``generate`` (the A/B), always in the model's 30 s window
(``2 * max_source_positions`` log-mel frames). A longer utterance keeps its first 30 s.

Dummy weights decode token noise; without a tokenizer each utterance becomes a fixed placeholder
marked as dummy (``DUMMY_TEXT``) so that the dialog has a user message to answer.

:class:`WhisperGpuNode` is ``whisper_transcription``'s node (utterances, pad, prefetch, order:
``serving.graph.nodes.WhisperNode``) with the recognition sent to the shared engine.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from serving.batching import Batcher, identity, shared
from serving.graph.kinds import WhisperGpuOptions
from serving.graph.nodes import WhisperNode
from serving.graph.runtime import NodeContext
from serving.hub import ModelHub
from serving.weights import WeightSource, _transformers, load_model

log = logging.getLogger("fdb.serving")
RATE = 16000
HOP = 160  # samples per log-mel frame
DUMMY_TEXT = "dummy transcript"  # + the token count: the words of a dummy-weight recognizer


class WhisperEngine:
    """One Whisper model and its batcher; ``transcribe`` is awaited by every session."""

    def __init__(
        self,
        source: WeightSource,
        device: str,
        dtype: str,
        max_batch: int,
        max_new_tokens: int,
        language: str | None,
        max_tokens_per_s: float | None = None,
        decoder: str = "static",
        window_s: float | None = None,
        encoder_graphs: bool = True,
        stream_priority: int = 0,
        overlap: bool = True,
        lanes: int = 1,
    ):
        # lazy: torch is optional (the gpu extra)
        import torch

        self.source, self.device, self.max_new_tokens, self.language = (
            source,
            device,
            max_new_tokens,
            language,
        )
        self.max_tokens_per_s = max_tokens_per_s
        self.dtype = getattr(torch, dtype)
        self.model = load_model(source, "whisper_gpu", device, dtype)
        config = self.model.config
        self.samples = 2 * config.max_source_positions * HOP  # the encoder's whole window
        self.window_s = window_s if decoder == "static" else None  # generate: the whole window
        self.features, self.tokenizer = _processors(source, config.num_mel_bins)
        self.generation = self.model.generation_config
        self.generation.max_new_tokens, self.generation.max_length = max_new_tokens, None
        # one lane a batch that may run at once: its CUDA stream (batches run on streams of
        # their own, so that the encoder's long kernels run beside the steps of the other
        # engines on the GPU, the reply model's and the speech model's, not before them) and,
        # with the static decoder, its own static tensors and graphs
        # lazy: serving.gpu.slots imports torch (optional: the gpu extra)
        from serving.gpu.slots import engine_stream, priority_of

        self.statics: list = []  # one a lane (static decoder), else none
        cross = None  # the static decoder's cross-attention kernels, as JSON
        if decoder == "static":
            # lazy: torch is optional (the gpu extra), and whisper_static imports it
            from serving.gpu.whisper_static import (
                StaticWhisper,
                describe_cross,
                prompt_ids,
                windows,
            )

            prompt = prompt_ids(self.generation, language)
            frames = windows(self.window_s, self.samples // HOP)
            self.statics = [
                StaticWhisper(
                    self.model,
                    self.generation,
                    prompt,
                    max_new_tokens,
                    max_batch,
                    graphs=True,
                    frames=frames,
                    encoder_graphs=encoder_graphs,
                    overlap=overlap,
                )
                for _ in range(lanes)
            ]
            cross = describe_cross(self.statics[0].cross_kernels)
        self.cuda_streams = [engine_stream(device, stream_priority) for _ in range(lanes)]
        self.batcher: Batcher[np.ndarray, str] = Batcher(
            [functools.partial(self.run_batch, lane=lane) for lane in range(lanes)],
            max_batch,
            "whisper_gpu",
            stage_marks=True,
        )
        self.identity = identity(
            "whisper_gpu",
            "asr",
            source,
            {
                "device": device,
                "dtype": dtype,
                "max_batch": max_batch,
                "max_new_tokens": max_new_tokens,
                "max_tokens_per_s": max_tokens_per_s,
                "language": language,
                "decoder": decoder,
                "window_s": self.window_s,
                "stream_priority": priority_of(self.cuda_streams[0]),
                "overlap": overlap if decoder == "static" else None,
                "lanes": lanes,
                "cross_attention": cross,
                "tokenizer": "checkpoint"
                if self.tokenizer is not None
                else "none (dummy placeholder text)",
            },
        )
        log.info(
            "whisper_gpu: %s on %s (%s), batches of up to %d, %d lane(s)%s",
            source.label(),
            device,
            dtype,
            max_batch,
            lanes,
            f", {self.statics[0].nbytes() / 2**30:.2f} GiB of static tensors a lane, "
            f"cross-attention kernels {cross}"
            if self.statics
            else "",
        )

    @classmethod
    def from_options(cls, options: WhisperGpuOptions, where: str = "asr") -> WhisperEngine:
        """The engine of a ``whisper_gpu`` node's options (``where`` names its weights in
        errors)."""
        return cls(options.source(where), *_engine_args(options))

    def close(self) -> None:
        self.batcher.close()

    async def warm(self) -> None:
        """Every batch bucket's graphs captured on every lane, each lane's in its own thread
        (:meth:`Batcher.run_alone` with ``each``: cuBLAS's workspace is per thread, and lanes
        whose graphs shared one would corrupt each other's results when they replay at once),
        while no batch runs (static decoder on CUDA; else nothing)."""
        await self.batcher.run_alone(self.warm_lane, each=True)

    def warm_graphs(self) -> None:
        """:meth:`warm` from code with no event loop running (benchmarks, tests)."""
        asyncio.run(self.warm())

    def warm_lane(self, lane: int) -> None:
        """Lane ``lane``'s graphs captured (in the calling thread: the lane's own)."""
        static = self.statics[lane] if self.statics else None
        if static is not None and static.graphs:
            # lazy: torch is optional (the gpu extra), and whisper_static imports it
            import torch

            from serving.gpu.whisper_static import buckets

            static.warm(buckets(static.max_batch))
            torch.cuda.synchronize()  # before the batches, on the lane's stream, use them

    async def transcribe(self, samples: np.ndarray) -> str:
        return await self.batcher.submit(samples)

    def run_batch(self, batch: Sequence[np.ndarray], lane: int = 0) -> list[str]:
        """The text of each utterance (blocking; in ``lane``'s thread, on its stream and static
        tensors). Called from another thread (a test, a benchmark), the batch still runs in the
        lane's thread: on an H100 a lane whose batches ran in the calling thread gave a clip a
        different token from one pass to the next, where in its own thread it repeated itself
        (docs/gpu.md, fifteenth session)."""
        return self.batcher.in_lane(lane, self._run_on_lane, batch, lane)

    def _run_on_lane(self, batch: Sequence[np.ndarray], lane: int) -> list[str]:
        # lazy: serving.gpu.slots imports torch (optional: the gpu extra)
        from serving.gpu.slots import on_stream

        with on_stream(self.cuda_streams[lane]):
            return self._run_batch(batch, self.statics[lane] if self.statics else None)

    def window(self, batch: Sequence[np.ndarray]) -> int:
        """The samples the batch is encoded in (``whisper_static.window_frames``)."""
        # lazy: torch is optional (the gpu extra), and whisper_static imports it
        from serving.gpu.whisper_static import window_frames

        longest = min(max(len(s) for s in batch), self.samples) / RATE
        return window_frames(longest, self.window_s, self.samples // HOP) * HOP

    def _run_batch(self, batch: Sequence[np.ndarray], static) -> list[str]:
        # lazy: torch is optional (the gpu extra)
        import torch

        samples = self.window(batch)
        features = self.log_mel(batch, samples).to(self.device, self.dtype)
        if static is not None:
            rows = static.transcribe(features, self.token_budget(batch))
            return [self._text(ids) for ids in rows]
        extra = {"language": self.language, "task": "transcribe"} if self._multilingual() else {}
        with torch.inference_mode():
            tokens = self.model.generate(
                input_features=features,
                generation_config=self.generation,
                max_new_tokens=self.token_budget(batch),
                **extra,
            )
        return [self._text(row) for row in tokens.tolist()]

    def log_mel(self, batch: Sequence[np.ndarray], samples: int):
        """The batch's log-mel features [B, mel bins, frames] in a window of ``samples``, made on
        the CPU (torch's STFT, which leaves the GIL to the GPU threads): on CUDA each new batch
        size needed a cuFFT plan of its own, which the first batch of that size waited for
        (docs/gpu.md measured it), and the GPU's features came back to the host before the
        model's copy anyway."""
        inputs = self.features(
            [np.asarray(s, dtype=np.float32)[:samples] for s in batch],
            sampling_rate=RATE,
            return_tensors="pt",
            padding="max_length",
            max_length=samples,
            truncation=True,
            device="cpu",
        )
        return inputs.input_features

    def token_budget(self, batch: Sequence[np.ndarray]) -> int:
        """The batch's decode bound: ``max_tokens_per_s`` of its longest utterance (at least 4),
        at most ``max_new_tokens``."""
        if self.max_tokens_per_s is None:
            return self.max_new_tokens
        longest = min(max(len(s) for s in batch), self.samples) / RATE
        return min(self.max_new_tokens, max(4, math.ceil(longest * self.max_tokens_per_s)))

    def _multilingual(self) -> bool:
        return self.language is not None and bool(
            getattr(self.model.generation_config, "lang_to_id", None)
        )

    def _text(self, ids: list[int]) -> str:
        if self.tokenizer is not None:
            return self.tokenizer.decode(ids, skip_special_tokens=True).strip()
        return f"{DUMMY_TEXT} of {len(ids)} tokens"


def _processors(source: WeightSource, mel_bins: int):
    """(feature extractor, tokenizer or None): a checkpoint's own, else the defaults for
    ``mel_bins``."""

    transformers = _transformers()
    if source.dummy:
        return transformers.WhisperFeatureExtractor(feature_size=mel_bins), None
    features = transformers.WhisperFeatureExtractor.from_pretrained(
        source.path, local_files_only=True
    )
    has_tokenizer = any(
        (Path(source.path) / name).is_file() for name in ("tokenizer.json", "vocab.json")
    )
    tokenizer = (
        transformers.AutoTokenizer.from_pretrained(source.path, local_files_only=True)
        if has_tokenizer
        else None
    )
    return features, tokenizer


def _engine_args(options: WhisperGpuOptions) -> tuple:
    """The node's options that :class:`WhisperEngine` takes after its weights, in its order: what
    builds an engine is also what tells two engines apart (:func:`engine_key`)."""
    return (
        options.device,
        options.dtype,
        options.max_batch,
        options.max_new_tokens,
        options.language,
        options.max_tokens_per_s,
        options.decoder,
        options.window_s,
        options.encoder_graphs,
        options.stream_priority,
        options.overlap,
        options.lanes,
    )


def engine_key(options: WhisperGpuOptions) -> tuple:
    return ("whisper_gpu", repr(options.source("whisper_gpu")), *_engine_args(options))


class WhisperGpuNode(WhisperNode):
    """``whisper_gpu``: ``WhisperNode``'s utterances, recognized by the shared
    :class:`WhisperEngine`."""

    @classmethod
    def build(cls, ctx: NodeContext) -> WhisperGpuNode:
        return cls(ctx.models, ctx.decl.options, ctx.decl.name, ctx.vad_settings.get("prefetch_ms"))

    def __init__(
        self,
        models: ModelHub,
        options: WhisperGpuOptions,
        name: str = "asr",
        prefetch_ms: int | None = None,
    ):
        super().__init__(models, options, prefetch_ms)
        self._name = name
        self._engine: WhisperEngine | None = None

    async def open(self) -> None:
        options = self._options

        def build() -> WhisperEngine:
            return WhisperEngine.from_options(options, f"session_nodes.{self._name}.weights")

        self._engine = await shared(self._models, engine_key(options), build, self._models.run)

    async def warm(self) -> None:
        """Every bucket's graphs captured, then one transcription of 1 s of silence on each lane
        (the first call's costs, before any session)."""
        engine = self._engine
        await engine.warm()
        silence = [np.zeros(RATE, dtype=np.float32)]
        await engine.batcher.run_alone(lambda lane: engine.run_batch(silence, lane), each=True)

    async def _recognize(self, samples: np.ndarray, before=None) -> tuple[str, str | None]:
        if before is not None:
            await asyncio.gather(before, return_exceptions=True)
        return await self._engine.transcribe(samples), self._options.language
