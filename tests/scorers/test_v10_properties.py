"""Property tests (hypothesis) of the unified v1.0 metrics against brute-force oracles written
from the definitions, on generated transcripts and annotations (times on a 1 ms grid, so the
oracles can count covered milliseconds exactly).

Every outcome branch is generated (``@example`` pins each one; ``SEEN`` records them and the
last test checks the set): pause flags true and false; early_start / response / no_response;
not_exercised / speaking_at_end / response / no_response. Interval edge cases: a count of 0
(Wilson low end exactly 0), a count of n (high end exactly 1), no pause time (ratio null, no
bootstrap), all samples not_exercised (shares null, selected bounds [0, 1]). Derandomized, no
example database and hypothesis' cache in the temp directory, so runs are reproducible and leave
no files in the repository.
"""

from __future__ import annotations

import math
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir

from benchmarks.support.treebuild import interrupt_json, pause_json, transcript, turn_json
from fdb.stats import wilson
from fdb.takeover import official_takeover
from scorers.times import to_us
from scorers.v10_backchannel import sample_verdict
from scorers.v10_common import share
from scorers.v10_inputs import (
    InterruptSample,
    PauseSample,
    TurnSample,
    parse_interrupt,
    parse_pauses,
    parse_segments,
    parse_turn_end,
    parse_words,
)
from scorers.v10_interrupt import interrupt_metrics, score_interrupt_sample
from scorers.v10_official import official_latency
from scorers.v10_pause import pause_metrics, score_pause_sample
from scorers.v10_turn import score_turn_sample, turn_metrics

set_hypothesis_home_dir(
    Path(tempfile.gettempdir()) / "fdb-hypothesis"
)  # no .hypothesis/ in the repo
SETTINGS = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
SEEN: dict[str, set] = defaultdict(set)
US = 1000  # microseconds per generated millisecond


def s(ms: int) -> float:
    return ms / 1000


@st.composite
def words_in(draw, lo: int, hi: int, max_size: int = 5):
    """(start_ms, end_ms | None): starts in [lo, hi]; ends may precede the start or pass T."""
    out = []
    for _ in range(draw(st.integers(0, max_size))):
        start = draw(st.integers(lo, hi))
        end = draw(st.one_of(st.none(), st.integers(start - 50, start + 2500)))
        out.append((start, end))
    return out


def json_words(words):
    return transcript(*[(s(a), None if b is None else s(b)) for a, b in words])


# ---------------------------------------------------------------- pause handling


