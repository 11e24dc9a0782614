"""Answers the user turns the policy hands over, one at a time: ASR → LLM → TTS.

Per turn the utterance is transcribed; an empty transcript gets no reply. Otherwise the LLM's
token stream is cut into speakable chunks (:class:`serving.duplex.reply_stream.ReplyStream`),
each chunk is synthesized by Piper (:func:`serving.duplex.responder.synthesize_pcm24`) as soon
as it is complete and added to a :class:`~serving.duplex.speaker.SpokenReply`, which the unit loop
emits. The worker waits until that reply has finished (spoken in full, or yielded) before the
next turn, then keeps what was said in the history. Words of a turn whose reply was dropped
before it spoke are not lost: the policy reopens that turn, so the next utterance holds them.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable

from serving.duplex.negotiation import NativeConfig
from serving.duplex.reply_stream import ReplyStream
from serving.duplex.responder import synthesize_pcm24
from serving.duplex.speaker import SpokenReply
from serving.hub import ModelHub
from serving.realtime.outbox import Outbox
from serving.realtime.turn import Turn, TurnInterrupted, Utterance

log = logging.getLogger("fdb.serving")


class ReplyWorker:
    def __init__(
        self,
        hub: ModelHub,
        outbox: Outbox,
        config: Callable[[], NativeConfig],
        on_reply: Callable[[SpokenReply], None],
    ) -> None:
        self._hub = hub
        self._outbox = outbox
        self._config = config
        self._on_reply = on_reply  # hands a new reply to the unit loop
        self._queue: deque[Turn] = deque()
        self._wakeup = asyncio.Event()
        self.current: Turn | None = None
        self.history: list[dict[str, str]] = []

    @property
    def busy(self) -> bool:
        """A turn is being answered or waits to be."""
        return self.current is not None or bool(self._queue)

    def submit(self, utterance: Utterance) -> None:
        self._queue.append(Turn(utterance))
        self._wakeup.set()

    def drop_pending(self) -> list[Turn]:
        """Yield: every turn not yet speaking is dropped (returned, so its start can reopen)."""
        dropped = list(self._queue)
        self._queue.clear()
        if self.current is not None and self.current.response_id is None:
            dropped.append(self.current)
        for turn in dropped:
            turn.interrupt("yielded")
        return dropped

    async def run(self) -> None:
        while True:
            while not self._queue:
                self._wakeup.clear()
                await self._wakeup.wait()
            self.current = self._queue.popleft()
            try:
                await self._answer(self.current)
            except TurnInterrupted:
                pass
            finally:
                self.current = None

    async def _answer(self, turn: Turn) -> None:
        transcript = await turn.race(
            self._hub.run(self._hub.asr.transcribe, turn.utterance.samples)
        )
        text = transcript.text.strip()
        log.debug(
            "duplex turn [%d, %d) ms heard %r", turn.utterance.start_ms, turn.utterance.end_ms, text
        )
        if not text:
            return
        config = self._config()
        unit_bytes = config.unit_ms * 48
        spoken = SpokenReply(self._outbox, turn, config.output_modalities, unit_bytes)
        stream = ReplyStream(
            self._hub.llm,
            turn,
            self._messages(config, text),
            config.sampling.max_new_tokens_per_unit,
            config.sampling.temperature,
            hold_first=True,
            first_chunk=self._hub.system.first_chunk.rule,
        )
        self._on_reply(spoken)
        try:
            stream.start()
            while (chunk := await turn.race(stream.get())) is not None:
                pcm = await turn.race(self._hub.run(synthesize_pcm24, self._hub.tts, chunk))
                stream.release()
                if pcm:
                    spoken.add(chunk, pcm)
            spoken.generation_done()
            await spoken.finished.wait()
        except TurnInterrupted:
            await spoken.finished.wait()
        finally:
            stream.stop()
        said = spoken.said()
        if said:
            cut = spoken.pending_bytes > 0 or not spoken.complete
            self.history += [
                {"role": "user", "content": text},
                {"role": "assistant", "content": said + ("…" if cut else "")},
            ]

    def _messages(self, config: NativeConfig, user_text: str) -> list[dict[str, str]]:
        keep = self._hub.system.max_history_messages
        history = self.history[-keep:] if keep else []
        return [
            {"role": "system", "content": config.instructions},
            *history,
            {"role": "user", "content": user_text},
        ]
