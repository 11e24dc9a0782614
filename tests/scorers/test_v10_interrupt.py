"""Unified user interruption with injected VAD segments, plus one real Silero run.

T = 20, S = 10, R = 12 (seconds). Segments and words per sample:
 1: (2,9) (11,13), word 13.5          -> not_exercised (keeps speech_at_end and a restart)
 2: (5,14)                             -> speaking_at_end, stop 4
 3: (8,10.5) (11,11.5) (12,13), w 13   -> response, latency 1 (a segment starting at R is not
                                          speech at R), stop 0.5, speech in [S,R] 1.0, 1 restart
 4: (9,11)                             -> no_response, stop 1
 5: (10,20)                            -> speaking_at_end; covers S from S and runs to T: stop
                                          not reached
 6: (9.5,10.2), word 12.5              -> response, latency 0.5, stop 0.2
Exercised 5 of 6; response latencies [inf, 1, inf, inf, 0.5] -> median not reached;
stops [0.2, 0.5, 1, 4, inf] -> median 1, p90 not reached; speech 6.2 s over 10 s.
"""

from __future__ import annotations

import pytest

from benchmarks.support.treebuild import transcript
from fdb.errors import SampleError
from fdb.records import ExportSample
from fdb.records.v10 import NOT_REACHED
from scorers.times import to_us
from scorers.v10_inputs import InterruptSample, check_words_after, parse_segments, parse_words
from scorers.v10_unified import UNIFIED_VAD_SETTINGS, score_subset

SUBSET = "synthetic_user_interruption"
T, S, R = 20.0, 10.0, 12.0
FIXTURE = {
    "1": ([(2, 9), (11, 13)], [(13.5, 14.0)]),
    "2": ([(5, 14)], []),
    "3": ([(8, 10.5), (11, 11.5), (12, 13)], [(13.0, 13.4)]),
    "4": ([(9, 11)], []),
    "5": ([(10, 20)], [(15.0, 15.5)]),
    "6": ([(9.5, 10.2)], [(12.5, 13.0)]),
}


def score(ineligible: int = 1):
    Tu = to_us(T)
    parsed = {
        f"{SUBSET}/{k}": InterruptSample(
            f"{SUBSET}/{k}",
            Tu,
            to_us(S),
            to_us(R),
            parse_words(k, transcript(*w), Tu),
            parse_segments(k, segs, Tu),
        )
        for k, (segs, w) in FIXTURE.items()
    }
    samples = [
        ExportSample(sample_id=f"{SUBSET}/{k}", subset=SUBSET, id=k, eligible=True, T_s=T)
        for k in FIXTURE
    ]
    samples += [
        ExportSample(
            sample_id=f"{SUBSET}/{100 + i}",
            subset=SUBSET,
            id=str(100 + i),
            eligible=False,
            reasons=["pacing"],
        )
        for i in range(ineligible)
    ]
    return score_subset(SUBSET, samples, parsed)


def test_interrupt_rows_by_hand():
    _result, rows = score()
    assert [r.outcome for r in rows[:6]] == [
        "not_exercised",
        "speaking_at_end",
        "response",
        "no_response",
        "speaking_at_end",
        "response",
    ]
    r1, r2, r3, r4, r5, r6 = rows[:6]
    assert (
        r1.speech_at_onset,
        r1.speech_at_end,
        r1.speech_before_onset,
        r1.stop_s,
        r1.restarts,
    ) == (False, True, True, None, 1)
    assert r2.stop_s == 4.0 and r2.latency_s is None
    assert (
        r3.latency_s,
        r3.stop_s,
        r3.speech_in_interruption_s,
        r3.restarts,
        r3.speech_at_end,
    ) == (1.0, 0.5, 1.0, 1, False)
    assert (r4.stop_s, r4.speech_in_interruption_s) == (1.0, 1.0)
    assert (r5.stop_s, r5.speech_before_onset) == (NOT_REACHED, False)
    assert (r6.latency_s, r6.stop_s) == (0.5, 0.2)
    assert rows[6].eligible is False


def test_interrupt_metrics_by_hand():
    result, _rows = score()
    m, c = result.metrics, result.counts
    assert (c.selected, c.eligible, c.exercised, c.not_exercised) == (7, 6, 5, 1)
    assert (m.exercised_rate.count, m.exercised_rate.n) == (5, 6)
    assert m.exercised_rate.selected_bounds == (5 / 7, 6 / 7)
    assert (m.speaking_at_end_rate.count, m.speaking_at_end_rate.n) == (2, 5)
    assert m.speaking_at_end_rate.selected_bounds == (2 / 7, 4 / 7)
    assert (m.response_rate_1s.count, m.response_rate_2s.count, m.response_rate_5s.count) == (
        2,
        2,
        2,
    )
    assert m.no_response_rate.count == 1
    assert m.response_latency_s.median_s == NOT_REACHED and m.response_latency_s.observed == 2
    assert (m.stop_latency_s.median_s, m.stop_latency_s.p90_s) == (1.0, NOT_REACHED)
    assert (m.speech_s_per_interruption_s.numerator, m.speech_s_per_interruption_s.denominator) == (
        6.2,
        10.0,
    )
    assert m.speech_s_per_interruption_s.value == 0.62
    assert m.restart_rate.count == 1
    assert m.min_observable_s == 8.0


def test_words_before_R_and_overlapping_segments_stop():
    Tu = to_us(T)
    with pytest.raises(SampleError, match="before R"):
        check_words_after("i/1", parse_words("i/1", transcript((11.9, 12.5)), Tu), to_us(R))
    with pytest.raises(SampleError, match="overlap"):
        parse_segments("i/1", [(1.0, 3.0), (2.0, 4.0)], Tu)
    assert parse_segments("i/1", [(3.0, 4.0), (1.0, 3.0)], Tu) == (
        (1_000_000, 3_000_000),
        (3_000_000, 4_000_000),
    )


def test_real_silero_on_reference_interruption(reference, silero):
    """The reference window: S = 10.530667, R = 13.144, T = 28.16; the model pauses between
    sentences at S (speech 10.016-10.432 and 10.592-11.2), so the sample is not exercised."""
    from fdb.audio import read_wav
    from fdb.io import read_json

    folder = reference / "user_interruption_example" / "1"
    audio = read_wav(folder / "output.wav")
    assert audio.rate == 16000 and len(audio.samples) == 450560
    Tu = to_us(len(audio.samples) / 16000)
    segments = parse_segments("ref", silero.segments(audio.samples, UNIFIED_VAD_SETTINGS), Tu)
    words = parse_words("ref", read_json(folder / "output.json"), Tu)
    S_, R_ = read_json(folder / "interrupt.json")[0]["timestamp"]
    check_words_after("ref", words, to_us(R_))
    from scorers.v10_interrupt import score_interrupt_sample

    row = score_interrupt_sample(
        InterruptSample("ref", Tu, to_us(S_), to_us(R_), words, segments), SUBSET
    )
    assert (row.S_s, row.R_s, row.first_word_s) == (10.530667, 13.144, 17.224)
    assert (row.speech_at_onset, row.speech_at_end, row.speech_before_onset) == (False, False, True)
    assert row.outcome == "not_exercised" and row.restarts == 1
    assert row.vad_segments[-1][1] == 28.16
