"""The published policy of the ``duplex-baseline`` system: when a native model speaks.

``duplex-baseline`` is a native full-duplex baseline built from fdb's embedded components. It
listens all the time and makes one decision per input unit (1 s by default, like MiniCPM-o,
or 200 ms), from what Silero VAD heard in the audio up to the end of that unit. The settings
named below are the options of the system's ``duplex_baseline`` node
(``serving.graph.kinds.DuplexBaselineOptions``; ``--session_nodes.duplex.end_of_turn_ms 500``
sets one of duplex-baseline's):

1. **Listening.** Every unit is scored by a streaming Silero VAD (threshold ``vad_threshold``,
   default 0.5). A *speech run* starts at the first speech frame and lasts while pauses stay
   shorter than ``end_of_turn_ms``; its *voiced span* is from its start to the end of its last
   speech frame.
2. **Taking the turn.** When a run ends (``end_of_turn_ms``, default 700 ms, of silence after
   speech; with ``turn_detection: semantic``, the silence Smart Turn's score of the turn so far
   asks for, see below) and its voiced span is at least ``min_utterance_ms`` (200 ms), the user's
   turn is over: its audio (from the start of the turn, which may span runs the model yielded to) is
   transcribed by faster-whisper, SmolLM2 writes a reply from the conversation history and
   Piper speaks it. The reply is emitted unit-aligned: at the end of each later input unit, the
   next ``unit_ms`` of reply audio goes out, before that unit's ``sglang.unit.done`` (so a
   reply starts at the first unit boundary after its first audio is ready). Its
   ``response.done`` is completed/``stop`` once all of its audio went out. A turn that ends
   while the model is speaking (shorter than the yield threshold, e.g. "yes") is heard and not
   answered.
3. **Yielding.** When a speech run's voiced span reaches ``yield_after_ms`` (300 ms) while a
   reply is being spoken or prepared, the model yields at that unit: it emits no more audio of
   that reply, stops the LLM, and ends the reply completed/``stop`` (a native model ends a turn
   by listening; the native protocol has no interruption status). A reply that had spoken
   nothing yet is dropped silently and the user's turn continues from where it started, so the
   next answer hears both parts. The history keeps only the reply text whose audio went out.
4. **Backchannel** (session option ``sglang.duplex.backchannel``, default on, since
   Full-Duplex-Bench v1.0 rewards short backchannels during long user turns): when the user has
   talked for ``backchannel_after_ms`` (4 s) of one speech run without the model speaking, it
   emits one short "Mm-hmm." (synthesized once per process and cached) as a response of its
   own, and again every further ``backchannel_after_ms`` of the same run. A backchannel does not
   take the turn and enters no history.
6. **Semantic turn detection** (setting ``turn_detection: semantic``, eagerness ``eagerness``):
   the VAD proposes a pause after 200 ms of silence; the end-of-turn model (Smart Turn v3.2)
   scores the turn's audio up to the pause and the pause is held until the silence reaches what
   that score requires (``serving.conversation.end_of_turn``: 400 / 800 / 4000 ms at medium for a
   confident / likely / unlikely end). Speech inside a held pause continues the same run. A
   confident end is answered sooner than the fixed 700 ms; an unfinished sentence waits longer.
5. **End of input.** At ``sglang.input_audio.end`` the partial last unit is padded with silence
   (tail policy ``pad``); a turn still open is taken as ended and answered; everything still to
   be said is then emitted at once, and ``sglang.input_audio.drained`` follows the last
   ``response.done``.

:class:`DuplexPolicy` holds only this decision logic (no models, no I/O), so it is tested on
hand-made VAD observations; :mod:`serving.duplex.engine` feeds it and carries out its decisions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from serving.conversation.end_of_turn import HeldPause, required_silence_ms
from serving.graph.kinds import DuplexBaselineOptions


@dataclass(frozen=True)
class Heard:
    """What the VAD reported up to the end of one unit."""

    events: list[tuple[str, int]]  # ("speech_started" | "speech_stopped", t_ms), in order
    in_speech: bool
    last_speech_end_ms: int
    now_ms: int = 0  # the end of the unit (semantic turn detection times held pauses on it)
    scores: dict[int, float] = field(
        default_factory=dict
    )  # speech_stopped t_ms -> P(turn complete)


@dataclass(frozen=True)
class Decision:
    kind: Literal["respond", "yield", "backchannel"]
    start_ms: int = 0  # respond: the user's turn [start_ms, end_ms)
    end_ms: int = 0


class DuplexPolicy:
    """Per-unit decisions from what was heard and whether the model is replying."""

    def __init__(self, settings: DuplexBaselineOptions, backchannel: bool) -> None:
        self.settings = settings
        self.backchannel = backchannel
        self.turn_start_ms: int | None = None  # the open user turn (first speech not yet answered)
        self._run_start_ms: int | None = None  # the current speech run
        self._last_backchannel_ms: int | None = None  # voiced span at the last backchannel
        self._held: HeldPause | None = None  # semantic: a proposed pause waiting for its silence

    def reopen(self, start_ms: int) -> None:
        """A reply was dropped before it spoke: the user's turn continues from ``start_ms``."""
        self.turn_start_ms = (
            start_ms if self.turn_start_ms is None else min(start_ms, self.turn_start_ms)
        )

    def decide(self, heard: Heard, replying: bool, final: bool = False) -> list[Decision]:
        """The decisions at the end of a unit; ``replying``: a reply is spoken or prepared;
        ``final``: the input ended with this unit (an open turn ends here)."""
        decisions: list[Decision] = []
        for kind, t_ms in heard.events:
            if kind == "speech_started":
                if self._held is not None:  # speech inside a held pause: the same run goes on
                    self._held = None
                    continue
                self._run_start_ms = t_ms
                self._last_backchannel_ms = None
                if self.turn_start_ms is None:
                    self.turn_start_ms = t_ms
            elif kind == "speech_stopped":
                if self.settings.turn_detection == "semantic" and not final:
                    probability = heard.scores.get(t_ms, 0.0)
                    self._held = HeldPause(
                        t_ms, probability, required_silence_ms(probability, self.settings.eagerness)
                    )
                else:
                    decisions += self._run_ended(t_ms, replying)
        if self._held is not None and (final or self._held.due(heard.now_ms)):
            held, self._held = self._held, None
            decisions += self._run_ended(held.end_ms, replying)
        if self._run_start_ms is not None and heard.in_speech:
            decisions += self._during_speech(
                heard.last_speech_end_ms - self._run_start_ms, replying
            )
        if final and self.turn_start_ms is not None and self._run_start_ms is not None:
            decisions += self._run_ended(heard.last_speech_end_ms, replying)
        return decisions

    @property
    def held_pause(self) -> HeldPause | None:
        return self._held

    def _run_ended(self, end_ms: int, replying: bool) -> list[Decision]:
        run_start, turn_start = self._run_start_ms, self.turn_start_ms
        self._run_start_ms = None
        if run_start is None or turn_start is None:
            return []
        if replying:  # heard while speaking and not worth yielding to: not answered
            self.turn_start_ms = None
            return []
        if end_ms - run_start < self.settings.min_utterance_ms and turn_start == run_start:
            self.turn_start_ms = None  # a click or a cough
            return []
        self.turn_start_ms = None
        return [Decision("respond", turn_start, end_ms)]

    def _during_speech(self, voiced_ms: int, replying: bool) -> list[Decision]:
        if replying:
            return [Decision("yield")] if voiced_ms >= self.settings.yield_after_ms else []
        if not self.backchannel:
            return []
        every = self.settings.backchannel_after_ms
        last = self._last_backchannel_ms or 0
        if voiced_ms - last >= every:
            self._last_backchannel_ms = voiced_ms
            return [Decision("backchannel")]
        return []
