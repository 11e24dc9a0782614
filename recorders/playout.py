"""Simulated playout of received audio over the observation window [0, T].

Rule (docs/formats.md, "Export"): received audio plays first-in first-out from its receipt
time: a chunk starts at max(receipt time, end of the previous chunk), so initial delay, gaps and
queueing stay in. Audio still queued at T is cut and the rest of the window is silence. For the
turn-based and native profiles, a ``response.done`` with status ``cancelled`` drops that
response's audio not yet played at its receipt time; for the legacy and OpenAI profiles an
``output_audio_buffer.cleared`` drops the queued audio (of its response_id, else all), and so
does an ``input_audio_buffer.speech_started`` unless the session set ``interrupt_response:
false``. Each drop that removes audio inside the window is a barge-in cut. The window is built at the output rate, resampled once (soxr HQ) and fixed to
exactly the input's 16 kHz sample count.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from fdb.audio import pcm16_to_float, resample
from fdb.profiles import Profile
from fdb.session_records import TraceEvent

Delta = tuple[float, bytes, str | None]  # (receipt time s, PCM16 bytes, response id)
Cancellation = tuple[float, str | None]  # (receipt time s, response id, or ALL)
ALL = "*"  # a cut that drops every queued response


class PlayoutWindow(NamedTuple):
    samples: np.ndarray  # float32 mono at out_rate, exactly n_samples long
    barge_in_cuts: int


class _Player:
    """FIFO player on an integer sample clock at the output rate."""

    def __init__(self, origin: int, length: int):
        self.origin = origin  # sample index of buffer[0] on the window clock (<= 0)
        self.buffer = np.zeros(length - origin, dtype=np.float32)
        self.end = length  # window end T in samples
        self.cursor = origin
        self.queue: deque[list] = deque()  # [response id, remaining float32 samples]

    def advance(self, until: int) -> None:
        """Play queued audio up to sample ``until`` (never past T)."""
        until = min(until, self.end)
        while self.cursor < until and self.queue:
            head = self.queue[0]
            n = min(len(head[1]), until - self.cursor)
            start = self.cursor - self.origin
            self.buffer[start : start + n] = head[1][:n]
            head[1] = head[1][n:]
            self.cursor += n
            if len(head[1]) == 0:
                self.queue.popleft()
        self.cursor = max(self.cursor, until)

    def drop(self, response_id: str | None) -> bool:
        """Drop the response's audio not yet played; True when any was dropped."""
        kept = deque(item for item in self.queue if response_id != ALL and item[0] != response_id)
        dropped = len(kept) != len(self.queue)
        self.queue = kept
        return dropped


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
    timeline = sorted(
        [(t, 0, k) for k, (t, _, _) in enumerate(deltas)]
        + [(t, 1, k) for k, (t, _) in enumerate(cancellations)]
    )
    first = min((round(t * output_rate) for t, _, _ in timeline), default=0)
    player = _Player(min(0, first), length)
    cuts = 0
    for t, kind, k in timeline:
        at = round(t * output_rate)
        if at >= length:
            break
        player.advance(at)
        if kind == 0:
            _, pcm, rid = deltas[k]
            if pcm:
                player.queue.append([rid, pcm16_to_float(pcm)])
        elif player.drop(cancellations[k][1]):
            cuts += 1
    player.advance(length)
    native = player.buffer[-player.origin :] if player.origin < 0 else player.buffer
    window = resample(native, output_rate, out_rate)
    return PlayoutWindow(_fit(window, n_samples), cuts)


def _fit(samples: np.ndarray, n: int) -> np.ndarray:
    out = np.zeros(n, dtype=np.float32)
    m = min(n, len(samples))
    out[:m] = samples[:m]
    return out


def trace_playout_inputs(
    trace: Sequence[TraceEvent], output: bytes, profile: Profile, turn_detection: dict | None = None,
) -> tuple[list[Delta], list[Cancellation]]:
    """Audio deltas (sliced from output.pcm by their trace offsets) and the cuts of playout under
    ``profile`` (``turn_detection`` is the session's request: its interrupt_response decides
    whether speech_started cuts). Raises ValueError when output.pcm is shorter than the trace
    says."""
    speech_cuts = profile.playout_cut == "cleared_or_speech_started" and profile.interrupts(turn_detection)
    deltas: list[Delta] = []
    cancels: list[Cancellation] = []
    for ev in trace:
        if ev.dir != "recv":
            continue
        if ev.type in profile.audio_delta_events:
            offset, size = int(ev.event.get("audio_offset", 0)), int(ev.event.get("audio_bytes", 0))
            if offset + size > len(output):
                raise ValueError(f"output.pcm holds {len(output)} bytes, the trace needs {offset + size}")
            deltas.append((ev.t, output[offset : offset + size], ev.event.get("response_id")))
        elif profile.playout_cut == "cleared_or_speech_started":
            if ev.type == "output_audio_buffer.cleared":
                cancels.append((ev.t, ev.event.get("response_id") or ALL))
            elif ev.type == "input_audio_buffer.speech_started" and speech_cuts:
                cancels.append((ev.t, ALL))
        elif ev.type == "response.done" and profile.playout_cut == "cancelled_response":
            response = ev.event.get("response") or {}
            if response.get("status") == "cancelled":
                cancels.append((ev.t, response.get("id")))
    return deltas, cancels
