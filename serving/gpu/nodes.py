"""GPU model nodes as a system's backends: how they are built.

A role's backend in a launch file may be a GPU node (a mapping with ``kind``)::

    backends:
      tts:
        kind: csm_gpu
        weights: {load_format: dummy, preset: csm-1b}   # or {path: DIR, sha256: HEX}
        device: cuda
        max_batch: 64

The options (``serving.graph.kinds``: :class:`~serving.graph.kinds.GpuNode`) are checked when
the launch file loads (no torch needed); the model loads when the server starts. Each kind is
an entry of ``serving.graph.registry`` (its options class in ``serving.graph.kinds``, its
backend class here or in its own module): a new GPU node is one options class, one backend
class and one entry. A native model's sessions run :mod:`serving.duplex.native`.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Iterator

import numpy as np

from serving.gpu.csm import RATE, CsmEngine, CsmOptions
from serving.gpu.moshi import MoshiEngine, MoshiOptions
from serving.graph.kinds import CsmSpeechNode, MoshiNativeNode
from serving.weights import load_model, load_tokenizer


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
            prefill_graphs=node.prefill_graphs,
            stream_priority=node.stream_priority,
            overlap=node.overlap,
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


class MoshiNative:
    """The loaded ``moshi_gpu`` node (the hub's ``native``): the model and its
    :class:`MoshiEngine`, which the sessions' :class:`serving.duplex.native.MoshiSessionEngine`
    share."""

    def __init__(self, node: MoshiNativeNode) -> None:
        source = node.source()
        model = load_model(source, "moshi_gpu native model", node.device, node.dtype)
        tokenizer = load_tokenizer(source)
        options = MoshiOptions(
            max_batch=node.max_batch,
            max_len=node.max_len,
            codec_context=node.codec_context,
            codec=node.codec,
            gather_ms=node.gather_ms,
            cuda_graphs=node.cuda_graphs,
            fuse=node.fuse,
        )
        self.engine = MoshiEngine(
            model, options, tokenizer=tokenizer, dummy=source.dummy, weights_label=source.label()
        )
        self.identity = self.engine.identity

    def close(self) -> None:
        self.engine.shutdown()
