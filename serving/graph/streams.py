"""The stream vocabulary of the session graph (the guide's "Stream vocabulary" table).

Every chunk a node sends carries one format, a typed payload, the reply turn it belongs to
(``None`` for input audio and other chunks outside any reply) and a time on the input
timeline where one applies.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

PCM16_RATE = 16000
PCM_F32_RATE = 24000

# format -> modality
FORMATS: dict[str, str] = {
    "pcm16": "audio",  # 16 kHz mono signed 16-bit PCM
    "pcm_f32le": "audio",  # 24 kHz mono float32 PCM
    "image_frame": "image",
    "transcript": "transcript",
    "messages": "text",
    "text_delta": "text",
    "text": "text",  # the running text of a streaming ASR stage
    "tool_call": "tool",
    "tool_response": "tool",
    "session": "control",
}

# Control types sent into a session by the client, and those a session emits.
CONTROLS_IN = ("commit", "configure", "truncate", "interrupt", "clear", "item", "respond")
CONTROLS_OUT = (
    "speech.started",
    "speech.stopped",
    "speech.pausing",
    "speech.resumed",
    "reply.prefetch",
    "speech.prefetch",
    "turn.queued",
    "turn.started",
    "turn.done",
    "turn.empty",
    "turn.interrupted",
    "reply.heard",
    "reply.chunk",
    "reply.progress",
    "reply.delivered",
    "configured",
    "interrupt",
)
# Controls about an interruption pass the fence of their (interrupted) turn.
PASS_FENCE = frozenset(
    {"interrupt", "turn.interrupted", "reply.delivered", "truncate", "reply.heard"}
)


@dataclass(frozen=True)
class Pcm16:
    data: bytes  # 16 kHz mono little-endian int16
    # The float32 samples ``data`` was quantized from, where its sender had them (the native
    # session's resampled input): a reader working on floats takes these, so the edge loses no
    # precision. None: decode ``data``.
    samples: np.ndarray | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class PcmF32:
    samples: np.ndarray  # float32 mono
    rate: int = PCM_F32_RATE


@dataclass(frozen=True)
class ImageFrame:
    data: bytes
    mime: str = "image/jpeg"


@dataclass(frozen=True)
class Transcript:
    text: str
    is_final: bool = True
    language: str | None = None


@dataclass(frozen=True)
class Message:
    role: str
    content: str


@dataclass(frozen=True)
class Messages:
    messages: tuple[Message, ...]
    language: str | None = None  # the language the recognizer last heard in an answered turn


@dataclass(frozen=True)
class TextDelta:
    text: str
    language: str | None = None  # carried from the turn's messages, for the speech node


@dataclass(frozen=True)
class Text:
    text: str


@dataclass(frozen=True)
class ToolCall:
    calls: tuple[dict[str, Any], ...]


@dataclass(frozen=True)
class ToolResponse:
    responses: tuple[dict[str, Any], ...]


@dataclass(frozen=True)
class Control:
    """A ``session`` payload: ``type`` is one of CONTROLS_IN / CONTROLS_OUT."""

    type: str
    data: dict[str, Any] = field(default_factory=dict)


PAYLOAD_TYPES: dict[str, type] = {
    "pcm16": Pcm16,
    "pcm_f32le": PcmF32,
    "image_frame": ImageFrame,
    "transcript": Transcript,
    "messages": Messages,
    "text_delta": TextDelta,
    "text": Text,
    "tool_call": ToolCall,
    "tool_response": ToolResponse,
    "session": Control,
}


@dataclass(frozen=True)
class Chunk:
    """One unit on an edge. ``source`` is filled in by the runtime (the emitting node or
    'input')."""

    format: str
    payload: Any
    turn: int | None = None
    t_ms: int | None = None
    source: str = ""

    def __post_init__(self) -> None:
        expected = PAYLOAD_TYPES.get(self.format)
        if expected is None:
            raise ValueError(f"unknown stream format {self.format!r}; formats: {sorted(FORMATS)}")
        if not isinstance(self.payload, expected):
            raise TypeError(
                f"a {self.format} chunk carries {expected.__name__}, not "
                f"{type(self.payload).__name__}"
            )

    @property
    def control(self) -> str | None:
        """The control type of a ``session`` chunk, else None."""
        return self.payload.type if self.format == "session" else None

    @property
    def event(self) -> str:
        """What a control edge matches: the control type of a session chunk, else the format."""
        return self.control or self.format


def control(type_: str, turn: int | None = None, t_ms: int | None = None, **data: Any) -> Chunk:
    """A ``session`` chunk."""
    return Chunk("session", Control(type_, dict(data)), turn=turn, t_ms=t_ms)
