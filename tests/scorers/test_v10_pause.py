"""Unified pause handling on a hand-built subset (expected values computed by hand).

T = 10 s everywhere. Samples (pauses; words as (start, end)):
 1: [2,3] [3,4] touching; words (0.5,1) (1.8,2.3) (3,3.5) (6,null)
    -> intrusion, 2 intruding onsets, owned [2,3) empty / [3,10] hit: 1 intruded pause,
       inside (3.0 in [3,4)), pre-pause, carry-in (1.8-2.3 crosses 2.0); covered 0.3 + 0.5
 2: [1,1] zero-length, [4,5]; words (1,1.2) (5,5.6)
    -> intrusion (1.0 >= a1), owned [1,4) and [4,10] both hit: 2; no inside onset ([1,1) is
       empty, 5.0 is not in [4,5)); covered 0
 3: [2,2.5]; words (1,2.2) (1.5,2.4) -> no onset after 2.0; pre-pause, carry-in;
    covered = union [1,2.4] in [2,2.5] = 0.4 (per-word overlaps would sum to 0.6)
 4: [3,4]; no words -> nothing; any_speech false
 5: [8,9]; word (10,10.4) starts at T (allowed), ends after T -> intrusion in [8, T]
 6, 7: ineligible (pacing; pacing + window_error)
"""

from __future__ import annotations

import pytest

from benchmarks.support.treebuild import pause_json, transcript
from fdb.errors import SampleError
from fdb.records import ExportSample
from scorers.times import to_us
from scorers.v10_inputs import PauseSample, parse_pauses, parse_words
from scorers.v10_unified import score_subset

SUBSET = "synthetic_pause_handling"
T = 10.0
FIXTURE = {
    "1": ([(2.0, 3.0), (3.0, 4.0)], [(0.5, 1.0), (1.8, 2.3), (3.0, 3.5), (6.0, None)]),
    "2": ([(1.0, 1.0), (4.0, 5.0)], [(1.0, 1.2), (5.0, 5.6)]),
    "3": ([(2.0, 2.5)], [(1.0, 2.2), (1.5, 2.4)]),
    "4": ([(3.0, 4.0)], []),
    "5": ([(8.0, 9.0)], [(10.0, 10.4)]),
}


def parsed_sample(sid: str, pauses, words) -> PauseSample:
    Tu = to_us(T)
    return PauseSample(
        f"{SUBSET}/{sid}",
        Tu,
        parse_pauses(sid, pause_json(*pauses), Tu),
        parse_words(sid, transcript(*words), Tu),
    )


def scored():
    samples = [
        ExportSample(sample_id=f"{SUBSET}/{k}", subset=SUBSET, id=k, eligible=True, T_s=T)
        for k in FIXTURE
    ]
    samples += [
        ExportSample(
            sample_id=f"{SUBSET}/6", subset=SUBSET, id="6", eligible=False, reasons=["pacing"]
        ),
        ExportSample(
            sample_id=f"{SUBSET}/7",
            subset=SUBSET,
            id="7",
            eligible=False,
            reasons=["pacing", "window_error", "pacing"],
        ),
    ]
    parsed = {f"{SUBSET}/{k}": parsed_sample(k, *v) for k, v in FIXTURE.items()}
    return score_subset(SUBSET, samples[::-1], parsed, declared=137)


def test_pause_rows_by_hand():
    _result, rows = scored()
    assert [r.sample_id.split("/")[1] for r in rows] == ["1", "2", "3", "4", "5", "6", "7"]
    r1, r2, r3, r4, r5 = rows[:5]
    assert (r1.pause_intrusion, r1.intrusion_words, r1.intruded_pauses) == (True, 2, 1)
    assert (r1.inside_pause_onset, r1.pre_pause_speech, r1.carry_in, r1.any_speech) == (
        True,
        True,
        True,
        True,
    )
    assert r1.intrusion_s == 0.8 and r1.pause_s == 2.0
    assert (r2.pause_intrusion, r2.intrusion_words, r2.intruded_pauses, r2.inside_pause_onset) == (
        True,
        2,
        2,
        False,
    )
    assert (r2.pre_pause_speech, r2.carry_in, r2.intrusion_s, r2.pause_s) == (
        False,
        False,
        0.0,
        1.0,
    )
    assert (r3.pause_intrusion, r3.intruded_pauses, r3.pre_pause_speech, r3.carry_in) == (
        False,
        0,
        True,
        True,
    )
    assert r3.intrusion_s == 0.4
    assert (r4.any_speech, r4.pause_intrusion, r4.intrusion_s) == (False, False, 0.0)
    assert (r5.pause_intrusion, r5.intruded_pauses, r5.inside_pause_onset) == (True, 1, False)
    assert rows[5].eligible is False and rows[6].reasons == ["pacing", "window_error", "pacing"]


