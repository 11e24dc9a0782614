"""The unit loop of a ``duplex_baseline`` node: units, VAD, the policy's decisions, unit-aligned
output.

The node (:class:`serving.duplex.node.NativeNode`) takes the session's input in order from the
graph's input edge. It is cut into units of the session's ``unit_ms``
(:class:`serving.realtime.audio_input.UnitCutter`); per unit, in this order:

1. the unit is scored by the session's streaming Silero VAD (the partial last unit is padded
   with silence first: tail policy ``pad``);
2. :class:`serving.duplex.policy.DuplexPolicy` decides (respond, yield, backchannel) and the
   decisions are carried out (a turn goes to the :class:`~serving.duplex.worker.ReplyWorker`);
3. up to ``unit_ms`` of reply audio goes out (:class:`~serving.duplex.speaker.SpokenReply`);
4. ``sglang.unit.done`` reports the unit, with its real (unpadded) duration.

A unit that would take the session past ``max_context_ms`` ends it with ``context_exhausted``.
``response.cancel`` ends the reply being spoken at the next unit (cancelled / ``interrupted``).
At the input's end (``on_end``) the tail unit is processed, an open turn is answered and every
remaining reply is emitted at once; the graph has then drained. The turns are answered by the
node's :class:`~serving.duplex.worker.ReplyWorker`, a loop its session runs (``loops``).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable

import numpy as np

from fdb.dialects.events import MediaTime, UnitDone, UnitSglang, new_id
from serving.conversation.end_of_turn import CANDIDATE_MS
from serving.duplex.negotiation import duplex_settings
from serving.duplex.node import NativeNode, NativePort
from serving.duplex.policy import Decision, DuplexPolicy, Heard
from serving.duplex.responder import synthesize_pcm24
from serving.duplex.speaker import SpokenReply
from serving.duplex.worker import ReplyWorker
from serving.graph.kinds import DuplexBaselineOptions
from serving.graph.runtime import Emit
from serving.hub import ModelHub
from serving.realtime.audio_input import SAMPLES_PER_MS, InputTimeline, Unit, UnitCutter
from serving.realtime.turn import Turn, Utterance

KEEP_MS = 1000  # input kept before the present while no turn is open
ASR_TAIL_MS = 200  # silence kept after the last speech frame for the recognizer
DRAIN_POLL_S = 0.02
BYTES_PER_MS = 48  # 24 kHz PCM16 mono
TURN_WINDOW = 8 * 16000  # Smart Turn reads the last 8 s
_BACKCHANNEL_PCM: dict[str, bytes] = {}  # text -> 24 kHz PCM16, synthesized once per process


class DuplexEngine(NativeNode):
    """The unit loop of a ``duplex_baseline`` node (:class:`serving.duplex.node.NativeNode`)."""

    resample_per_chunk = False  # 24 kHz input streams through the resampler

    def __init__(self, hub: ModelHub, port: NativePort, options: DuplexBaselineOptions) -> None:
        self._hub = hub
        self._outbox = port.outbox
        self._config = port.config
        self._settings = options  # the policy's
        self._max_context_ms = duplex_settings(hub.system).max_context_ms
        self._on_exhausted = port.on_exhausted
        self._timeline = InputTimeline()
        self._cutter: UnitCutter | None = None
        self._vad = None
        self._policy: DuplexPolicy | None = None
        self._playing: deque[SpokenReply] = deque()
        self._cancel = False
        self.worker = ReplyWorker(hub, self._outbox, self._config, self._playing.append)
        self.consumed_samples = 0  # real input that went through units
        self.padding_samples = 0  # silence added to the last unit

    async def open(self) -> None:
        asyncio.get_running_loop().create_task(self._prepare_backchannel())

    def loops(self) -> list[Awaitable[None]]:
        return [self.worker.run()]

    @property
    def busy(self) -> bool:
        return self.worker.busy

    @property
    def replying(self) -> bool:
        """A reply (not a backchannel) is being spoken or prepared."""
        return self.worker.busy or any(not r.backchannel and not r.done for r in self._playing)

    def cancel(self) -> None:
        """``response.cancel``: the reply being spoken ends at the next unit; none, no effect."""
        self._cancel = any(r.created and not r.done and not r.backchannel for r in self._playing)

    async def close_open(self, reason: str) -> None:
        """The session closes: every response still open ends cancelled with ``reason``."""
        for reply in list(self._playing):
            await reply.end("cancelled", reason)

    async def on_audio(self, samples: np.ndarray) -> None:
        self._timeline.append(samples)
        for unit in self._units().push(samples):
            await self._process_unit(unit)

    # --- units ---------------------------------------------------------------------------------

    def _units(self) -> UnitCutter:
        if self._cutter is None:  # the unit is fixed once the session is open
            config = self._config()
            self._cutter = UnitCutter(config.unit_ms * SAMPLES_PER_MS)
            self._policy = DuplexPolicy(self._settings, config.backchannel)
        return self._cutter

    async def _heard(self, samples: np.ndarray, final: bool, now_ms: int = 0) -> Heard:
        s = self._settings
        semantic = s.turn_detection == "semantic"
        if self._vad is None:  # semantic: every pause of CANDIDATE_MS is proposed and scored
            silence_ms = CANDIDATE_MS if semantic else s.end_of_turn_ms
            self._vad = await self._hub.run_vad(
                lambda: self._hub.new_vad(
                    threshold=s.vad_threshold, silence_duration_ms=silence_ms, prefix_padding_ms=0
                )
            )
        events = await self._hub.run_vad(self._vad.feed, samples) if len(samples) else []
        if final:
            events += self._vad.flush()
        scores = {}
        if semantic and not final:
            for kind, t_ms in events:
                if kind == "speech_stopped":
                    scores[t_ms] = await self._score_turn(t_ms)
        return Heard(
            events, self._vad.in_speech, self._vad.last_speech_end_ms, now_ms=now_ms, scores=scores
        )

    async def _score_turn(self, end_ms: int) -> float:
        """Smart Turn's probability that the user's turn is complete at ``end_ms``: the turn's
        audio so far (at most the model's last 8 s), in the VAD pool beside the VAD calls."""
        assert self._policy is not None
        start_ms = self._policy.turn_start_ms if self._policy.turn_start_ms is not None else end_ms
        start = max(start_ms * SAMPLES_PER_MS, end_ms * SAMPLES_PER_MS - TURN_WINDOW)
        samples = self._timeline.slice(start, end_ms * SAMPLES_PER_MS)
        return await self._hub.run_vad(self._hub.turn.complete_probability, samples)

    async def _process_unit(self, unit: Unit, final: bool = False) -> None:
        if unit.end > self._max_context_ms * SAMPLES_PER_MS:
            await self._on_exhausted()
            return
        unit_samples = self._units().unit_samples
        samples, padding = unit.padded(unit_samples)
        if padding:
            self.padding_samples = padding
        await self._decide(await self._heard(samples, final, unit.end // SAMPLES_PER_MS), final)
        await self._emit(unit_samples // SAMPLES_PER_MS * BYTES_PER_MS)
        self.consumed_samples = unit.end
        await self._outbox.send(
            UnitDone(
                unit_id=unit.unit_id,
                sglang=UnitSglang(
                    media_time=MediaTime(t_start_ms=unit.t_start_ms, duration_ms=unit.duration_ms)
                ),
            )
        )
        self._trim()

    def _trim(self) -> None:
        keep = self._timeline.end - KEEP_MS * SAMPLES_PER_MS
        assert self._policy is not None
        starts = [self._policy.turn_start_ms] + [r.turn.utterance.start_ms for r in self._playing]
        starts += [self.worker.current.utterance.start_ms] if self.worker.current else []
        for start in starts:
            if start is not None:
                keep = min(keep, start * SAMPLES_PER_MS)
        self._timeline.trim(keep)

    # --- decisions -----------------------------------------------------------------------------

    async def _decide(self, heard: Heard, final: bool) -> None:
        assert self._policy is not None
        for decision in self._policy.decide(heard, self.replying, final):
            if decision.kind == "respond":
                self._respond(decision)
            elif decision.kind == "yield":
                await self._yield()
            else:
                self._backchannel()

    def _respond(self, decision: Decision) -> None:
        stop = min(decision.end_ms + ASR_TAIL_MS, self._timeline.end // SAMPLES_PER_MS)
        samples = self._timeline.slice(decision.start_ms * SAMPLES_PER_MS, stop * SAMPLES_PER_MS)
        self.worker.submit(Utterance(new_id("item"), samples, decision.start_ms, decision.end_ms))

    async def _yield(self) -> None:
        assert self._policy is not None
        for turn in self.worker.drop_pending():
            self._policy.reopen(turn.utterance.start_ms)
        for reply in list(self._playing):
            if reply.backchannel:
                continue
            if not reply.created:
                self._policy.reopen(reply.turn.utterance.start_ms)
            await reply.end("completed", "stop")
        self._drop_finished()

    def _backchannel(self) -> None:
        pcm = _BACKCHANNEL_PCM.get(self._settings.backchannel_text)
        if not pcm or self._playing:
            return
        now_ms = self._timeline.end // SAMPLES_PER_MS
        turn = Turn(Utterance(new_id("item"), np.zeros(0, dtype=np.float32), now_ms, now_ms))
        reply = SpokenReply(
            self._outbox,
            turn,
            self._config().output_modalities,
            self._config().unit_ms * BYTES_PER_MS,
            backchannel=True,
        )
        reply.add(self._settings.backchannel_text, pcm)
        reply.generation_done()
        self._playing.append(reply)

    async def _prepare_backchannel(self) -> None:
        text = self._settings.backchannel_text
        if text not in _BACKCHANNEL_PCM:
            _BACKCHANNEL_PCM[text] = await self._hub.run(synthesize_pcm24, self._hub.tts, text)

    # --- output --------------------------------------------------------------------------------

    def _drop_finished(self) -> None:
        while self._playing and self._playing[0].done:
            self._playing.popleft()

    async def _emit(self, budget: int | None) -> None:
        """Up to ``budget`` bytes of reply audio (None: everything ready), replies in order."""
        if self._cancel:
            self._cancel = False
            self.worker.drop_pending()
            for reply in list(self._playing):
                if not reply.backchannel:
                    await reply.end("cancelled", "interrupted")
        self._drop_finished()
        for reply in list(self._playing):
            before = reply.emitted
            await reply.emit(budget)
            if budget is not None:
                budget -= reply.emitted - before
            if not reply.done or (budget is not None and budget <= 0):
                break
        self._drop_finished()

    async def on_end(self, emit: Emit) -> None:
        """End of input: the padded tail unit (or a final decision), then everything still to
        be said; the graph has drained when this returns."""
        tail = self._units().flush()
        if tail is not None:
            await self._process_unit(tail, final=True)
        else:  # unit-aligned input: the last decision without a unit
            await self._decide(await self._heard(np.zeros(0, dtype=np.float32), True), True)
        while self.worker.busy or self._playing:
            await self._emit(None)
            if self.worker.busy or self._playing:
                await asyncio.sleep(DRAIN_POLL_S)
