"""Simulated playout of received audio: the one rule the export window and the listening cuts share.

Rule (docs/formats.md, "Export"): received audio plays first-in first-out from its receipt
time: a chunk starts at max(receipt time, end of the previous chunk), so initial delay, gaps and
queueing stay in. The dialect's cut rules (``Dialect.cuts``) name the received events that drop
queued audio: for the turn-based and native dialects a ``response.done`` with status
``cancelled`` drops that response's audio not yet played at its receipt time; for the legacy and
OpenAI dialects an ``output_audio_buffer.cleared`` drops the queued audio (of its response_id,
else all), and so does an ``input_audio_buffer.speech_started`` unless the session set
``interrupt_response: false``. Each drop that removes queued audio is a barge-in cut.

- ``playout_window``: the observation window [0, T]: audio still queued at T is cut and the
  rest of the window is silence; built at the output rate, resampled once (soxr HQ) and fixed to
  exactly the input's 16 kHz sample count.
- ``played_replies``: per response, the audio that played, back to back (late-arrival gaps left
  out), with no window end: a reply stops only where a cut dropped it (spec "Listening quality").
- ``audio_delta``: which received trace events are audio under a profile, with receipt time,
  bytes and response id; the playout inputs and the serving metrics' replies both read it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from fdb.audio import pcm16_to_float, resample
from fdb.dialects import ALL, Dialect
from fdb.session_records import TraceEvent

Delta = tuple[float, bytes, str | None]  # (receipt time s, PCM16 bytes, response id)
Cancellation = tuple[float, str | None]  # (receipt time s, response id, or ALL)


class PlayoutWindow(NamedTuple):
    samples: np.ndarray  # float32 mono at out_rate, exactly n_samples long
    barge_in_cuts: int


class Played(NamedTuple):
    """Where one delta started playing (samples at the output rate on the trace clock; None when
    none of it played) and how many of its samples played."""

    start: int | None
    samples: int
    dropped: bool  # a cut dropped some of it


class Playout(NamedTuple):
    played: list[Played]  # one per delta, in the order given
    barge_in_cuts: int


class _Player:
    """FIFO player on an integer sample clock at the output rate; ``end`` caps it (None: never)."""

    def __init__(self, sizes: Sequence[int], end: int | None):
        self.sizes, self.end = sizes, end
        self.start: list[int | None] = [None] * len(sizes)
        self.done = [0] * len(sizes)
        self.dropped = [False] * len(sizes)
        self.cursor: int | None = None
        self.queue: deque[tuple[int, str | None]] = deque()  # (delta index, response id)

    def advance(self, until: int) -> None:
        """Play queued audio up to sample ``until`` (never past ``end``)."""
        until = until if self.end is None else min(until, self.end)
        if self.cursor is None:
            self.cursor = until
        while self.cursor < until and self.queue:
            k = self.queue[0][0]
            if self.start[k] is None:
                self.start[k] = self.cursor
            n = min(self.sizes[k] - self.done[k], until - self.cursor)
            self.done[k] += n
            self.cursor += n
            if self.done[k] == self.sizes[k]:
                self.queue.popleft()
        self.cursor = max(self.cursor, until)

    def drain(self) -> None:
        if self.end is not None:
            self.advance(self.end)
        elif self.cursor is not None:
            self.advance(self.cursor + sum(self.sizes[k] - self.done[k] for k, _ in self.queue))

    def drop(self, response_id: str | None) -> bool:
        """Drop the response's audio not yet played; True when any was dropped."""
        gone = [k for k, rid in self.queue if response_id == ALL or rid == response_id]
        for k in gone:
            self.dropped[k] = True
        self.queue = deque(item for item in self.queue if item[0] not in gone)
        return bool(gone)


