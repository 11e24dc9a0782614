"""The responder: answers a session's utterances one at a time (ASR → LLM → TTS).

Per turn: the utterance is transcribed (``conversation.item.input_audio_transcription
.completed``), a response is created, and then

- no words: ``response.done`` completed with reason ``empty_turn``;
- otherwise the LLM replies (system prompt = the session's instructions, with the history).
  Its tokens are streamed and cut into speakable chunks (sentences; the first chunk is cut
  short at a clause boundary or a word cap, see :mod:`serving.realtime.chunker`); each chunk is
  synthesized as soon as it is complete, resampled to 24 kHz PCM16 and delivered with pacing,
  while the LLM goes on and later chunks are synthesized; ``response.done`` completed with
  reason ``stop``.

Interruption: speech that starts while a turn is queued or being answered (or while its audio is
still playing out) cancels it, as does ``response.cancel``: its remaining audio is dropped and
``response.done`` arrives cancelled with reason ``interrupted``; the LLM stops at its next
token. Each chunk whose audio was sent in full is a boundary (``sglang.response.progress``); the
history keeps an interrupted reply up to the last boundary the client had played, and
``sglang.response.heard`` says what it kept (see :mod:`serving.realtime.dialog`).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable

import numpy as np

from fdb.audio import float_to_pcm16, resample
from serving.models import ModelHub
from serving.realtime.delivery import OUTPUT_RATE, AudioDelivery
from serving.realtime.dialog import Boundary, Dialog, ReplyRecord
from serving.realtime.events import (
    ResponseHeard,
    ResponseProgress,
    TranscriptionCompleted,
    TranscriptionUsage,
)
from serving.realtime.negotiation import SessionConfig
from serving.realtime.outbox import Outbox
from serving.realtime.reply import Reply
from serving.realtime.reply_stream import ReplyStream
from serving.realtime.turn import Turn, TurnInterrupted, Utterance


def synthesize_pcm24(tts, text: str) -> bytes:
    """Blocking: ``text`` as 24 kHz mono PCM16 (Piper renders 22.05 kHz float)."""
    samples = tts.synthesize(text)
    return float_to_pcm16(resample(np.asarray(samples, dtype=np.float32), tts.rate, OUTPUT_RATE))


class Responder:
    def __init__(self, hub: ModelHub, outbox: Outbox, config: Callable[[], SessionConfig],
                 input_ended: Callable[[], bool]) -> None:
        self._hub = hub
        self._system = hub.system
        self._outbox = outbox
        self._config = config
        self._input_ended = input_ended
        self._pending: deque[Turn | Callable[[], Awaitable[None]]] = deque()
        self._wakeup = asyncio.Event()
        self.current: Turn | None = None
        self.dialog = Dialog(self._system.max_history_messages)

    @property
    def history(self) -> list[dict[str, str]]:
        return self.dialog.history

    @property
    def busy(self) -> bool:
        """A turn is being answered or waits to be."""
        return self.current is not None or bool(self._pending)

    # --- called by the session and the listener ------------------------------------------

    def submit(self, utterance: Utterance) -> None:
        self._pending.append(Turn(utterance))
        self._wakeup.set()

    def after_pending(self, callback: Callable[[], Awaitable[None]]) -> None:
        """Run ``callback`` once every turn submitted so far is answered and delivered."""
        self._pending.append(callback)
        self._wakeup.set()

    def _turns(self) -> list[Turn]:
        queued = [item for item in self._pending if isinstance(item, Turn)]
        return ([self.current] if self.current else []) + queued

    def interrupt_all(self) -> None:
        """The user started speaking: cancel every turn not yet answered in full."""
        for turn in self._turns():
            turn.interrupt("interrupted")

    def cancel_response(self) -> bool:
        """``response.cancel``: cancel the reply in progress; no reply, no effect."""
        turn = self.current
        if turn is None or turn.response_id is None or turn.done or turn.interrupted:
            return False
        turn.interrupt("interrupted")
        return True

    def wake_all(self) -> None:
        """The input ended: stop pacing the reply being delivered."""
        for turn in self._turns():
            turn.wake()

    # --- the loop ----------------------------------------------------------------------------

    async def run(self) -> None:
        while True:
            while not self._pending:
                self._wakeup.clear()
                await self._wakeup.wait()
            item = self._pending.popleft()
            if isinstance(item, Turn):
                self.current = item
                try:
                    await self._answer(item)
                finally:
                    item.done = True
                    self.current = None
            else:
                await item()

    async def _answer(self, turn: Turn) -> None:
        if self._input_ended():
            turn.wake()
        utterance = turn.utterance
        transcript = await self._hub.run(self._hub.asr.transcribe, utterance.samples)
        text = transcript.text.strip()
        await self._outbox.send(TranscriptionCompleted(
            item_id=utterance.item_id, transcript=text,
            usage=TranscriptionUsage(seconds=round(len(utterance.samples) / 16000, 3))))
        config = self._config()
        reply = Reply(self._outbox, config.output_modalities)
        await reply.created()
        turn.response_id = reply.response_id
        if turn.interrupted:
            self.dialog.carry(text)
            await reply.finish("cancelled", turn.cancel_reason or "interrupted")
        elif not text:
            await reply.finish("completed", "empty_turn")
        else:
            await self._reply(turn, reply, config, self.dialog.user_turn(text))

    async def _reply(self, turn: Turn, reply: Reply, config: SessionConfig, user_text: str) -> None:
        sampling = config.sampling
        record = self.dialog.open(reply.response_id, reply.item_id, user_text, reply.audio)
        stream = ReplyStream(self._hub.llm, turn, self.dialog.messages(config.instructions, user_text),
                             sampling.max_new_tokens_per_unit, sampling.temperature,
                             hold_first=reply.audio)
        try:
            stream.start()
            await self._speak(turn, reply, stream, record)
        except TurnInterrupted:
            pass
        finally:
            stream.stop()
        record.text = reply.text_sent
        kept = self.dialog.close(record, finished=not turn.interrupted)
        if reply.audio and (turn.interrupted or record.limit_ms is not None):
            await self.send_heard(record, kept)
        if turn.interrupted:
            await reply.finish("cancelled", turn.cancel_reason or "interrupted")
        else:
            await reply.finish("completed", "stop")

    async def send_heard(self, record: ReplyRecord, kept: Boundary) -> None:
        await self._outbox.send(ResponseHeard(
            response_id=record.response_id, item_id=record.item_id, text_end=kept.text_end,
            audio_ms=kept.audio_ms, text=record.text[:kept.text_end]))

    async def _speak(self, turn: Turn, reply: Reply, stream: ReplyStream, record: ReplyRecord) -> None:
        if not reply.audio:
            while (chunk := await turn.race(stream.get())) is not None:
                await reply.text_delta(chunk)
                record.boundaries.append(Boundary(len(reply.text_sent), 0.0))
            return
        queue: asyncio.Queue[tuple[str, bytes] | BaseException | None] = asyncio.Queue()
        producer = asyncio.create_task(self._synthesize(stream, queue))
        delivery = AudioDelivery(self._outbox, turn, reply.response_id, reply.item_id,
                                 self._system.max_output_lead_ms, lambda: not self._input_ended())
        try:
            await self._deliver(turn, reply, delivery, queue, record)
        finally:
            producer.cancel()
            reply.audio_started = delivery.sent_bytes > 0
            record.sent_ms = delivery.sent_ms
            if turn.interrupted:
                record.played_ms = delivery.played_ms(turn.interrupted_at)

    async def _progress(self, reply: Reply, record: ReplyRecord, sent_ms: float) -> None:
        """A chunk's audio left in full: a boundary, and ``sglang.response.progress``."""
        boundary = Boundary(len(reply.text_sent), round(sent_ms, 3))
        record.boundaries.append(boundary)
        record.sent_ms, record.text = sent_ms, reply.text_sent
        await self._outbox.send(ResponseProgress(
            response_id=reply.response_id, item_id=reply.item_id, text_end=boundary.text_end,
            audio_ms=boundary.audio_ms))

    async def _deliver(self, turn: Turn, reply: Reply, delivery: AudioDelivery,
                       queue: asyncio.Queue[tuple[str, bytes] | BaseException | None],
                       record: ReplyRecord) -> None:
        budget = self._system.max_output_bytes
        while True:
            item = await turn.race(queue.get())
            if item is None:
                break
            if isinstance(item, BaseException):
                raise item
            chunk, pcm = item
            pcm = pcm[:max(0, budget - delivery.sent_bytes) // 2 * 2]
            if not pcm:
                break  # max_output_bytes reached: the reply ends here
            await reply.text_delta(chunk)
            if not await delivery.send(pcm):
                return
            await self._progress(reply, record, delivery.sent_ms)
        await delivery.wait_playout()

    async def _synthesize(self, stream: ReplyStream,
                          queue: asyncio.Queue[tuple[str, bytes] | BaseException | None]) -> None:
        """Synthesize each chunk as soon as the LLM completes it (the consumer cancels this)."""
        try:
            while (chunk := await stream.get()) is not None:
                pcm = await self._hub.run(synthesize_pcm24, self._hub.tts, chunk)
                stream.release()
                if pcm:
                    await queue.put((chunk, pcm))
            await queue.put(None)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # handed to the consumer, which fails the session
            await queue.put(exc)
