"""The input side of a session: PCM decoding, 200 ms units and the input timeline.

The input is one 16 kHz mono stream for the whole session. It is cut into units of 200 ms
(3,200 samples) counted from the first sample: unit ``k`` covers [k·200, (k+1)·200) ms. A unit
is reported with ``sglang.unit.done`` once the session has taken it into the session graph's
input (a native node reports its own units once it has processed each); at the input's end the
partial last unit is flushed with its real duration (tail policy ``flush``: no padding), so the
number of units is ceil(input / 200 ms) and their durations sum to the input length.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

import numpy as np

from fdb.audio import pcm16_to_float
from serving.realtime.protocol import ProtocolError

INPUT_RATE = 16000
UNIT_MS = 200
UNIT_SAMPLES = INPUT_RATE * UNIT_MS // 1000
SAMPLES_PER_MS = INPUT_RATE // 1000


def samples_to_ms(samples: int) -> int | float:
    """Milliseconds of ``samples`` at 16 kHz: an int when whole, else exact to 1/16 ms."""
    if samples % SAMPLES_PER_MS == 0:
        return samples // SAMPLES_PER_MS
    return samples / SAMPLES_PER_MS


def decode_pcm16(audio: str, max_bytes: int, event_id: str | None) -> np.ndarray:
    """Base64 PCM16 → float32 samples; ProtocolError for bad base64, odd length or size."""
    try:
        raw = base64.b64decode(audio, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ProtocolError(
            "invalid_audio", "audio is not valid base64", param="audio", event_id=event_id
        ) from exc
    if len(raw) % 2:
        raise ProtocolError(
            "invalid_audio",
            f"audio has {len(raw)} bytes; PCM16 needs an even count",
            param="audio",
            event_id=event_id,
        )
    if len(raw) > max_bytes:
        raise ProtocolError(
            "input_too_large",
            f"audio has {len(raw)} bytes; the limit per append is {max_bytes}",
            param="audio",
            event_id=event_id,
        )
    return pcm16_to_float(raw)


@dataclass(frozen=True)
class Unit:
    """One 200 ms unit (shorter only when it is the flushed tail)."""

    index: int
    start: int  # first sample on the input timeline
    samples: np.ndarray

    @property
    def unit_id(self) -> str:
        return f"unit_{self.index}"

    @property
    def t_start_ms(self) -> int | float:
        return samples_to_ms(self.start)

    @property
    def duration_ms(self) -> int | float:
        return samples_to_ms(len(self.samples))

    @property
    def end(self) -> int:
        return self.start + len(self.samples)

    def padded(self, size: int) -> tuple[np.ndarray, int]:
        """Tail policy ``pad``: the samples filled up to ``size`` with silence, and how many
        samples of silence that took (0 for a whole unit)."""
        missing = max(size - len(self.samples), 0)
        if not missing:
            return self.samples, 0
        return np.concatenate([self.samples, np.zeros(missing, dtype=np.float32)]), missing


class UnitCutter:
    """Cuts a stream of arbitrary chunks into consecutive units (200 ms unless told)."""

    def __init__(self, unit_samples: int = UNIT_SAMPLES) -> None:
        self.unit_samples = unit_samples
        self._pending: list[np.ndarray] = []
        self._pending_len = 0
        self._next_index = 0

    def _take(self, count: int) -> np.ndarray:
        joined = np.concatenate(self._pending) if len(self._pending) > 1 else self._pending[0]
        head, rest = joined[:count], joined[count:]
        self._pending = [rest] if len(rest) else []
        self._pending_len = len(rest)
        return head

    def _unit(self, samples: np.ndarray) -> Unit:
        unit = Unit(self._next_index, self._next_index * self.unit_samples, samples)
        self._next_index += 1
        return unit

    def push(self, samples: np.ndarray) -> list[Unit]:
        if len(samples):
            self._pending.append(samples)
            self._pending_len += len(samples)
        units = []
        while self._pending_len >= self.unit_samples:
            units.append(self._unit(self._take(self.unit_samples)))
        return units

    def flush(self) -> Unit | None:
        """The partial last unit, if any samples are left."""
        if not self._pending_len:
            return None
        return self._unit(self._take(self._pending_len))


class InputTimeline:
    """The recent input audio, addressable by sample index on the session timeline.

    Keeps what an utterance may still need: everything from ``keep_from`` on (the open
    utterance's start, or the prefix-padding window before the present).
    """

    def __init__(self) -> None:
        self._base = 0  # sample index of self._buffer[0]
        self._chunks: list[np.ndarray] = []
        self._buffer = np.zeros(0, dtype=np.float32)
        self.end = 0  # samples received so far

    def append(self, samples: np.ndarray) -> None:
        self._chunks.append(np.asarray(samples, dtype=np.float32))
        self.end += len(samples)

    def _compact(self) -> None:
        if self._chunks:
            self._buffer = np.concatenate([self._buffer, *self._chunks])
            self._chunks = []

    def slice(self, start: int, stop: int) -> np.ndarray:
        """Samples [start, stop) clipped to what is still held."""
        self._compact()
        lo = max(start, self._base) - self._base
        hi = max(min(stop, self.end), self._base) - self._base
        return self._buffer[lo:hi].copy()

    def trim(self, keep_from: int) -> None:
        """Forget samples before ``keep_from``."""
        self._compact()
        drop = min(max(0, keep_from - self._base), len(self._buffer))
        if drop:
            self._buffer = self._buffer[drop:]
            self._base += drop
