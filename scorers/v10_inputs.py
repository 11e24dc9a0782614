"""Parsed, checked inputs of one v1.0 sample (pure functions over parsed JSON).

Spec "Inputs and checks": all times are on the window [0, T] and rounded to the microsecond
(``round(x, 6)``, ruling 1) before any comparison. Loading a sample stops with the sample id
and the problem when a check fails: every word starts in [0, T] (ruling 13: a word may end
after T; a null start is an error; a null end is a zero-length word at its start); E, S and R
lie in [0, T] with S <= R; pause.json lists at least one pause, each [a, b] with a <= b inside
[0, T], sorted and not overlapping (ruling 4: touching and zero-length pauses are allowed); no
interruption word starts before R; VAD segments do not overlap (ruling 14).

Both the unified and the official-rule scorers read output.json through ``transcript_times``
(strict): every time is a finite, non-negative number, no word ends before it starts, and the
word starts are in time order in the file. The official rules read the first chunk as the first
word (its latency is s(W[0]) - boundary), the unified ones the earliest start, so a transcript out
of order would give the two different latencies without a word; it is refused instead (the file
is a phase output: the fix is to transcribe the sample again, not to score around it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from fdb.errors import SampleError
from scorers.times import to_us

Span = tuple[int, int]  # [start_us, end_us]
WordTimes = tuple[float | None, float | None]  # (start, end) in seconds as the file has them
TRANSCRIPT_HINT = (
    "delete this output.json and rerun the asr phase (`python -m fdb asr --run-name RUN`), "
    "which transcribes the sample again; or correct the file"
)


@dataclass(frozen=True)
class WordSpan:
    """One transcript word in integer microseconds. A null end is stored as the start."""

    start: int
    end: int


@dataclass(frozen=True)
class PauseSample:
    sample_id: str
    T: int
    pauses: tuple[Span, ...]
    words: tuple[WordSpan, ...]


@dataclass(frozen=True)
class TurnSample:
    sample_id: str
    T: int
    E: int
    words: tuple[WordSpan, ...]


@dataclass(frozen=True)
class InterruptSample:
    sample_id: str
    T: int
    S: int
    R: int
    words: tuple[WordSpan, ...]
    segments: tuple[Span, ...]


def _time(sample_id: str, value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SampleError(sample_id, f"{what} is {value!r}, not a number")
    try:
        return to_us(value)
    except ValueError as exc:
        raise SampleError(sample_id, f"{what} is {value!r}, not a finite time") from exc


def _inside(sample_id: str, t: int, T: int, what: str) -> None:
    if not 0 <= t <= T:
        raise SampleError(
            sample_id, f"{what} {t / 1e6:.6f} s lies outside the window [0, {T / 1e6:.6f}] s"
        )


def _word_time(sample_id: str, value: Any, what: str, non_negative: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SampleError(
            sample_id, f"output.json {what} is {value!r}, not a number", TRANSCRIPT_HINT
        )
    try:
        number = float(value)
    except OverflowError:  # an integer too large for a float
        number = math.inf
    if not math.isfinite(number):
        raise SampleError(
            sample_id, f"output.json {what} is {value!r}, not a finite time", TRANSCRIPT_HINT
        )
    if non_negative and number < 0:
        raise SampleError(
            sample_id, f"output.json {what} is {number:g} s, a negative time", TRANSCRIPT_HINT
        )
    return number


def transcript_times(
    sample_id: str, transcript: Any, allow_null_start: bool = False, strict: bool = True
) -> list[WordTimes]:
    """(start, end) of every output.json chunk in file order, checked: numbers, finite, no
    negative start and, with ``strict`` (what the scorers' file readers use), no negative end,
    no word ending before it starts and the starts in time order. A null start is an error
    unless ``allow_null_start`` (the backchannel rule skips such a word itself; it is left out
    of the order check)."""
    chunks = transcript.get("chunks") if isinstance(transcript, dict) else None
    if not isinstance(chunks, list):
        raise SampleError(sample_id, "output.json has no 'chunks' list", TRANSCRIPT_HINT)
    out: list[WordTimes] = []
    previous: tuple[int, float] | None = None  # the latest word with a start
    for i, chunk in enumerate(chunks):
        stamp = chunk.get("timestamp") if isinstance(chunk, dict) else None
        if not isinstance(stamp, list | tuple) or len(stamp) != 2:
            raise SampleError(
                sample_id, f"output.json chunk {i} has no [start, end] timestamp", TRANSCRIPT_HINT
            )
        if stamp[0] is None and not allow_null_start:
            raise SampleError(sample_id, f"output.json chunk {i} has a null start", TRANSCRIPT_HINT)
        start = None if stamp[0] is None else _word_time(sample_id, stamp[0], f"word {i} start")
        end = None if stamp[1] is None else _word_time(sample_id, stamp[1], f"word {i} end", strict)
        if strict:
            _check_order(sample_id, i, start, end, previous)
        if start is not None:
            previous = (i, start)
        out.append((start, end))
    return out


def _check_order(
    sample_id: str,
    i: int,
    start: float | None,
    end: float | None,
    previous: tuple[int, float] | None,
) -> None:
    if start is not None and end is not None and end < start:
        raise SampleError(
            sample_id,
            f"output.json word {i} ends before it starts ({end:g} s < {start:g} s)",
            TRANSCRIPT_HINT,
        )
    if start is not None and previous is not None and start < previous[1]:
        raise SampleError(
            sample_id,
            f"output.json word {i} starts at {start:g} s, before word {previous[0]} "
            f"({previous[1]:g} s): the words are out of time order",
            TRANSCRIPT_HINT,
        )


def parse_words(
    sample_id: str, transcript: Any, T: int, strict: bool = False
) -> tuple[WordSpan, ...]:
    """Words of an official-schema output.json; every chunk is a word (ruling 15). The unified
    rules themselves are order-free (ruling 6 takes the earliest start) and accept a word that
    ends before it starts; ``strict`` refuses those files, as the scorers' file readers do (see
    the module docstring)."""
    words = []
    for i, (start_s, end_s) in enumerate(transcript_times(sample_id, transcript, strict=strict)):
        start = to_us(start_s)
        _inside(sample_id, start, T, f"word {i} start")
        words.append(WordSpan(start, start if end_s is None else to_us(end_s)))
    return tuple(words)


def _first_timestamp(sample_id: str, annotation: Any, name: str) -> list:
    try:
        stamp = annotation[0]["timestamp"]
    except (KeyError, IndexError, TypeError) as exc:
        raise SampleError(sample_id, f"{name} has no [0]['timestamp']") from exc
    if not isinstance(stamp, list | tuple) or len(stamp) != 2:
        raise SampleError(sample_id, f"{name} [0]['timestamp'] is {stamp!r}, not [start, end]")
    return list(stamp)


def parse_pauses(sample_id: str, annotation: Any, T: int) -> tuple[Span, ...]:
    """pause.json: one or more {"timestamp": [a, b]}, a <= b in [0, T], sorted, not overlapping."""
    if not isinstance(annotation, list) or not annotation:
        raise SampleError(sample_id, "pause.json lists no pause")
    pauses: list[Span] = []
    for i, item in enumerate(annotation):
        stamp = _first_timestamp(sample_id, [item], f"pause.json entry {i}")
        a = _time(sample_id, stamp[0], f"pause {i} start")
        b = _time(sample_id, stamp[1], f"pause {i} end")
        _inside(sample_id, a, T, f"pause {i} start")
        _inside(sample_id, b, T, f"pause {i} end")
        if a > b:
            raise SampleError(sample_id, f"pause {i} ends before it starts ({a / 1e6} > {b / 1e6})")
        if pauses and a < pauses[-1][1]:
            raise SampleError(
                sample_id, f"pause {i} starts before pause {i - 1} ends (unsorted or overlapping)"
            )
        pauses.append((a, b))
    return tuple(pauses)


def parse_turn_end(sample_id: str, annotation: Any, T: int) -> int:
    """E = turn_taking.json[0].timestamp[0], inside [0, T]."""
    E = _time(sample_id, _first_timestamp(sample_id, annotation, "turn_taking.json")[0], "E")
    _inside(sample_id, E, T, "E")
    return E


def parse_interrupt(sample_id: str, annotation: Any, T: int) -> tuple[int, int]:
    """(S, R) = interrupt.json[0].timestamp, with 0 <= S <= R <= T."""
    stamp = _first_timestamp(sample_id, annotation, "interrupt.json")
    S = _time(sample_id, stamp[0], "S")
    R = _time(sample_id, stamp[1], "R")
    _inside(sample_id, S, T, "S")
    _inside(sample_id, R, T, "R")
    if S > R:
        raise SampleError(sample_id, f"interrupt.json has S {S / 1e6} after R {R / 1e6}")
    return S, R


def check_words_after(sample_id: str, words: tuple[WordSpan, ...], R: int) -> None:
    """No interruption word starts before R (the transcript was cut at R)."""
    for i, word in enumerate(words):
        if word.start < R:
            raise SampleError(
                sample_id,
                f"word {i} starts at {word.start / 1e6} s, before R {R / 1e6} s",
                "the transcript was not cut at R; rerun the asr phase",
            )


def parse_segments(sample_id: str, segments: list[tuple[float, float]], T: int) -> tuple[Span, ...]:
    """VAD segments in microseconds (ruling 14): sorted, non-overlapping (touching is fine)."""
    out: list[Span] = []
    for i, (start, end) in enumerate(sorted(segments)):
        s = _time(sample_id, start, f"VAD segment {i} start")
        e = _time(sample_id, end, f"VAD segment {i} end")
        if e < s:
            raise SampleError(sample_id, f"VAD segment {i} ends before it starts")
        if out and s < out[-1][1]:
            raise SampleError(sample_id, f"VAD segments {i - 1} and {i} overlap")
        out.append((s, e))
    return tuple(out)
