"""The official Full-Duplex-Bench v1.0 takeover rule (``fdb-official-scoring.md`` §3.1), shared by
the official-rules scorer (``scorers.v10_official``) and the interruption relevance judge
(``judges.relevance``, which rates takeover samples only).

takeover(W), W the output.json chunks as (start, end) in file order: 0 for an empty transcript;
otherwise 1 iff the span e(W[-1]) - s(W[0]) is at least 1 s or there are more than 3 words. A
null last end falls back to its start (the pause-handling guard, applied to every task).
"""

from __future__ import annotations

from collections.abc import Sequence

from fdb.records import OfficialTranscript

TURN_DURATION_S = 1.0
TURN_WORDS = 3


def took_over(words: int, first_start: float, last_start: float, last_end: float | None) -> int:
    """The rule on a non-empty transcript: 1 iff span >= 1 s or more than 3 words."""
    span = (last_start if last_end is None else last_end) - first_start
    return 0 if span < TURN_DURATION_S and words <= TURN_WORDS else 1


def official_takeover(words: Sequence[tuple[float, float | None]]) -> int:
    """§3.1 on checked (start, end) chunks; 0 when empty."""
    if not words:
        return 0
    last_start, last_end = words[-1]
    return took_over(len(words), words[0][0], last_start, last_end)


def transcript_takeover(transcript: OfficialTranscript) -> int:
    """§3.1 on an output.json as read: its first and last chunks' ``timestamp`` pairs."""
    chunks = transcript.chunks
    if not chunks:
        return 0
    first, last = chunks[0].timestamp, chunks[-1].timestamp
    return took_over(len(chunks), first[0], last[0], last[1])
