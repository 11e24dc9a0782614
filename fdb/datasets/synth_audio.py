"""Audio building blocks of the synthetic datasets: measured speech clips and a mixing timeline.

Annotation times are never nominal: each synthesized utterance's speech edges are measured with
a frame-energy threshold, and the timeline reports where those measured edges land.

Speech starts are placed on a 32 ms grid (512 samples, Silero VAD's window at 16 kHz, counted
from the start of the file). Silero then sees every utterance onset at the same phase of its
window, so its view of a given utterance does not depend on where a sample happens to put it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

RATE = 16000
FRAME = 160  # 10 ms at 16 kHz
GRID = 512  # speech starts are multiples of 32 ms (Silero's window)
EDGE_REL_DB = -50.0  # a frame is speech when its RMS is within 50 dB of the clip's loudest frame
EDGE_FLOOR_RMS = 1e-5


def frame_rms(samples: np.ndarray, frame: int = FRAME) -> np.ndarray:
    """RMS of consecutive ``frame``-sample frames (the last partial frame is zero-padded)."""
    count = -(-len(samples) // frame)
    padded = np.zeros(count * frame, dtype=np.float64)
    padded[: len(samples)] = samples
    return np.sqrt((padded.reshape(count, frame) ** 2).mean(axis=1))


def speech_edges(samples: np.ndarray, frame: int = FRAME) -> tuple[int, int]:
    """(first, end) sample index of the frames above the energy threshold, frame-aligned."""
    rms = frame_rms(samples, frame)
    if len(rms) == 0 or rms.max() <= EDGE_FLOOR_RMS:
        raise ValueError("the clip holds no speech above the energy threshold")
    threshold = max(float(rms.max()) * 10 ** (EDGE_REL_DB / 20), EDGE_FLOOR_RMS)
    active = np.flatnonzero(rms > threshold)
    return int(active[0]) * frame, min(int(active[-1] + 1) * frame, len(samples))


@dataclass(frozen=True)
class Clip:
    """One utterance at 16 kHz with its measured speech edges (sample indices in the clip)."""

    text: str
    samples: np.ndarray
    start: int
    end: int

    @classmethod
    def measure(cls, text: str, samples: np.ndarray) -> Clip:
        start, end = speech_edges(samples)
        return cls(text, np.asarray(samples, dtype=np.float32), start, end)

    @property
    def speech_s(self) -> float:
        return (self.end - self.start) / RATE


def on_grid(index: int) -> int:
    """``index`` rounded up to the next multiple of ``GRID`` samples."""
    return -(-int(index) // GRID) * GRID


def seconds(index: int) -> float:
    """A sample index as seconds, rounded to the microsecond (stable JSON)."""
    return round(index / RATE, 6)


class Timeline:
    """A growing mono buffer on which clips are mixed at chosen speech-start positions."""

    def __init__(self) -> None:
        self._buf = np.zeros(0, dtype=np.float32)

    @property
    def length(self) -> int:
        return len(self._buf)

    def pad_to(self, length: int) -> None:
        if length > len(self._buf):
            self._buf = np.concatenate([self._buf, np.zeros(length - len(self._buf), np.float32)])

    def put(self, clip: Clip, speech_start: int, gain: float = 1.0) -> tuple[int, int]:
        """Mix ``clip`` so its measured speech starts at ``speech_start``; returns its edges."""
        offset = speech_start - clip.start
        if offset < 0:
            raise ValueError("a clip would start before the timeline")
        self.pad_to(offset + len(clip.samples))
        self._buf[offset : offset + len(clip.samples)] += clip.samples * np.float32(gain)
        return speech_start, offset + clip.end

    def samples(self, length: int) -> np.ndarray:
        """Exactly ``length`` samples of the mix: zero-padded, or cut (only sub-threshold tails
        of a clip lie past the lengths the generator asks for)."""
        self.pad_to(length)
        return np.clip(self._buf[:length], -1.0, 1.0)


def word_times(text: str, start_s: float, end_s: float) -> list[dict]:
    """Approximate word items spread over a measured phrase span in proportion to word length.

    Used only for the synthetic ``transcription.json``: the phrase edges are measured, the word
    boundaries inside it are an estimate (documented in the dataset README).
    """
    words = text.split()
    weights = np.array([len(w) + 1 for w in words], dtype=np.float64)
    bounds = start_s + (end_s - start_s) * np.concatenate(
        [[0.0], np.cumsum(weights) / weights.sum()]
    )
    return [
        {"text": w, "timestamp": [round(float(bounds[k]), 6), round(float(bounds[k + 1]), 6)]}
        for k, w in enumerate(words)
    ]
