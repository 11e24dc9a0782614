"""The duplex-baseline policy on hand-made VAD observations (no models): when it answers, yields
and backchannels."""

from __future__ import annotations

from serving.duplex.policy import Decision, DuplexPolicy, Heard
from serving.graph.kinds import DuplexBaselineOptions

SETTINGS = DuplexBaselineOptions(
    min_utterance_ms=200, yield_after_ms=300, backchannel_after_ms=4000
)


def started(t: int) -> Heard:
    return Heard([("speech_started", t)], True, t + 30)


def speaking(until: int) -> Heard:
    return Heard([], True, until)


def stopped(t: int) -> Heard:
    return Heard([("speech_stopped", t)], False, t)


def quiet(last: int) -> Heard:
    return Heard([], False, last)


def test_a_turn_ends_after_the_silence_and_is_answered():
    policy = DuplexPolicy(SETTINGS, backchannel=False)
    assert policy.decide(started(300), replying=False) == []
    assert policy.decide(speaking(1900), replying=False) == []
    assert policy.decide(stopped(1900), replying=False) == [Decision("respond", 300, 1900)]
    assert policy.turn_start_ms is None
    assert policy.decide(quiet(1900), replying=True) == []


def test_a_click_is_not_a_turn():
    policy = DuplexPolicy(SETTINGS, backchannel=False)
    policy.decide(started(1000), replying=False)
    assert policy.decide(stopped(1100), replying=False) == []


def test_speech_over_a_reply_makes_it_yield_only_once_it_lasts():
    policy = DuplexPolicy(SETTINGS, backchannel=False)
    policy.decide(started(5000), replying=True)
    assert policy.decide(speaking(5250), replying=True) == []  # 250 ms: not yet
    assert policy.decide(speaking(5400), replying=True) == [Decision("yield")]
    assert policy.decide(stopped(6500), replying=False) == [Decision("respond", 5000, 6500)]


def test_a_short_yes_during_a_reply_is_heard_and_not_answered():
    policy = DuplexPolicy(SETTINGS, backchannel=False)
    policy.decide(started(5000), replying=True)
    assert policy.decide(stopped(5250), replying=True) == []
    assert policy.turn_start_ms is None


def test_a_dropped_reply_reopens_the_turn_so_the_next_answer_hears_both_parts():
    policy = DuplexPolicy(SETTINGS, backchannel=False)
    policy.decide(started(300), replying=False)
    assert policy.decide(stopped(1900), replying=False) == [Decision("respond", 300, 1900)]
    policy.decide(started(2600), replying=True)
    assert policy.decide(speaking(3000), replying=True) == [Decision("yield")]
    policy.reopen(300)  # the reply had not spoken yet
    assert policy.decide(stopped(4000), replying=False) == [Decision("respond", 300, 4000)]


def test_backchannel_every_four_seconds_of_one_speech_run_and_never_while_replying():
    policy = DuplexPolicy(SETTINGS, backchannel=True)
    policy.decide(started(0), replying=False)
    assert policy.decide(speaking(3000), replying=False) == []
    assert policy.decide(speaking(4100), replying=False) == [Decision("backchannel")]
    assert policy.decide(speaking(6000), replying=False) == []
    assert policy.decide(speaking(8200), replying=False) == [Decision("backchannel")]
    off = DuplexPolicy(SETTINGS, backchannel=False)
    off.decide(started(0), replying=False)
    assert off.decide(speaking(4100), replying=False) == []


def test_a_turn_open_at_the_input_end_is_answered():
    policy = DuplexPolicy(SETTINGS, backchannel=False)
    policy.decide(started(300), replying=False)
    final = Heard([("speech_stopped", 1500)], False, 1500)  # the VAD's flush at the end
    assert policy.decide(final, replying=False, final=True) == [Decision("respond", 300, 1500)]


def test_every_bundled_system_is_recorded_with_the_dialect_it_speaks():
    import pytest

    from fdb.dialects import (
        BUNDLED_SYSTEM_DIALECTS,
        NATIVE,
        NATIVE_80,
        TURN_BASED,
        check_bundled_dialect,
    )
    from fdb.errors import FdbError
    from serving.systems import SYSTEMS

    for name, system in SYSTEMS.items():
        native = (
            NATIVE_80.name
            if system.duplex is not None and system.duplex.unit_ms == 80
            else NATIVE.name
        )
        assert BUNDLED_SYSTEM_DIALECTS.get(name, TURN_BASED.name) == (
            native if system.duplex is not None else TURN_BASED.name
        ), name
    check_bundled_dialect("duplex-baseline", NATIVE.name)
    with pytest.raises(FdbError, match="speaks turn-based"):
        check_bundled_dialect("embedded-cascade", NATIVE.name)


SEMANTIC = DuplexBaselineOptions(
    min_utterance_ms=200, turn_detection="semantic", eagerness="medium"
)


def paused(t: int, score: float) -> Heard:
    """The VAD proposes a pause ending at ``t`` (200 ms of silence), Smart Turn scored it."""
    return Heard([("speech_stopped", t)], False, t, now_ms=t + 200, scores={t: score})


def test_semantic_a_confident_end_is_answered_sooner_than_the_fixed_silence():
    policy = DuplexPolicy(SEMANTIC, backchannel=False)
    policy.decide(started(300), replying=False)
    assert (
        policy.decide(paused(1900, 0.93), replying=False) == []
    )  # held: 200 ms of the 400 it needs
    assert policy.held_pause is not None and policy.held_pause.silence_ms == 400
    assert policy.decide(Heard([], False, 1900, now_ms=2300), replying=False) == [
        Decision("respond", 300, 1900)
    ]


def test_semantic_an_unfinished_sentence_waits_and_speech_inside_the_pause_continues_the_turn():
    policy = DuplexPolicy(SEMANTIC, backchannel=False)
    policy.decide(started(300), replying=False)
    assert policy.decide(paused(1900, 0.1), replying=False) == []
    assert (
        policy.decide(Heard([], False, 1900, now_ms=2600), replying=False) == []
    )  # 700 ms: still held
    resumed = Heard([("speech_started", 2700)], True, 2730, now_ms=2800)
    assert policy.decide(resumed, replying=False) == [] and policy.held_pause is None
    assert policy.decide(paused(3500, 0.95), replying=False) == []
    assert policy.decide(Heard([], False, 3500, now_ms=3900), replying=False) == [
        Decision("respond", 300, 3500)
    ]


def test_semantic_the_longest_pause_ends_the_turn_whatever_the_score_and_so_does_the_input_end():
    policy = DuplexPolicy(SEMANTIC, backchannel=False)
    policy.decide(started(0), replying=False)
    policy.decide(paused(1000, 0.05), replying=False)
    assert policy.decide(Heard([], False, 1000, now_ms=4999), replying=False) == []
    assert policy.decide(Heard([], False, 1000, now_ms=5000), replying=False) == [
        Decision("respond", 0, 1000)
    ]
    policy.decide(started(6000), replying=False)
    policy.decide(paused(7000, 0.05), replying=False)
    assert policy.decide(Heard([], False, 7000, now_ms=7200), replying=False, final=True) == [
        Decision("respond", 6000, 7000)
    ]
