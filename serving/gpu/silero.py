"""``silero_gpu``: the ``vad`` stage with one Silero network for every session of the server.

The ``vad`` stage (``serving.graph.nodes.VadNode``) gives each session a Silero model of its own
on the CPU, one call per 32 ms frame and session. Here one :class:`SileroEngine` per server holds
:class:`fdb.models.vad.SileroBatch` on the node's device; each session keeps its own context and
recurrent state (a :class:`~fdb.models.vad.SileroStream`) and its own detector (server_vad,
prefetch and semantic_vad's candidates: :class:`fdb.models.vad.StreamingVad` without a model),
and hands each whole frame to the engine's :class:`~serving.batching.Batcher`, which scores
the waiting frames of all sessions in one call. A session's probabilities, and so its events,
are those of the ``vad`` stage (``tests/serving/gpu/test_silero_gpu.py``).
"""

from __future__ import annotations

import numpy as np

from fdb.models.vad import FRAME, SileroBatch, StreamingVad
from serving.batching import Batcher, shared
from serving.graph.kinds import SileroGpuOptions
from serving.graph.nodes import VadNode
from serving.graph.runtime import NodeContext
from serving.hub import ModelHub


class SileroEngine:
    """One Silero network on ``device`` and the batcher of every session's frames."""

    def __init__(self, device: str, max_batch: int):
        self.silero = SileroBatch(device)
        self.batcher = Batcher(self.silero.score, max_batch, "silero_gpu")
        self.identity = self.silero.identity.model_copy(
            update={"settings": {**self.silero.identity.settings, "max_batch": max_batch}}
        )

    def close(self) -> None:
        self.batcher.close()


class SileroGpuNode(VadNode):
    """``silero_gpu``: the ``vad`` stage's events, each frame scored by the shared engine."""

    @classmethod
    def build(cls, ctx: NodeContext) -> SileroGpuNode:
        return cls(ctx.models, ctx.decl.options, **ctx.vad_settings)

    def __init__(self, models: ModelHub, options: SileroGpuOptions, **settings):
        super().__init__(models, **settings)
        self._options = options
        self._engine: SileroEngine | None = None
        self._stream = None

    async def open(self) -> None:
        options = self._options
        self._engine = await shared(
            self._models,
            ("silero_gpu", options.device, options.max_batch),
            lambda: SileroEngine(options.device, options.max_batch),
            self._models.run,
        )
        self._vad = StreamingVad(**self._settings, model=False)
        self._stream = self._engine.silero.stream()

    async def warm(self) -> None:
        """One frame of silence on a stream of its own: the network's first call (its device's
        start-up) before any session; the server loads the engine before it reports ready."""
        await self._engine.batcher.submit((self._engine.silero.stream(), np.zeros(FRAME)))

    def _reset(self) -> None:
        self._vad.reset()
        self._stream.reset()

    async def _feed(self, samples: np.ndarray) -> list[tuple[str, int]]:
        events: list[tuple[str, int]] = []
        for frame in self._vad.frames(samples):
            events += self._vad.step(await self._engine.batcher.submit((self._stream, frame)))
        return events
