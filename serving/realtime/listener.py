"""The listener: a session's input in order — units, turn detection, utterances.

Items arrive from the reader in the order the client sent them: audio, commits, turn-detection
changes and the end of input. Audio is cut into 200 ms units; each complete unit is scored by
the session's streaming Silero VAD and then reported with ``sglang.unit.done``.

With ``server_vad`` the VAD's boundaries become ``input_audio_buffer.speech_started``
(``audio_start_ms`` includes the prefix padding, never before the previous utterance's end) and
``input_audio_buffer.speech_stopped`` (the end of the last speech frame, reported once
``silence_duration_ms`` of silence followed). Speech that starts interrupts every reply not yet
played out. ``input_audio_buffer.commit`` ends an open utterance after the audio sent before it.
With ``semantic_vad`` the VAD's stop is only a candidate pause: the end-of-turn model scores the
utterance and the turn ends once the silence that score requires has passed (see
:mod:`serving.realtime.end_of_turn`); speech inside a held pause continues the utterance.
With turn detection ``null`` there is no VAD and an utterance is all the audio between commits.
A turn-detection change applies from the next unit.

At ``sglang.input_audio.end`` the partial last unit is flushed (its real duration), an open
utterance is stopped and answered, and the drain callback runs once every reply is delivered.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import numpy as np

from serving.models import ModelHub
from serving.realtime.audio_input import (
    SAMPLES_PER_MS,
    InputTimeline,
    Unit,
    UnitCutter,
)
from serving.realtime.end_of_turn import CANDIDATE_MS, HeldPause, required_silence_ms
from serving.realtime.events import (
    Committed,
    MediaTime,
    SpeechStarted,
    SpeechStopped,
    UnitDone,
    UnitSglang,
    error_event,
    new_id,
)
from serving.realtime.negotiation import SemanticVad, ServerVad
from serving.realtime.outbox import Outbox
from serving.realtime.responder import Responder
from serving.realtime.turn import Utterance

ASR_TAIL_MS = 200  # silence kept after the last speech frame for the recognizer
IDLE_KEEP_MS = 1000  # audio kept before the present while no utterance is open


@dataclass(frozen=True)
class AudioChunk:
    samples: np.ndarray


@dataclass(frozen=True)
class CommitMark:
    event_id: str | None


@dataclass(frozen=True)
class DetectionChange:
    turn_detection: ServerVad | SemanticVad | None


@dataclass(frozen=True)
class EndMark:
    on_drained: Callable[[], Awaitable[None]]


def _whole_ms(sample: int) -> int:
    return sample // SAMPLES_PER_MS


class Listener:
    def __init__(self, hub: ModelHub, outbox: Outbox, responder: Responder) -> None:
        self._hub = hub
        self._outbox = outbox
        self._responder = responder
        self._queue: asyncio.Queue[AudioChunk | CommitMark | DetectionChange | EndMark] = asyncio.Queue()
        self._cutter = UnitCutter()
        self._timeline = InputTimeline()
        self._settings: ServerVad | SemanticVad | None = None
        self._held: HeldPause | None = None  # semantic_vad: a pause waiting to end the turn
        self._vad = None
        self._vad_origin_ms = 0
        self._open_item: str | None = None  # the utterance in progress (VAD mode)
        self._open_start = 0  # its first sample
        self._last_end = 0  # end sample of the previous utterance
        self._last_item: str | None = None
        self.consumed_samples = 0  # input that went through units

    def put(self, item: AudioChunk | CommitMark | DetectionChange | EndMark) -> None:
        self._queue.put_nowait(item)

    async def run(self) -> None:
        while True:
            item = await self._queue.get()
            if isinstance(item, AudioChunk):
                self._timeline.append(item.samples)
                for unit in self._cutter.push(item.samples):
                    await self._process_unit(unit)
            elif isinstance(item, CommitMark):
                await self._commit(item)
            elif isinstance(item, DetectionChange):
                await self._configure(item.turn_detection)
            else:
                await self._end(item)

    # --- units and VAD -----------------------------------------------------------------------

    async def _process_unit(self, unit: Unit) -> None:
        if self._vad is not None:
            for kind, t_ms in await self._hub.run_vad(self._vad.feed, unit.samples):
                await self._boundary(kind, self._vad_origin_ms + t_ms)
        if self._held is not None and self._held.due(_whole_ms(unit.end)):
            await self._stop(self._held.end_ms * SAMPLES_PER_MS, tail_ms=ASR_TAIL_MS)
        self.consumed_samples = unit.end
        await self._outbox.send(UnitDone(unit_id=unit.unit_id, sglang=UnitSglang(
            media_time=MediaTime(t_start_ms=unit.t_start_ms, duration_ms=unit.duration_ms))))
        self._trim()

    def _vad_params(self) -> tuple[float, int, int]:
        """(threshold, silence_duration_ms, prefix_padding_ms) of the session's VAD."""
        settings = self._settings
        if isinstance(settings, ServerVad):
            return settings.threshold, settings.silence_duration_ms, settings.prefix_padding_ms
        vad = self._hub.system.vad
        return vad.threshold, CANDIDATE_MS, vad.prefix_padding_ms

    def _trim(self) -> None:
        if self._open_item is not None:
            keep = self._open_start
        elif self._settings is None:
            keep = self._last_end  # without VAD the next commit takes everything since then
        else:
            pad = self._vad_params()[2] + IDLE_KEEP_MS
            keep = self._timeline.end - pad * SAMPLES_PER_MS
        self._timeline.trim(keep)

    async def _boundary(self, kind: str, t_ms: int) -> None:
        if kind == "speech_started" and self._open_item is None:
            await self._start(t_ms)
        elif kind == "speech_started":
            self._held = None  # speech resumed inside a held pause: the utterance goes on
        elif kind == "speech_stopped" and self._open_item is not None:
            if isinstance(self._settings, SemanticVad):
                await self._hold(t_ms, self._settings.eagerness)
            else:
                await self._stop(t_ms * SAMPLES_PER_MS, tail_ms=ASR_TAIL_MS)

    async def _hold(self, end_ms: int, eagerness: str) -> None:
        """semantic_vad: score the utterance up to this pause and hold the turn open for the
        silence the score requires."""
        audio = self._timeline.slice(self._open_start, min(self._timeline.end,
                                                           (end_ms + CANDIDATE_MS) * SAMPLES_PER_MS))
        probability = await self._hub.run_vad(self._hub.turn.complete_probability, audio)
        self._held = HeldPause(end_ms, probability, required_silence_ms(probability, eagerness))

    async def _start(self, t_ms: int) -> None:
        start_ms = max(t_ms, _whole_ms(self._last_end))
        self._open_item = new_id("item")
        self._open_start = start_ms * SAMPLES_PER_MS
        self._responder.interrupt_all()
        await self._outbox.send(SpeechStarted(audio_start_ms=start_ms, item_id=self._open_item))

    async def _stop(self, end: int, tail_ms: int = 0) -> None:
        """End the open utterance at sample ``end`` and hand it to the responder."""
        item_id, start = self._open_item, self._open_start
        assert item_id is not None
        self._open_item, self._held = None, None
        end = max(end, start)
        await self._outbox.send(SpeechStopped(audio_end_ms=_whole_ms(end), item_id=item_id))
        await self._hand_over(item_id, start, end, tail_ms)

    async def _hand_over(self, item_id: str, start: int, end: int, tail_ms: int = 0) -> None:
        """``input_audio_buffer.committed``, then the utterance [start, end) goes to the
        responder (with ``tail_ms`` of the following audio for the recognizer)."""
        stop = min(end + tail_ms * SAMPLES_PER_MS, self._timeline.end)
        utterance = Utterance(item_id, self._timeline.slice(start, stop), _whole_ms(start), _whole_ms(end))
        previous, self._last_item, self._last_end = self._last_item, item_id, end
        await self._outbox.send(Committed(item_id=item_id, previous_item_id=previous))
        self._responder.submit(utterance)

    # --- commands ----------------------------------------------------------------------------

    async def _commit(self, mark: CommitMark) -> None:
        """``input_audio_buffer.commit``: the utterance ends after the audio sent before it."""
        end = self._timeline.end
        if self._open_item is not None:
            await self._stop(end)
            if self._vad is not None:
                self._vad.reset()
            return
        if self._settings is None and end > self._last_end:
            await self._hand_over(new_id("item"), self._last_end, end)
            return
        reason = "no open utterance" if self._settings is not None else "no audio since the last commit"
        await self._outbox.send(error_event("input_audio_buffer_commit_empty", f"nothing to commit: {reason}",
                                            event_id=mark.event_id))

    async def _configure(self, settings: ServerVad | SemanticVad | None) -> None:
        """A new turn detection, effective from the next unit."""
        self._settings = settings
        if settings is None:
            if self._open_item is not None:
                await self._stop(self._timeline.end)
            self._vad = None
            return
        if self._held is not None and not isinstance(settings, SemanticVad):
            await self._stop(self._held.end_ms * SAMPLES_PER_MS, tail_ms=ASR_TAIL_MS)
        if self._vad is None:
            self._vad = await self._hub.run_vad(self._hub.new_vad, *self._vad_params())
            self._vad_origin_ms = _whole_ms(self.consumed_samples)
        else:
            self._vad.configure(*self._vad_params())

    async def _end(self, mark: EndMark) -> None:
        """End of input: flush the tail unit, close the open utterance, then drain."""
        tail = self._cutter.flush()
        if tail is not None:
            await self._process_unit(tail)
        if self._vad is not None:
            for kind, t_ms in self._vad.flush():
                await self._boundary(kind, self._vad_origin_ms + t_ms)
        if self._held is not None:  # the input ended inside a held pause: the turn ends there
            await self._stop(self._held.end_ms * SAMPLES_PER_MS, tail_ms=ASR_TAIL_MS)
        if self._open_item is not None:  # VAD never reported the stop of a started utterance
            await self._stop(self._timeline.end)
        if self._settings is None and self._timeline.end > self._last_end:
            await self._hand_over(new_id("item"), self._last_end, self._timeline.end)
        self._responder.after_pending(mark.on_drained)
