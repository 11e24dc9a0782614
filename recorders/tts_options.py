"""How every request of a TTS run is made (:class:`SpeechClientOptions`), shared by the HTTP
client (:mod:`recorders.tts_client`) and the realtime one (:mod:`recorders.tts_realtime`), which
the HTTP client hands realtime runs to."""

from __future__ import annotations

import os
from typing import Literal

from pydantic import BaseModel, Field

SPEECH_PATH = "/v1/audio/speech"
REALTIME_PATH = "/v1/realtime"
UNDECLARED = (
    "the server sent raw PCM without declaring its sample rate (no X-Sample-Rate header, no rate= "
    "in the Content-Type); refusing to guess: pass --sample-rate HZ if you know the model's rate"
)


class SpeechClientOptions(BaseModel):
    """How every request of a run is made."""

    url: str  # the server's base URL, http://HOST:PORT (SPEECH_PATH is appended)
    model: str | None = None
    stream: bool = True
    stream_format: str = "audio"  # audio (raw bytes) | sse
    response_format: str = "pcm"
    ref_audio: Literal["inline", "file", "none"] = "inline"
    extra_body: dict[str, object] = Field(default_factory=dict)
    sample_rate: int | None = None  # used only when the server declares no rate
    channels: int | None = None  # used only when the server declares no channel count
    timeout_s: float = 120.0
    max_audio_s: float | None = None  # stop-condition bound recorded with each request
    transport: Literal["http", "realtime"] = "http"  # realtime: recorders.tts_realtime
    drain_s: float = 0.5  # realtime: how long to keep listening after response.done
    api_key_env: str | None = None  # the NAME of the variable holding a bearer token; never the key

    def auth_headers(self) -> dict[str, str]:
        """``Authorization: Bearer`` from the variable ``api_key_env`` names; none when it is
        unset or empty. The key is read at request time and never stored in a record."""
        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        return {"Authorization": f"Bearer {key}"} if key else {}

    @property
    def endpoint(self) -> str:
        if self.transport == "realtime":
            base = (
                self.url.rstrip("/").replace("https://", "wss://", 1).replace("http://", "ws://", 1)
            )
            return base + REALTIME_PATH
        return self.url.rstrip("/") + SPEECH_PATH
