"""Moshi behind fdb's native session protocol: the per-session unit loop of a ``moshi_gpu`` node.

A native session (:class:`serving.duplex.session.NativeSession`) of a system whose graph is a
``moshi_gpu`` node runs that graph, whose node is a :class:`MoshiSessionEngine` (the kind's
registered graph node, :class:`serving.duplex.node.NativeNode`), over the model the hub loaded
once for every session (``hub.native``). Units are 80 ms (Moshi's frame).
Per unit, in order: the unit (16 kHz, the session's internal rate; the tail unit padded with
silence) is resampled to 24 kHz and handed to the shared :class:`serving.gpu.moshi.MoshiEngine`,
which batches it with the other sessions' units; Moshi's 80 ms of audio for that frame goes out
in the session's one response (PersonaPlex style: ``response.created`` with the first unit,
``response.done`` once the input ended and its last frame went out); then ``sglang.unit.done``
reports the unit. A unit's receipt therefore waits for the batched step: a late step is a late
unit, which the native serving metrics count. ``response.cancel`` ends the response
cancelled/``interrupted`` at the next unit; the model's later frames open a new response.
"""

from __future__ import annotations

import asyncio

import numpy as np

from fdb.audio import float_to_pcm16, resample
from fdb.dialects.events import MediaTime, UnitDone, UnitSglang, new_id
from serving.duplex.node import NativeNode, NativePort
from serving.duplex.speaker import SpokenReply
from serving.graph.kinds import MoshiNativeNode
from serving.graph.runtime import Emit
from serving.realtime.audio_input import SAMPLES_PER_MS, Unit, UnitCutter
from serving.realtime.turn import Turn, Utterance

BYTES_PER_MS = 48  # 24 kHz PCM16 mono out
INPUT_RATE = SAMPLES_PER_MS * 1000


class MoshiSessionEngine(NativeNode):
    """The unit loop of a ``moshi_gpu`` node (:class:`serving.duplex.node.NativeNode`)."""

    resample_per_chunk = True  # a unit is whole once its packet arrived

    def __init__(self, hub, port: NativePort, options: MoshiNativeNode) -> None:
        # options: the model's, loaded once per server into hub.native
        self._engine = hub.native.engine
        self._max_context_ms = hub.system.duplex.max_context_ms
        self._outbox = port.outbox
        self._config = port.config
        self._on_exhausted = port.on_exhausted
        self._cutter: UnitCutter | None = None
        self._slot: int | None = None
        self._reply: SpokenReply | None = None
        self._cancel = False
        self.consumed_samples = 0
        self.padding_samples = 0

    @property
    def replying(self) -> bool:
        return self._reply is not None and not self._reply.done

    def cancel(self) -> None:
        self._cancel = self.replying

    async def close_open(self, reason: str) -> None:
        if self._reply is not None:
            await self._reply.end("cancelled", reason)
        self._release()

    def _release(self) -> None:
        if self._slot is not None:
            self._engine.close(self._slot)
            self._slot = None

    async def on_audio(self, samples: np.ndarray) -> None:
        for unit in self._units().push(samples):
            await self._process(unit)

    async def close(self) -> None:
        self._release()

    def _units(self) -> UnitCutter:
        if self._cutter is None:
            self._cutter = UnitCutter(self._config().unit_ms * SAMPLES_PER_MS)
            self._slot = self._engine.open()
        return self._cutter

    async def _process(self, unit: Unit) -> None:
        if unit.end > self._max_context_ms * SAMPLES_PER_MS:
            await self._on_exhausted()
            return
        size = self._units().unit_samples
        samples, padding = unit.padded(size)
        if padding:
            self.padding_samples = padding
        assert self._slot is not None
        frame = resample(samples, INPUT_RATE, 24000)
        text, audio = await asyncio.wrap_future(self._engine.submit(self._slot, frame))
        await self._speak(unit, text, float_to_pcm16(audio), size // SAMPLES_PER_MS * BYTES_PER_MS)
        self.consumed_samples = unit.end
        await self._outbox.send(
            UnitDone(
                unit_id=unit.unit_id,
                sglang=UnitSglang(
                    media_time=MediaTime(t_start_ms=unit.t_start_ms, duration_ms=unit.duration_ms)
                ),
            )
        )

    async def _speak(self, unit: Unit, text: str, pcm: bytes, budget: int) -> None:
        if self._cancel and self._reply is not None:
            self._cancel = False
            await self._reply.end("cancelled", "interrupted")
        if self._reply is None or self._reply.done:
            start = unit.t_start_ms
            turn = Turn(Utterance(new_id("item"), np.zeros(0, dtype=np.float32), start, start))
            self._reply = SpokenReply(self._outbox, turn, self._config().output_modalities, budget)
        self._reply.add(text, pcm)
        await self._reply.emit(budget)

    async def on_end(self, emit: Emit) -> None:
        tail = self._units().flush()
        if tail is not None:
            await self._process(tail)
        if self._reply is not None:
            self._reply.generation_done()
            await self._reply.emit(None)
        self._release()
