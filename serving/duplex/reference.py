"""``sglang.voice`` and ``sglang.reference_audio`` of a native session (the Guide's "Session
settings" and "Native Full Duplex: PersonaPlex").

- ``voice`` must be one of the voices ``/v1/realtime/capabilities`` lists; any other is
  ``unsupported_voice``, naming the list.
- ``reference_audio`` is ``{"media_type": "audio/wav", "data": "<base64>"}``, a PCM16 WAV of at
  most 30 s and 1 MiB; anything else is ``invalid_reference_audio``. The bundled baseline cannot
  clone a voice (``supports_reference_audio`` is false): it checks the recording and acknowledges
  it in session.updated (sha256, bytes, duration, ``applied: false``), and keeps its own voice.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from fdb.io import sha256_bytes
from fdb.session_settings import MAX_REFERENCE_BYTES, check_reference_wav
from serving.realtime.protocol import ProtocolError, shown

VOICE_PARAM = "session.sglang.voice"
REFERENCE_PARAM = "session.sglang.reference_audio"


def check_voice(voice: Any, voices: list[str], event_id: str | None) -> str:
    if not isinstance(voice, str) or voice not in voices:
        raise ProtocolError(
            "unsupported_voice",
            f"voice {shown(voice)} is not one of the voices in /v1/realtime/capabilities: {voices}",
            param=VOICE_PARAM,
            event_id=event_id,
        )
    return voice


def _refuse(message: str, event_id: str | None) -> ProtocolError:
    return ProtocolError(
        "invalid_reference_audio",
        f"reference_audio {message}; send "
        '{"media_type": "audio/wav", "data": "<base64>"}, a PCM16 WAV of at most 30 s and 1 MiB',
        param=REFERENCE_PARAM,
        event_id=event_id,
    )


def check_reference_audio(raw: dict[str, Any], event_id: str | None) -> dict[str, Any]:
    """The acknowledgement of a valid reference recording; ProtocolError otherwise."""
    if set(raw) != {"media_type", "data"} or raw.get("media_type") != "audio/wav":
        raise _refuse(
            f"has fields {sorted(raw)} and media_type {shown(raw.get('media_type'))}", event_id
        )
    data = raw["data"]
    if not isinstance(data, str) or len(data) > (MAX_REFERENCE_BYTES + 2) // 3 * 4:
        raise _refuse("data is not base64 text within 1 MiB", event_id)
    try:
        wav_bytes = base64.b64decode(data, validate=True)
    except (ValueError, binascii.Error) as exc:
        raise _refuse(f"data is not base64 ({exc})", event_id) from exc
    duration_s, problem = check_reference_wav(wav_bytes)
    if problem is not None:
        raise _refuse(f"is {problem}", event_id)
    return {
        "sha256": sha256_bytes(wav_bytes),
        "bytes": len(wav_bytes),
        "duration_ms": round(duration_s * 1000, 3),
        "applied": False,
    }