@st.composite
def pause_cases(draw):
    T = draw(st.integers(1000, 12000))
    cuts = sorted(draw(st.lists(st.integers(0, T), min_size=2, max_size=8)))
    cuts = cuts[: len(cuts) // 2 * 2]
    pauses = list(zip(cuts[::2], cuts[1::2], strict=True))
    return T, pauses, draw(words_in(0, T))


def pause_oracle(T, pauses, words):
    a1 = pauses[0][0]
    starts = [a for a, _b in words]
    owned = [(a, pauses[i + 1][0]) for i, (a, _b) in enumerate(pauses[:-1])] + [
        (pauses[-1][0], T + 1)
    ]
    ends = max([T] + [b for _a, b in words if b is not None]) + 1
    covered = np.zeros(ends, dtype=bool)
    for a, b in words:
        if b is not None and b > a:
            covered[a:b] = True
    return {
        "pause_intrusion": any(t >= a1 for t in starts),
        "inside_pause_onset": any(a <= t < b for t in starts for a, b in pauses),
        "pre_pause_speech": any(t < a1 for t in starts),
        "carry_in": any(a < a1 < (a if b is None else b) for a, b in words),
        "any_speech": bool(words),
        "intrusion_words": sum(1 for t in starts if t >= a1),
        "intruded_pauses": sum(any(lo <= t < hi for t in starts) for lo, hi in owned),
        "intrusion_us": sum(int(covered[a:b].sum()) for a, b in pauses) * US,
    }


def pause_sample(T, pauses, words) -> PauseSample:
    Tu = to_us(s(T))
    parsed = parse_pauses("p/1", pause_json(*[(s(a), s(b)) for a, b in pauses]), Tu)
    return PauseSample("p/1", Tu, parsed, parse_words("p/1", json_words(words), Tu))


FLAGS = ("pause_intrusion", "inside_pause_onset", "pre_pause_speech", "carry_in", "any_speech")


@SETTINGS
@given(pause_cases())
@example((5000, [(1000, 2000)], []))  # every flag false
@example(
    (5000, [(1000, 2000), (3000, 3000)], [(500, 1500), (1200, None), (4000, 4400)])
)  # every flag true
@example((5000, [(1000, 2000)], [(2500, 2400)]))  # intrusion after the pause, end before start
def test_pause_rows_match_the_oracle(case):
    T, pauses, words = case
    row = score_pause_sample(pause_sample(T, pauses, words), "synthetic_pause_handling")
    want = pause_oracle(T, pauses, words)
    for flag in FLAGS:
        assert getattr(row, flag) == want[flag], flag
        SEEN["pause"].add((flag, want[flag]))
    assert (row.intrusion_words, row.intruded_pauses) == (
        want["intrusion_words"],
        want["intruded_pauses"],
    )
    assert to_us(row.intrusion_s) == want["intrusion_us"]
    assert row.pause_s == s(sum(b - a for a, b in pauses))


@SETTINGS
@given(st.lists(pause_cases(), min_size=0, max_size=5), st.integers(0, 3))
@example([(3000, [(1000, 1000)], [(1200, 1500)])], 0)  # no pause time at all
def test_pause_metrics_shares_and_ratios(cases, ineligible):
    rows = [score_pause_sample(pause_sample(*c), "synthetic_pause_handling") for c in cases]
    selected = len(rows) + ineligible
    metrics = pause_metrics(rows, selected)
    for flag in FLAGS:
        check_share(
            getattr(metrics, f"{flag}_rate"),
            sum(getattr(r, flag) for r in rows),
            len(rows),
            selected,
            ineligible,
        )
    ratio = metrics.intrusion_s_per_pause_s
    pause_us = sum(to_us(r.pause_s) for r in rows)
    if pause_us == 0:
        SEEN["edge"].add("no pause time")
        assert ratio.value is None and ratio.bootstrap95 is None and ratio.valid_resamples == 0
    else:
        assert ratio.value == sum(to_us(r.intrusion_s) for r in rows) / pause_us
        low, high = ratio.bootstrap95
        assert low <= high and ratio.valid_resamples <= 2000
    per_pause = metrics.pause_intrusion_per_pause
    assert per_pause.denominator == sum(r.pauses for r in rows)


def check_share(out, count, n, selected, unknown):
    assert (out.count, out.n, out.unknown) == (count, n, unknown)
    if n == 0:
        assert out.value is None and out.wilson95 is None
    else:
        assert out.value == count / n
        low, high = out.wilson95
        assert 0.0 <= low <= out.value <= high <= 1.0
        if count == 0:
            SEEN["edge"].add("count 0")
            assert low == 0.0
        if count == n:
            SEEN["edge"].add("count n")
            assert high == 1.0
    if selected:
        assert out.selected_bounds == (count / selected, (count + unknown) / selected)
    else:
        assert out.selected_bounds is None


# ---------------------------------------------------------------- smooth turn-taking


@st.composite
def turn_cases(draw):
    T = draw(st.integers(1000, 12000))
    return T, draw(st.integers(0, T)), draw(words_in(0, T))


def turn_sample(T, E, words) -> TurnSample:
    Tu = to_us(s(T))
    E_ = parse_turn_end("t/1", turn_json(s(E)), Tu)
    return TurnSample("t/1", Tu, E_, parse_words("t/1", json_words(words), Tu))


@SETTINGS
@given(turn_cases())
@example((5000, 2000, []))  # no_response
@example(
    (5000, 2000, [(3000, 3100), (1999, 2100)])
)  # early_start (the earliest word, not the first)
@example((5000, 2000, [(3000, None), (2000, 2500)]))  # response at exactly E: latency 0
def test_turn_outcomes(case):
    T, E, words = case
    row = score_turn_sample(turn_sample(T, E, words), "candor_turn_taking")
    first = min((a for a, _b in words), default=None)
    want = "no_response" if first is None else "early_start" if first < E else "response"
    assert row.outcome == want
    SEEN["turn"].add(want)
    assert row.latency_s == (s(first - E) if want == "response" else None)


@SETTINGS
@given(st.lists(turn_cases(), max_size=6), st.integers(0, 2))
def test_turn_metrics(cases, ineligible):
    rows = [score_turn_sample(turn_sample(*c), "candor_turn_taking") for c in cases]
    selected = len(rows) + ineligible
    m = turn_metrics(rows, selected)
    n = len(rows)
    by = {o: sum(r.outcome == o for r in rows) for o in ("early_start", "response", "no_response")}
    check_share(m.early_start_rate, by["early_start"], n, selected, ineligible)
    check_share(m.no_response_rate, by["no_response"], n, selected, ineligible)
    lat = sorted(math.inf if r.latency_s is None else to_us(r.latency_s) for r in rows)
    for k in (1, 2, 5):
        check_share(
            getattr(m, f"response_rate_{k}s"),
            sum(v <= k * 10**6 for v in lat),
            n,
            selected,
            ineligible,
        )
    if n == 0:
        assert m.response_latency_s.median_s is None
    else:
        q = lat[math.ceil(n / 2) - 1]
        assert m.response_latency_s.median_s == ("not_reached" if math.isinf(q) else q / 10**6)


# ---------------------------------------------------------------- user interruption


@st.composite
def interrupt_cases(draw):
    T = draw(st.integers(2000, 12000))
    S, R = sorted(draw(st.lists(st.integers(0, T), min_size=2, max_size=2)))
    cuts = sorted(draw(st.lists(st.integers(0, T), max_size=8)))
    segments = [(a, b) for a, b in zip(cuts[0::2], cuts[1::2], strict=False) if a < b]
    return T, S, R, segments, draw(words_in(R, T, max_size=3))


def interrupt_sample(T, S, R, segments, words) -> InterruptSample:
    Tu = to_us(s(T))
    S_, R_ = parse_interrupt("i/1", interrupt_json(s(S), s(R)), Tu)
    segs = parse_segments("i/1", [(s(a), s(b)) for a, b in segments], Tu)
    return InterruptSample("i/1", Tu, S_, R_, parse_words("i/1", json_words(words), Tu), segs)


def interrupt_oracle(T, S, R, segments, words):
    at_onset = any(a <= S < b for a, b in segments)
    at_end = any(a < R < b for a, b in segments)
    if not at_onset:
        outcome = "not_exercised"
    elif at_end:
        outcome = "speaking_at_end"
    else:
        outcome = "response" if words else "no_response"
    cover = next(((a, b) for a, b in segments if a <= S < b), None)
    stop = None if cover is None else ("not_reached" if cover[1] >= T else s(cover[1] - S))
    speech = sum(max(0, min(b, R) - max(a, S)) for a, b in segments)
    return outcome, stop, s(speech), sum(S < a < R for a, _b in segments)


@SETTINGS
@given(interrupt_cases())
@example((10000, 3000, 5000, [(1000, 2000)], [(6000, 6500)]))  # not_exercised
@example((10000, 3000, 5000, [(2000, 6000)], [(6000, 6500)]))  # speaking_at_end
@example(
    (10000, 3000, 5000, [(2000, 4000), (4500, 4800)], [(5000, None)])
)  # response at R, a restart
@example(
    (10000, 3000, 5000, [(3000, 10000)], [])
)  # speech covers S and R: speaking_at_end, runs to T
@example((10000, 3000, 5000, [(3000, 5000)], []))  # segment ends exactly at R: no_response
def test_interrupt_outcomes(case):
    T, S, R, segments, words = case
    row = score_interrupt_sample(interrupt_sample(*case), "synthetic_user_interruption")
    outcome, stop, speech, restarts = interrupt_oracle(*case)
    SEEN["interrupt"].add(outcome)
    assert (row.outcome, row.stop_s, row.restarts) == (outcome, stop, restarts)
    assert row.speech_in_interruption_s == speech
    first = min((a for a, _b in words), default=None)
    assert row.latency_s == (s(first - R) if outcome == "response" else None)


@SETTINGS
@given(st.lists(interrupt_cases(), max_size=5), st.integers(0, 2))
@example(
    [(10000, 3000, 5000, [(1000, 2000)], []), (8000, 0, 100, [], [(200, 300)])], 0
)  # none exercised
def test_interrupt_metrics_over_exercised_samples(cases, ineligible):
    rows = [
        score_interrupt_sample(interrupt_sample(*c), "synthetic_user_interruption") for c in cases
    ]
    selected = len(rows) + ineligible
    m = interrupt_metrics(rows, selected)
    ex = [r for r in rows if r.speech_at_onset]
    check_share(m.exercised_rate, len(ex), len(rows), selected, ineligible)
    unknown = selected - len(ex)
    for name, outcome in (
        ("speaking_at_end_rate", "speaking_at_end"),
        ("no_response_rate", "no_response"),
    ):
        check_share(
            getattr(m, name), sum(r.outcome == outcome for r in ex), len(ex), selected, unknown
        )
    check_share(m.restart_rate, sum(r.restarts > 0 for r in ex), len(ex), selected, unknown)
    if rows and not ex:
        SEEN["edge"].add("all not_exercised")
        for name in (
            "speaking_at_end_rate",
            "no_response_rate",
            "restart_rate",
            "response_rate_2s",
        ):
            share_ = getattr(m, name)
            assert (
                share_.value is None
                and share_.wilson95 is None
                and share_.selected_bounds == (0.0, 1.0)
            )
        assert m.speech_s_per_interruption_s.value is None and m.stop_latency_s.median_s is None


# ---------------------------------------------------------------- official rules and intervals


@SETTINGS
@given(words_in(0, 5000, max_size=6), st.integers(0, 5000))
def test_official_takeover_and_clamp(words, boundary):
    chunks = [(s(a), None if b is None else s(b)) for a, b in words]
    flag = official_takeover(chunks)
    if not chunks:
        assert flag == 0
    else:
        last = chunks[-1][1] if chunks[-1][1] is not None else chunks[-1][0]
        assert flag == int(last - chunks[0][0] >= 1.0 or len(chunks) > 3)
        assert official_latency(chunks, s(boundary)) == max(chunks[0][0] - s(boundary), 0.0) >= 0.0


@SETTINGS
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(1, 45)), max_size=6), words_in(0, 9000))
def test_backchannel_rule_eras(spans, words):
    segments, t = [], 0
    for gap, length in spans:  # 0.1 s units, like the rounded VAD times
        segments.append((round((t + gap) / 10, 1), round((t + gap + length) / 10, 1)))
        t += gap + length
    chunks = [(s(a), None if b is None else s(b)) for a, b in words]
    tor_new, since = sample_verdict(segments, chunks, "since-2026-02-22")
    tor_old, before = sample_verdict(segments, chunks, "before-2026-02-22")
    assert tor_new == tor_old and set(before) <= set(since)
    stop = next((i for i, (a, b) in enumerate(segments) if b - a > 3), len(segments))
    assert since == segments[:stop]


@SETTINGS
@given(st.integers(0, 60), st.integers(0, 5))
def test_share_interval_edges(n, ineligible):
    for count in sorted({0, n // 2, n}):
        out = share(count, n, n + ineligible, ineligible, "lower")
        check_share(out, count, n, n + ineligible, ineligible)
        assert out.wilson95 == wilson(count, n)


def test_every_branch_was_generated():
    if not SEEN:  # run on its own (e.g. with -k): nothing to check
        return
    assert SEEN["turn"] == {"early_start", "response", "no_response"}
    assert SEEN["interrupt"] == {"not_exercised", "speaking_at_end", "response", "no_response"}
    assert SEEN["pause"] == {(flag, value) for flag in FLAGS for value in (True, False)}
    assert SEEN["edge"] >= {"count 0", "count n", "no pause time", "all not_exercised"}
