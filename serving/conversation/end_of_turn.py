"""``semantic_vad``: the VAD proposes a pause, Smart Turn decides whether it ends the turn.

With ``{"type": "semantic_vad", "eagerness": ...}`` the session's VAD reports a *candidate*
pause after ``CANDIDATE_MS`` of silence. The turn_detection node (``serving.graph.nodes``)
then scores the utterance so far with the end-of-turn model (:mod:`fdb.models.turn`, Smart Turn
v3.2) and holds the turn open until the silence after the last speech reaches the length that
score requires (the Full-Duplex Guide,
"Turn Detection": the silence a confident, a likely and an unlikely end of turn needs):

=========  ==========================  =======================  ======================
eagerness  confident (p >= 0.8)        likely (0.5 <= p < 0.8)  unlikely (p < 0.5):
                                                                 the longest pause
=========  ==========================  =======================  ======================
high       200 ms                      400 ms                   2000 ms
medium     400 ms                      800 ms                   4000 ms
auto       as medium
low        800 ms                      1500 ms                  8000 ms
=========  ==========================  =======================  ======================

The longest pauses follow OpenAI's semantic_vad (2, 4 and 8 s): after that the turn ends
whatever the score. Speech that resumes inside a held pause continues the same utterance (no
new ``speech_started``, no interruption); a later pause is scored again on the longer audio.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Eagerness = Literal["low", "medium", "high", "auto"]
CANDIDATE_MS = 200  # the VAD's silence_duration_ms in semantic mode: a pause worth scoring
CONFIDENT, LIKELY = 0.8, 0.5
SILENCE_MS: dict[str, tuple[int, int, int]] = {  # confident, likely, unlikely (the max wait)
    "high": (200, 400, 2000),
    "medium": (400, 800, 4000),
    "auto": (400, 800, 4000),
    "low": (800, 1500, 8000),
}


def required_silence_ms(probability: float, eagerness: str) -> int:
    """The silence after the last speech that ends a turn scored ``probability`` complete."""
    confident, likely, unlikely = SILENCE_MS[eagerness]
    if probability >= CONFIDENT:
        return confident
    return likely if probability >= LIKELY else unlikely


@dataclass(frozen=True)
class HeldPause:
    """A candidate pause being held: the utterance ends at ``end_ms`` (the end of its last
    speech frame) once the input reaches ``end_ms + silence_ms``."""

    end_ms: int
    probability: float
    silence_ms: int

    def due(self, now_ms: int) -> bool:
        return now_ms - self.end_ms >= self.silence_ms
