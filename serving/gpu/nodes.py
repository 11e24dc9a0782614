"""GPU model nodes as a system's backends: their options and how they are built.

A role's backend in a launch file may be a GPU node (a mapping with ``kind``)::

    backends:
      tts:
        kind: csm_gpu
        weights: {load_format: dummy, preset: csm-1b}   # or {path: DIR, sha256: HEX}
        device: cuda
        max_batch: 64

The options are checked when the launch file loads (no torch needed); the model loads when the
server starts. Each kind is an entry of ``serving.graph.registry`` (its options class here, its
backend class here or in its own module): a new GPU node is one file and one entry.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from serving.gpu.csm import RATE, CsmEngine, CsmOptions
from serving.gpu.weights import WeightSource, load_model, load_tokenizer


class GpuNode(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    presets: ClassVar[tuple[str, ...]] = ()  # the presets of this kind's model class

    weights: dict[str, Any]
    device: str = Field("cuda", pattern=r"^(cpu|cuda(:\d+)?)$")
    dtype: Literal["bfloat16", "float16", "float32"] = "bfloat16"

    @field_validator("weights")
    @classmethod
    def _weights(cls, value: dict[str, Any]) -> dict[str, Any]:
        try:
            source = WeightSource.parse(value, "weights")
        except Exception as exc:  # FdbError: its message names the field
            raise ValueError(getattr(exc, "message", str(exc))) from None
        if source.preset is not None and source.preset not in cls.presets:
            raise ValueError(
                f"weights: preset {source.preset!r} is not a model of this kind "
                f"(use one of {', '.join(cls.presets)})"
            )
        return value

    def source(self) -> WeightSource:
        return WeightSource.parse(self.weights, "weights")


class CsmSpeechNode(GpuNode):
    """CSM voice-cloning TTS (:mod:`serving.gpu.csm`)."""

    presets: ClassVar[tuple[str, ...]] = ("csm-1b",)

    kind: Literal["csm_gpu"]
    max_batch: int = Field(64, ge=1, le=512)
    max_len: int = Field(1024, ge=64, le=8192)
    max_audio_s: float = Field(60.0, gt=0, le=600)
    temperature: float = Field(0.9, ge=0, le=2)
    top_k: int = Field(50, ge=1)
    decode_context: int = Field(8, ge=1, le=64)
    codec: Literal["streaming", "window"] = "streaming"
    cuda_graphs: bool = True
    fuse: bool = True  # serving.gpu.slots.fuse_layers (False: the transformers modules' own ops)
    dummy_s_per_char: float = Field(0.07, gt=0, le=1)


class MoshiNativeNode(GpuNode):
    """Moshi as a native full-duplex model (:mod:`serving.gpu.moshi`, :mod:`serving.gpu.native`);
    the ``model`` of a system's ``duplex`` settings."""

    kind: Literal["moshi_gpu"]
    presets: ClassVar[tuple[str, ...]] = ("moshi-7b",)
    max_batch: int = Field(32, ge=1, le=256)
    max_len: int = Field(2048, ge=64, le=3000)  # frames per session; Moshi's context is 3000
    codec_context: int = Field(8, ge=1, le=64)
    codec: Literal["streaming", "window"] = "streaming"
    gather_ms: float = Field(2.0, ge=0, le=80)
    cuda_graphs: bool = True
    fuse: bool = True  # serving.gpu.slots.fuse_layers on the temporal transformer


class CsmTts:
    """The TTS backend interface (``rate``, ``stream``, ``synthesize``, ``identity``) over a
    :class:`serving.gpu.csm.CsmEngine`; ``clones``: it takes reference audio."""

    clones = True
    remote = False

    def __init__(self, node: CsmSpeechNode):
        source = node.source()
        model = load_model(source, "csm_gpu tts", node.device, node.dtype)
        tokenizer = load_tokenizer(source)
        options = CsmOptions(
            max_batch=node.max_batch,
            max_len=node.max_len,
            max_audio_s=node.max_audio_s,
            temperature=node.temperature,
            top_k=node.top_k,
            decode_context=node.decode_context,
            codec=node.codec,
            cuda_graphs=node.cuda_graphs,
            fuse=node.fuse,
            dummy_s_per_char=node.dummy_s_per_char,
        )
        self.engine = CsmEngine(
            model, options, tokenizer=tokenizer, dummy=source.dummy, weights_label=source.label()
        )
        self.identity = self.engine.identity
        self.rate = RATE

    def stream(
        self,
        text: str,
        ref_audio: np.ndarray | None = None,
        ref_text: str = "",
        cancelled: threading.Event | None = None,
    ) -> Iterator[np.ndarray]:
        yield from self.engine.stream(text, ref_audio, ref_text, cancelled)

    def astream(
        self, text: str, ref_audio: np.ndarray | None = None, ref_text: str = ""
    ) -> AsyncIterator[np.ndarray]:
        """The frames as they are generated, on the caller's event loop (the speech node streams
        them into the session instead of waiting for a chunk's whole audio)."""
        return self.engine.astream(text, ref_audio, ref_text)

    def synthesize(self, text: str, heard_language: str | None = None) -> np.ndarray:
        parts = list(self.stream(text))
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)

    def close(self) -> None:
        self.engine.close()
