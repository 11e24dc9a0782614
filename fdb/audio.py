"""Audio buffers and WAV I/O. Internally audio is mono float32 in [-1, 1] with its sample rate."""

from __future__ import annotations

import io
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

from fdb.errors import SampleError
from fdb.io import atomic_write_bytes

PCM16_MAX = 32767.0
TRUNCATED_HINT = (
    "the file is cut short (an interrupted copy or download?): replace it with the complete file"
)


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

    return soxr.resample(samples, src_rate, dst_rate, quality="HQ").astype(np.float32)


def float_to_pcm16(samples: np.ndarray) -> bytes:
    clipped = np.clip(np.asarray(samples, dtype=np.float32), -1.0, 1.0)
    return np.round(clipped * PCM16_MAX).astype("<i2").tobytes()


def pcm16_to_float(data: bytes) -> np.ndarray:
    if len(data) % 2:
        data = data[:-1]
    return np.frombuffer(data, dtype="<i2").astype(np.float32) / PCM16_MAX


def riff_data_frames(path: str | os.PathLike) -> tuple[int, int, int] | None:
    """(frames the data chunk's header declares, frames the file holds, rate) of a RIFF/WAVE
    file; None when it is no RIFF/WAVE file, has no fmt chunk before its data chunk, or leaves
    the data length open (0 or 0xFFFFFFFF, as streaming writers do). Reads the chunk headers
    only."""
    path = Path(path)
    size = path.stat().st_size
    with path.open("rb") as handle:
        head = handle.read(12)
        if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
            return None
        block_align = rate = 0
        pos = 12
        while pos + 8 <= size:
            handle.seek(pos)
            chunk, length = struct.unpack("<4sI", handle.read(8))
            if chunk == b"fmt " and length >= 14:
                fmt = handle.read(14)
                rate, block_align = (
                    struct.unpack("<I", fmt[4:8])[0],
                    struct.unpack("<H", fmt[12:14])[0],
                )
            elif chunk == b"data":
                if length in (0, 0xFFFFFFFF) or not block_align or not rate:
                    return None
                held = min(length, size - pos - 8)
                return length // block_align, held // block_align, rate
            pos += 8 + length + (length & 1)
    return None


def check_complete(path: str | os.PathLike, sample: str, hint: str = TRUNCATED_HINT) -> None:
    """Refuse a WAV whose data chunk is shorter than its header says (libsndfile would read
    the shorter file without a word)."""
    frames = riff_data_frames(path)
    if frames is not None and frames[1] < frames[0]:
        declared, held, rate = frames
        raise SampleError(
            sample,
            f"truncated WAV: its header declares {declared} frames ({declared / rate:.3f} s) "
            f"but the file holds {held} ({held / rate:.3f} s)",
            hint,
            str(path),
        )


def read_wav(path: str | os.PathLike, sample: str | None = None) -> Audio:
    """Read a WAV (any rate, any channel count: channels are averaged) as mono float32.

    A missing, empty, truncated or corrupt file, or one holding NaN or infinite samples (a
    float WAV), raises SampleError naming the sample and the file.
    """
    path = Path(path)
    label = sample or path.parent.name
    if not path.exists():
        raise SampleError(
            label, "audio file is missing", "check the dataset or recording", str(path)
        )
    try:
        check_complete(path, label)
        data, rate = sf.read(str(path), dtype="float32", always_2d=True)
    except SampleError:
        raise
    except Exception as exc:  # soundfile raises LibsndfileError / RuntimeError variants
        raise SampleError(
            label, f"unreadable WAV ({exc})", "replace the file with a valid PCM WAV", str(path)
        ) from exc
    if data.shape[0] == 0:
        raise SampleError(label, "WAV holds no samples", "replace the file", str(path))
    if not np.isfinite(data).all():
        raise SampleError(
            label,
            "WAV holds NaN or infinite samples",
            "replace the file with a valid PCM WAV",
            str(path),
        )
    mono = data.mean(axis=1) if data.shape[1] > 1 else data[:, 0]
    return Audio(np.ascontiguousarray(mono, dtype=np.float32), int(rate))


def wav_bytes(samples: np.ndarray, rate: int) -> bytes:
    """PCM16 mono WAV bytes; deterministic (no timestamps in the header)."""
    buf = io.BytesIO()
    pcm = np.frombuffer(float_to_pcm16(samples), dtype="<i2")
    sf.write(buf, pcm, rate, subtype="PCM_16", format="WAV")
    return buf.getvalue()


def write_wav(path: str | os.PathLike, samples: np.ndarray, rate: int) -> Path:
    """Atomically write mono PCM16."""
    return atomic_write_bytes(path, wav_bytes(samples, rate))


def write_pcm16_wav(path: str | os.PathLike, pcm: bytes, rate: int) -> Path:
    return write_wav(path, pcm16_to_float(pcm), rate)
