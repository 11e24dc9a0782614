"""Audio buffers and WAV I/O. Internally audio is mono float32 in [-1, 1] with its sample rate."""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fdb.errors import SampleError
from fdb.io import atomic_write_bytes

PCM16_MAX = 32767.0


@dataclass(frozen=True)
class Audio:
    """Mono float32 samples and their rate."""

    samples: np.ndarray
    rate: int

    @property
    def duration_s(self) -> float:
        return len(self.samples) / float(self.rate)

    def resample(self, rate: int) -> Audio:
        return Audio(resample(self.samples, self.rate, rate), rate)

    def to_pcm16(self) -> bytes:
        return float_to_pcm16(self.samples)


def resample(samples: np.ndarray, src_rate: int, dst_rate: int) -> np.ndarray:
    """High-quality resampling (soxr, HQ). Returns float32."""
    samples = np.asarray(samples, dtype=np.float32)
    if src_rate == dst_rate or len(samples) == 0:
        return samples.copy()
    import soxr

    return soxr.resample(samples, src_rate, dst_rate, quality="HQ").astype(np.float32)


def float_to_pcm16(samples: np.ndarray) -> bytes:
    clipped = np.clip(np.asarray(samples, dtype=np.float32), -1.0, 1.0)
    return np.round(clipped * PCM16_MAX).astype("<i2").tobytes()


def pcm16_to_float(data: bytes) -> np.ndarray:
    if len(data) % 2:
        data = data[:-1]
    return np.frombuffer(data, dtype="<i2").astype(np.float32) / PCM16_MAX


def read_wav(path: str | os.PathLike, sample: str | None = None) -> Audio:
    """Read a WAV (any rate, any channel count: channels are averaged) as mono float32.

    A missing, empty or corrupt file raises SampleError naming the sample and the file.
    """
    import soundfile as sf

    path = Path(path)
    label = sample or path.parent.name
    if not path.exists():
        raise SampleError(label, "audio file is missing", "check the dataset or recording", str(path))
    try:
        data, rate = sf.read(str(path), dtype="float32", always_2d=True)
    except Exception as exc:  # soundfile raises LibsndfileError / RuntimeError variants
        raise SampleError(
            label, f"unreadable WAV ({exc})", "replace the file with a valid PCM WAV", str(path)
        ) from exc
    if data.shape[0] == 0:
        raise SampleError(label, "WAV holds no samples", "replace the file", str(path))
    mono = data.mean(axis=1) if data.shape[1] > 1 else data[:, 0]
    return Audio(np.ascontiguousarray(mono, dtype=np.float32), int(rate))


def wav_bytes(samples: np.ndarray, rate: int) -> bytes:
    """PCM16 mono WAV bytes; deterministic (no timestamps in the header)."""
    import soundfile as sf

    buf = io.BytesIO()
    pcm = np.frombuffer(float_to_pcm16(samples), dtype="<i2")
    sf.write(buf, pcm, rate, subtype="PCM_16", format="WAV")
    return buf.getvalue()


def write_wav(path: str | os.PathLike, samples: np.ndarray, rate: int) -> Path:
    """Atomically write mono PCM16."""
    return atomic_write_bytes(path, wav_bytes(samples, rate))


def write_pcm16_wav(path: str | os.PathLike, pcm: bytes, rate: int) -> Path:
    return write_wav(path, pcm16_to_float(pcm), rate)
