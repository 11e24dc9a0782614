"""Delivery pacing of one reply's audio (the Full-Duplex Guide, "Delivery pacing").

Reply audio is produced faster than real time, but the client should never hold more than
``max_output_lead_ms`` of it: an audio chunk leaves at most that far ahead of the wall clock
measured from the moment the reply's first audio left. While paced, audio goes out in chunks of
at most 100 ms (a streamed reply's 80 ms frames one by one, as they come). Other events
(transcripts, speech boundaries, receipts) are never held back. Once the input has ended,
everything may leave at once, joined into chunks of at most ``max_output_lead_ms``. The reply
stays open, and interruptible, until the wall clock reaches the end of its audio (the client has
played it), unless the input has ended. With ``first_delay_ms`` (the system's ``reply_delay_ms``
handicap) the reply's first audio is held back that long once it is ready; an interruption
during the wait ends it at once and nothing is sent.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Callable

from fdb.dialects.events import AudioDeltaSglang, MediaTime, OutputAudioDelta
from serving.realtime.outbox import Outbox
from serving.realtime.turn import Turn, TurnInterrupted

OUTPUT_RATE = 24000
BYTES_PER_MS = OUTPUT_RATE * 2 // 1000  # PCM16 mono
PACED_CHUNK_MS = 100


class AudioDelivery:
    """Sends the audio of one response as ``response.output_audio.delta`` events."""

    def __init__(
        self,
        outbox: Outbox,
        turn: Turn,
        response_id: str,
        item_id: str,
        lead_ms: int,
        paced: Callable[[], bool],
        clock: Callable[[], float] = time.monotonic,
        first_delay_ms: int = 0,
    ) -> None:
        self._outbox = outbox
        self._turn = turn
        self._response_id = response_id
        self._item_id = item_id
        self._lead_ms = lead_ms
        self._paced = paced
        self._clock = clock
        self._t0: float | None = None
        self._chunk_seq = 0
        self._first_delay_ms = first_delay_ms  # still to wait before the first audio
        self.sent_bytes = 0

    @property
    def paced(self) -> bool:
        """Audio leaves paced now (in ``PACED_CHUNK_MS`` pieces); False once the input ended."""
        return self._paced()

    @property
    def sent_ms(self) -> float:
        return self.sent_bytes / BYTES_PER_MS

    def played_ms(self, at: float | None) -> float:
        """The reply's audio the client had played at monotonic time ``at``: the wall clock
        since the first audio left, at most what was sent (all of it when unpaced)."""
        if self._t0 is None:
            return 0.0
        if at is None or not self._paced():
            return self.sent_ms
        return max(0.0, min(self.sent_ms, (at - self._t0) * 1000.0))

    def _delay(self, chunk_bytes: int) -> float:
        """Seconds until a chunk of ``chunk_bytes`` may leave (<= 0: now)."""
        if self._t0 is None:
            return 0.0
        end_ms = (self.sent_bytes + chunk_bytes) / BYTES_PER_MS
        return self._t0 + (end_ms - self._lead_ms) / 1000.0 - self._clock()

    async def _emit(self, chunk: bytes) -> bool:
        event = OutputAudioDelta(
            response_id=self._response_id,
            item_id=self._item_id,
            delta=base64.b64encode(chunk).decode("ascii"),
            sglang=AudioDeltaSglang(
                chunk_seq=self._chunk_seq,
                media_time=MediaTime(
                    t_start_ms=round(self.sent_ms, 3),
                    duration_ms=round(len(chunk) / BYTES_PER_MS, 3),
                ),
            ),
        )
        if not await self._outbox.send(event):
            return False
        if self._t0 is None:
            self._t0 = self._clock()
        self._chunk_seq += 1
        self.sent_bytes += len(chunk)
        return True

    async def _hold_first(self) -> bool:
        """Wait ``first_delay_ms`` before the first audio (once, on the event loop's clock, not
        cut short by the input's end); False when the turn was interrupted meanwhile."""
        delay, self._first_delay_ms = self._first_delay_ms, 0
        if delay <= 0 or self._t0 is not None:
            return not self._turn.interrupted
        try:
            await self._turn.race(asyncio.sleep(delay / 1000.0))
        except TurnInterrupted:
            return False
        return not self._turn.interrupted

    async def send(self, pcm: bytes) -> bool:
        """Deliver ``pcm`` (24 kHz PCM16); False when the turn was interrupted or the session
        closed before all of it left."""
        if pcm and not await self._hold_first():
            return False
        pos = 0
        while pos < len(pcm):
            if self._turn.interrupted:
                return False
            if self._paced():
                size = min(PACED_CHUNK_MS * BYTES_PER_MS, len(pcm) - pos)
                delay = self._delay(size)
                if delay > 0:
                    await self._turn.sleep(delay)
                    continue  # re-check: interrupted, input ended, or time is up
            else:
                size = min(self._lead_ms * BYTES_PER_MS, len(pcm) - pos)
            if not await self._emit(pcm[pos : pos + size]):
                return False
            pos += size
        return not self._turn.interrupted

    async def wait_playout(self) -> None:
        """Hold the reply open until its audio has played out on the client's clock."""
        while self._t0 is not None and self._paced() and not self._turn.interrupted:
            remaining = self._t0 + self.sent_ms / 1000.0 - self._clock()
            if remaining <= 0:
                return
            await self._turn.sleep(remaining)
