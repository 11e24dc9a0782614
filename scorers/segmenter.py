"""The VAD protocol the scorers use, so tests can inject a segment source.

``fdb.models.vad.SileroVad`` satisfies it; any object with an ``identity`` and a ``segments``
method returning (start_s, end_s) pairs computed as sample index / 16000 does too.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from fdb.models import BackendIdentity
from fdb.models.vad import VadSettings


class SpeechSegmenter(Protocol):
    identity: BackendIdentity

    def segments(self, samples: np.ndarray, settings: VadSettings = ...) -> list[tuple[float, float]]:
        """Speech segments of 16 kHz mono float32 audio, (start_s, end_s) = samples / 16000."""