def test_pause_metrics_by_hand():
    result, _rows = scored()
    c = result.counts
    assert (c.declared, c.selected, c.eligible, c.ineligible) == (137, 7, 5, 2)
    assert c.ineligible_reasons == {"pacing": 2, "window_error": 1}
    assert result.coverage == 5 / 7
    m = result.metrics
    assert (
        m.pause_intrusion_rate.count,
        m.pause_intrusion_rate.n,
        m.pause_intrusion_rate.value,
    ) == (3, 5, 0.6)
    assert m.pause_intrusion_rate.selected_bounds == (3 / 7, 5 / 7)
    assert m.inside_pause_onset_rate.count == 1
    assert m.pre_pause_speech_rate.count == 2
    assert m.carry_in_rate.count == 2
    assert m.any_speech_rate.count == 4
    assert (m.pause_intrusion_per_pause.numerator, m.pause_intrusion_per_pause.denominator) == (
        4,
        7,
    )
    assert m.pause_intrusion_per_pause.value == 4 / 7
    assert (m.intrusion_s_per_pause_s.numerator, m.intrusion_s_per_pause_s.denominator) == (
        1.2,
        5.5,
    )
    assert m.intrusion_s_per_pause_s.value == 12 / 55
    assert m.pauses == 7 and m.pause_s == 5.5
    low, high = m.intrusion_s_per_pause_s.bootstrap95
    assert 0 <= low <= 12 / 55 <= high <= 1
    assert m.pause_intrusion_per_pause.valid_resamples == 2000
    assert (
        m.pause_intrusion_rate.wilson95 is not None
        and m.pause_intrusion_per_pause.better == "lower"
    )


def test_bootstrap_is_deterministic():
    a, _ = scored()
    b, _ = scored()
    assert a.model_dump() == b.model_dump()


def test_no_eligible_samples_gives_nulls_not_zeros():
    samples = [
        ExportSample(sample_id=f"{SUBSET}/1", subset=SUBSET, id="1", eligible=False, reasons=["x"])
    ]
    result, rows = score_subset(SUBSET, samples, {})
    m = result.metrics
    assert m.pause_intrusion_rate.value is None and m.pause_intrusion_rate.wilson95 is None
    assert m.pause_intrusion_rate.selected_bounds == (0.0, 1.0)
    assert m.intrusion_s_per_pause_s.value is None and m.intrusion_s_per_pause_s.bootstrap95 is None
    assert result.coverage == 0.0 and len(rows) == 1


def test_zero_pause_time_leaves_ratio_null():
    Tu = to_us(T)
    parsed = PauseSample(f"{SUBSET}/1", Tu, ((to_us(2.0), to_us(2.0)),), ())
    samples = [ExportSample(sample_id=f"{SUBSET}/1", subset=SUBSET, id="1", eligible=True, T_s=T)]
    result, _ = score_subset(SUBSET, samples, {f"{SUBSET}/1": parsed})
    assert result.metrics.intrusion_s_per_pause_s.value is None
    assert result.metrics.intrusion_s_per_pause_s.bootstrap95 is None
    assert result.metrics.pause_intrusion_per_pause.value == 0.0


@pytest.mark.parametrize(
    "pauses, problem",
    [
        ([], "lists no pause"),
        ([(3.0, 2.0)], "ends before it starts"),
        ([(2.0, 4.0), (3.0, 5.0)], "overlapping"),
        ([(4.0, 5.0), (1.0, 2.0)], "overlapping"),
        ([(9.0, 10.5)], "outside the window"),
    ],
)
def test_bad_pauses_stop_with_sample_and_problem(pauses, problem):
    with pytest.raises(SampleError, match=problem) as err:
        parse_pauses(f"{SUBSET}/9", pause_json(*pauses), to_us(T))
    assert err.value.sample == f"{SUBSET}/9"


def test_word_checks():
    Tu = to_us(T)
    with pytest.raises(SampleError, match="outside the window"):
        parse_words("s/1", transcript((10.5, 11.0)), Tu)
    with pytest.raises(SampleError, match="null start"):
        parse_words("s/1", {"chunks": [{"text": "x", "timestamp": [None, 1.0]}]}, Tu)
    words = parse_words("s/1", transcript((9.9, 12.0), (6.32000000000005, None)), Tu)
    assert words[0].end == 12_000_000 and words[1].start == words[1].end == 6_320_000
