"""The items a session hands a listener-shaped engine (the native full-duplex engine of
``serving.duplex``), in the order the client sent them: the input audio, and the end of input
with the callback that sends ``sglang.input_audio.drained`` once every reply is delivered.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import numpy as np

ASR_TAIL_MS = 200  # silence kept after the last speech frame for the recognizer


@dataclass(frozen=True)
class AudioChunk:
    samples: np.ndarray


@dataclass(frozen=True)
class EndMark:
    on_drained: Callable[[], Awaitable[None]]
