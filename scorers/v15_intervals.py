"""v1.5 timing intervals, as the official ``get_timing.py`` computes them
(``fdb-official-scoring.md`` §3.5; reimplemented clean-room, not vendored).

- merge: sort the VAD spans and merge the next span into the previous one when
  ``next.start - prev.end <= gap`` (0.6 s for the user / input.wav, 0.5 s for the model /
  output.wav);
- stop intervals: a two-pointer sweep over the merged user spans U and model spans M keeps
  each positive overlap (max of starts, min of ends), advancing U when its span ends first
  (strictly), else M; duplicates by ``int(round(end * 1000))`` keep the shortest interval;
  output sorted by end, every value ``round(., 3)``;
- response intervals: for each user span, the first model span starting strictly after its
  end; duplicates by ``int(round(model_start * 1000))`` keep the later user end; output sorted
  by model start, ``[round(user_end, 3), round(model_start, 3)]``.
A latency is ``round(end - start, 3)`` of an output interval.
"""

from __future__ import annotations

from collections.abc import Sequence

USER_MERGE_GAP_S = 0.6
MODEL_MERGE_GAP_S = 0.5
Interval = tuple[float, float]


def merge_spans(spans: Sequence[Interval], gap: float) -> list[Interval]:
    """Merge sorted spans whose gap is at most ``gap`` seconds."""
    merged: list[list[float]] = []
    for start, end in sorted(spans):
        if merged and start - merged[-1][1] <= gap:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(s, e) for s, e in merged]


def stop_intervals(user: Sequence[Interval], model: Sequence[Interval]) -> list[Interval]:
    """Overlaps of user and model spans, deduplicated by rounded end keeping the shortest."""
    i = j = 0
    raw: list[Interval] = []
    while i < len(user) and j < len(model):
        start = max(user[i][0], model[j][0])
        end = min(user[i][1], model[j][1])
        if end > start:
            raw.append((start, end))
        if user[i][1] < model[j][1]:
            i += 1
        else:
            j += 1
    best: dict[int, Interval] = {}
    for start, end in raw:
        key = int(round(end * 1000))
        if key not in best or end - start < best[key][1] - best[key][0]:
            best[key] = (start, end)
    return [(round(s, 3), round(e, 3)) for s, e in sorted(best.values(), key=lambda iv: iv[1])]


def response_intervals(user: Sequence[Interval], model: Sequence[Interval]) -> list[Interval]:
    """[user end, next model start] per user span, deduplicated by model start keeping the
    later user end."""
    starts = sorted(s for s, _e in model)
    best: dict[int, tuple[float, float]] = {}
    for _us, user_end in user:
        nxt = next((s for s in starts if s > user_end), None)
        if nxt is None:
            continue
        key = int(round(nxt * 1000))
        if key not in best or user_end > best[key][0]:
            best[key] = (user_end, nxt)
    return [(round(ue, 3), round(ms, 3)) for ue, ms in sorted(best.values(), key=lambda iv: iv[1])]


def latencies(intervals: Sequence[Interval]) -> list[float]:
    """end - start of each output interval, rounded to the millisecond."""
    return [round(end - start, 3) for start, end in intervals]


# --- fdb event-anchored variant (not official) -------------------------------------------------
#
# The official intervals are whole-file: a session with two user turns gives two response
# intervals, and nothing says which one belongs to the overlap event. The anchored rule picks
# one of each, using metadata.json's overlap span [os, oe]:
#
# 1. event span: the merged user span (0.6 s gap) with the largest intersection with [os, oe];
#    ties go to the earlier span; no user span intersecting [os, oe] (intersection > 0) means
#    no event span, and both anchored intervals are null;
# 2. anchored stop interval: the first (earliest-starting) positive overlap of the event span
#    with a merged model span (0.5 s gap), i.e. the model speech the overlap ran into;
#    [max(starts), min(ends)], null when the model was silent throughout the event span;
# 3. anchored response interval: [event end, start of the first merged model span starting
#    strictly after the event end], null when none follows;
# values rounded to 3 decimals as in the official output. No dedupe is needed: one each.


def event_span(user: Sequence[Interval], overlap: Interval) -> Interval | None:
    """The merged user span that holds the overlap event (largest intersection, earliest on
    ties)."""
    best: Interval | None = None
    best_len = 0.0
    for start, end in user:
        inter = min(end, overlap[1]) - max(start, overlap[0])
        if inter > best_len:
            best, best_len = (start, end), inter
    return best


def anchored_stop(event: Interval | None, model: Sequence[Interval]) -> Interval | None:
    """The first positive overlap of the event span with a model span."""
    if event is None:
        return None
    for start, end in sorted(model):
        lo, hi = max(event[0], start), min(event[1], end)
        if hi > lo:
            return (round(lo, 3), round(hi, 3))
    return None


def anchored_response(event: Interval | None, model: Sequence[Interval]) -> Interval | None:
    """[event end, first model start strictly after it]."""
    if event is None:
        return None
    nxt = next((s for s, _e in sorted(model) if s > event[1]), None)
    return None if nxt is None else (round(event[1], 3), round(nxt, 3))
