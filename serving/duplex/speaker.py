"""One reply of a native session, emitted unit by unit.

The generation side (:mod:`serving.duplex.engine`) adds the reply's text chunks with their
24 kHz PCM16 audio as they are synthesized; the unit loop calls :meth:`SpokenReply.emit` once
per input unit with that unit's budget of audio. ``response.created`` goes out with the first
audio, each chunk's ``response.output_audio_transcript.delta`` just before that chunk's first
audio, and ``response.done`` completed/``stop`` once all audio went out (or when the model
yields). The events themselves are built by :class:`serving.realtime.reply.Reply` and the
deltas by :class:`serving.realtime.delivery.AudioDelivery`, as in the turn-based session.
"""

from __future__ import annotations

import asyncio

from serving.realtime.delivery import AudioDelivery
from serving.realtime.outbox import Outbox
from serving.realtime.reply import Reply
from serving.realtime.turn import Turn


class SpokenReply:
    def __init__(
        self,
        outbox: Outbox,
        turn: Turn,
        modalities: tuple[str, ...],
        unit_bytes: int,
        backchannel: bool = False,
    ) -> None:
        self.turn = turn
        self.backchannel = backchannel
        self.reply = Reply(outbox, modalities)
        self._delivery = AudioDelivery(
            outbox,
            turn,
            self.reply.response_id,
            self.reply.item_id,
            lead_ms=max(1, unit_bytes // 48),
            paced=lambda: False,
        )
        self._pcm = bytearray()
        self._chunks: list[tuple[str, int, int]] = []  # (text, first byte, end byte)
        self._announced = 0
        self.emitted = 0  # bytes sent
        self.complete = False  # generation finished: no more chunks will come
        self.created = False
        self.finished = asyncio.Event()  # response.done sent, or dropped before it spoke

    # --- generation side ---------------------------------------------------------------------

    def add(self, text: str, pcm: bytes) -> None:
        start = len(self._pcm)
        self._pcm += pcm
        self._chunks.append((text, start, len(self._pcm)))

    def generation_done(self) -> None:
        self.complete = True

    # --- unit side ---------------------------------------------------------------------------

    @property
    def pending_bytes(self) -> int:
        return len(self._pcm) - self.emitted

    @property
    def done(self) -> bool:
        return self.finished.is_set()

    def said(self) -> str:
        """The reply text whose audio went out in full."""
        return " ".join(text for text, _start, end in self._chunks if end <= self.emitted)

    async def emit(self, budget: int | None) -> None:
        """Send up to ``budget`` bytes (None: all there is), then close the response when the
        reply is complete and all of it went out."""
        if self.done:
            return
        left = self.pending_bytes if budget is None else min(budget, self.pending_bytes)
        if left > 0 and not self.created:
            await self.reply.created()
            self.turn.response_id = self.reply.response_id
            self.created = True
        while left > 0:
            while (
                self._announced < len(self._chunks)
                and self._chunks[self._announced][1] <= self.emitted
            ):
                await self.reply.text_delta(self._chunks[self._announced][0])
                self._announced += 1
            boundary = next(end for _t, _s, end in self._chunks if end > self.emitted)
            take = min(left, boundary - self.emitted)
            if not await self._delivery.send(bytes(self._pcm[self.emitted : self.emitted + take])):
                return
            self.emitted += take
            left -= take
        if self.complete and self.pending_bytes == 0:
            await self.end("completed", "stop")

    async def end(self, status: str, reason: str) -> None:
        """Close the response now (the rest of its audio is dropped); a reply that never spoke
        sends nothing."""
        if self.done:
            return
        self.turn.interrupt(reason)  # stops the LLM at its next token
        if self.created:
            self.reply.audio_started = self._delivery.sent_bytes > 0
            await self.reply.finish(status, reason)
        self.finished.set()