def simulate_playout(
    deltas: Sequence[Delta],
    cancellations: Sequence[Cancellation],
    output_rate: int,
    end: int | None = None,
) -> Playout:
    """FIFO playout of ``deltas`` (receipt order) under ``cancellations``, up to sample ``end``
    (None: until every kept sample played). At equal times a delta is handled before a cut."""
    player = _Player([len(pcm) // 2 for _, pcm, _ in deltas], end)
    timeline = sorted(
        [(t, 0, k) for k, (t, _, _) in enumerate(deltas)]
        + [(t, 1, k) for k, (t, _) in enumerate(cancellations)]
    )
    cuts = 0
    for t, kind, k in timeline:
        at = round(t * output_rate)
        if end is not None and at >= end:
            break
        player.advance(at)
        if kind == 0:
            if player.sizes[k]:
                player.queue.append((k, deltas[k][2]))
        elif player.drop(cancellations[k][1]):
            cuts += 1
    player.drain()
    played = [
        Played(s, d, x) for s, d, x in zip(player.start, player.done, player.dropped, strict=True)
    ]
    return Playout(played, cuts)


def playout_window(
    deltas: Sequence[Delta],
    cancellations: Sequence[Cancellation],
    output_rate: int,
    T_s: float,
    out_rate: int = 16000,
    n_samples: int | None = None,
) -> PlayoutWindow:
    """The window [0, T] at ``out_rate`` with ``n_samples`` samples (default round(T * out_rate)).

    ``deltas`` are in receipt order; at equal times a delta is handled before a cancellation.
    """
    if n_samples is None:
        n_samples = round(T_s * out_rate)
    length = int(np.ceil(n_samples * output_rate / out_rate))
    playout = simulate_playout(deltas, cancellations, output_rate, length)
    native = np.zeros(length, dtype=np.float32)
    for (_, pcm, _), played in zip(deltas, playout.played, strict=True):
        if played.start is None or not played.samples:
            continue
        audio = pcm16_to_float(pcm)[: played.samples]
        skip = max(0, -played.start)
        native[played.start + skip : played.start + len(audio)] = audio[skip:]
    window = resample(native, output_rate, out_rate)
    return PlayoutWindow(_fit(window, n_samples), playout.barge_in_cuts)


@dataclass
class ReplyAudio:
    """One response's played audio at the output rate: its deltas' played parts back to back."""

    response_id: str | None
    parts: list[bytes] = field(default_factory=list)
    deltas: int = 0
    cut: bool = False  # a barge-in cut dropped some of its audio

    def pcm(self) -> bytes:
        return b"".join(self.parts)


def played_replies(
    deltas: Sequence[Delta],
    cancellations: Sequence[Cancellation],
    output_rate: int,
) -> dict[str | None, ReplyAudio]:
    """Each response's played audio (late-arrival gaps left out), in order of its first delta."""
    replies: dict[str | None, ReplyAudio] = {}
    for (_, pcm, rid), played in zip(
        deltas, simulate_playout(deltas, cancellations, output_rate).played, strict=True
    ):
        reply = replies.setdefault(rid, ReplyAudio(rid))
        reply.deltas += 1
        reply.cut = reply.cut or played.dropped
        if played.samples:
            reply.parts.append(pcm[: 2 * played.samples])
    return replies


def _fit(samples: np.ndarray, n: int) -> np.ndarray:
    out = np.zeros(n, dtype=np.float32)
    m = min(n, len(samples))
    out[:m] = samples[:m]
    return out


class TraceDelta(NamedTuple):
    """A received audio delta as the trace records it: receipt time (s), where its PCM16 bytes
    lie in output.pcm, and its response id."""

    t: float
    offset: int
    size: int  # bytes
    response_id: str | None


def audio_delta(ev: TraceEvent, profile: Dialect) -> TraceDelta | None:
    """The received audio delta ``ev`` is under the dialect's audio events, else None."""
    if ev.dir != "recv" or ev.type not in profile.events.audio_delta:
        return None
    return TraceDelta(
        ev.t,
        int(ev.event.get("audio_offset", 0)),
        int(ev.event.get("audio_bytes", 0)),
        ev.event.get("response_id"),
    )


def trace_playout_inputs(
    trace: Sequence[TraceEvent],
    output: bytes,
    profile: Dialect,
    turn_detection: dict | None = None,
) -> tuple[list[Delta], list[Cancellation]]:
    """Audio deltas (sliced from output.pcm by their trace offsets) and the cuts of playout under
    the dialect's cut rules (``turn_detection`` is the session's request: its interrupt_response
    decides whether a rule that obeys it cuts). Raises ValueError when output.pcm is shorter than
    the trace says."""
    interrupts = profile.interrupts(turn_detection)
    rules = {r.event: r for r in profile.cuts.rules if interrupts or not r.obeys_interrupt}
    deltas: list[Delta] = []
    cancels: list[Cancellation] = []
    for ev in trace:
        if ev.dir != "recv":
            continue
        if (delta := audio_delta(ev, profile)) is not None:
            end = delta.offset + delta.size
            if end > len(output):
                raise ValueError(f"output.pcm holds {len(output)} bytes, the trace needs {end}")
            deltas.append((delta.t, output[delta.offset : end], delta.response_id))
        elif ev.type in rules:
            dropped = rules[ev.type].cut(ev.event)
            if dropped is not False:
                cancels.append((ev.t, dropped))
    return deltas, cancels
