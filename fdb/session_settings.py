"""Session settings a recorder sends in its first session.update (the Guide's "Session settings"
and "Native Full Duplex: PersonaPlex"): the role prompt ``instructions`` and, under ``sglang``,
a named ``voice``, ``sampling`` fields and a ``reference_audio`` voice recording.

``SessionSettings`` is what a run records (run.json ``server.session``): the reference audio by
path, sha256, size and duration, never its bytes. ``sglang_fields()`` builds the wire form, with
the recording as ``{"media_type": "audio/wav", "data": <base64>}``. The client checks what it can
before any session: a PCM16 WAV of at most 30 s and 1 MiB, sampling a JSON object of scalars;
whether the server knows a voice or a sampling field is the server's answer (session.updated or
an error naming the field).
"""

from __future__ import annotations

import base64
import functools
import io
import json
import wave
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from fdb.dialects import get_dialect
from fdb.errors import FdbError
from fdb.io import sha256_bytes

MAX_REFERENCE_BYTES = 1 << 20
MAX_REFERENCE_S = 30.0


class ReferenceAudio(BaseModel):
    model_config = ConfigDict(frozen=True)

    path: str
    sha256: str
    bytes: int
    duration_s: float


class SessionSettings(BaseModel):
    """What the first session.update sets beyond the profile's protocol fields (None: not sent)."""

    model_config = ConfigDict(frozen=True)

    instructions: str | None = None
    voice: str | None = None
    sampling: dict[str, Any] | None = None
    reference_audio: ReferenceAudio | None = None

    @property
    def sends_sglang(self) -> bool:
        return any(v is not None for v in (self.voice, self.sampling, self.reference_audio))

    def sglang_fields(self) -> dict[str, Any]:
        """The ``session.sglang`` fields these settings send (the reference recording read again
        and checked against its recorded sha256 once, not for every session: sessions share one
        event loop, and a read there would hold up the others' paced sends)."""
        return dict(self.sglang_wire)

    @functools.cached_property
    def sglang_wire(self) -> dict[str, Any]:
        fields: dict[str, Any] = {}
        if self.voice is not None:
            fields["voice"] = self.voice
        if self.sampling is not None:
            fields["sampling"] = dict(self.sampling)
        if self.reference_audio is not None:
            data = Path(self.reference_audio.path).read_bytes()
            if sha256_bytes(data) != self.reference_audio.sha256:
                raise FdbError(
                    f"--reference-audio {self.reference_audio.path} changed since the run "
                    "recorded it",
                    "restore the file, or record into a new --run-name",
                )
            fields["reference_audio"] = {
                "media_type": "audio/wav",
                "data": base64.b64encode(data).decode(),
            }
        return fields


def check_reference_wav(data: bytes) -> tuple[float, str | None]:
    """(duration s, None) for a PCM16 WAV of at most 30 s and 1 MiB, else (duration, the problem).
    The one rule of the client's --reference-audio and the bundled server's check."""
    if len(data) > MAX_REFERENCE_BYTES:
        return 0.0, f"{len(data)} bytes, over 1 MiB"
    try:
        with wave.open(io.BytesIO(data), "rb") as wav:
            width, frames, rate = wav.getsampwidth(), wav.getnframes(), wav.getframerate()
    except (EOFError, wave.Error) as exc:
        return 0.0, f"not a WAV ({exc})"
    duration = frames / rate if rate else 0.0
    if width != 2:
        return duration, f"{8 * width}-bit samples, not PCM16"
    if frames == 0 or duration > MAX_REFERENCE_S:
        return duration, f"{duration:.2f} s, not between 0 and 30 s"
    return duration, None


def reference_audio(path: Path) -> ReferenceAudio:
    """Check a --reference-audio file: a PCM16 WAV of at most 30 s and 1 MiB."""
    hint = "pass a mono or stereo PCM16 WAV of at most 30 s and 1 MiB"
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise FdbError(f"--reference-audio {path}: not a readable WAV ({exc})", hint) from exc
    duration, problem = check_reference_wav(data)
    if problem is not None:
        raise FdbError(f"--reference-audio {path}: {problem}", hint)
    return ReferenceAudio(
        path=str(path.resolve()),
        sha256=sha256_bytes(data),
        bytes=len(data),
        duration_s=round(duration, 6),
    )


def parse_sampling(raw: str | None) -> dict[str, Any] | None:
    """--sampling: a JSON object of numbers and booleans, e.g. {"temperature": 0.7, "top_k": 50}."""
    if raw is None:
        return None
    hint = 'pass a JSON object of numbers and booleans, e.g. \'{"temperature": 0.7, "top_k": 50}\''
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise FdbError(f"--sampling is not valid JSON ({exc})", hint) from exc
    if not isinstance(data, dict) or not data:
        raise FdbError("--sampling must be a non-empty JSON object", hint)
    wrong = sorted(k for k, v in data.items() if not isinstance(v, int | float | bool))
    if wrong:
        raise FdbError(f"--sampling fields {', '.join(wrong)} are not numbers or booleans", hint)
    return data


def session_settings(
    profile_name: str,
    instructions: str | None = None,
    voice: str | None = None,
    sampling: str | None = None,
    reference: Path | None = None,
) -> SessionSettings | None:
    """The checked settings of ``fdb generate`` (None when none is given); FdbError naming the
    option when one is malformed or the profile's protocol has no ``sglang`` settings."""
    settings = SessionSettings(
        instructions=instructions,
        voice=voice if voice else None,
        sampling=parse_sampling(sampling),
        reference_audio=reference_audio(reference) if reference is not None else None,
    )
    profile = get_dialect(profile_name)
    if settings.sends_sglang and not profile.client.session_settings:
        raise FdbError(
            f"profile {profile.name} has no sglang session settings (--voice, --sampling, "
            "--reference-audio)",
            "leave them out, or use a session-protocol profile",
        )
    return settings if settings != SessionSettings() else None
