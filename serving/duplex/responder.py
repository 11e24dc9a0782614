"""Reply audio for the native full-duplex engine: Piper's speech as 24 kHz PCM16. The turn-based
sessions synthesize in the session graph (``serving.graph.nodes``)."""

from __future__ import annotations

import numpy as np

from fdb.audio import float_to_pcm16, resample
from serving.realtime.delivery import OUTPUT_RATE


def synthesize_pcm24(tts, text: str) -> bytes:
    """Blocking: ``text`` as 24 kHz mono PCM16 (Piper renders 22.05 kHz float)."""
    samples = tts.synthesize(text)
    return float_to_pcm16(resample(np.asarray(samples, dtype=np.float32), tts.rate, OUTPUT_RATE))
