"""The semantic_vad eagerness mapping (serving.conversation.end_of_turn), without models."""

from __future__ import annotations

from serving.conversation.end_of_turn import SILENCE_MS, HeldPause, required_silence_ms


def test_eagerness_sets_the_silence_each_score_needs():
    assert [required_silence_ms(p, "medium") for p in (0.95, 0.6, 0.1)] == [400, 800, 4000]
    assert required_silence_ms(0.8, "high") == 200 and required_silence_ms(0.5, "low") == 1500
    assert SILENCE_MS["auto"] == SILENCE_MS["medium"]
    for eager, calm in (("high", "medium"), ("medium", "low")):
        assert all(a < b for a, b in zip(SILENCE_MS[eager], SILENCE_MS[calm], strict=True))
    assert all(confident < likely < longest for confident, likely, longest in SILENCE_MS.values())


def test_a_held_pause_ends_the_turn_once_its_silence_has_passed():
    pause = HeldPause(end_ms=1000, probability=0.1, silence_ms=4000)
    assert not pause.due(4999) and pause.due(5000)  # the longest pause: the turn ends anyway
