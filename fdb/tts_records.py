"""Typed records of the TTS serving benchmark (``tts-bench``; docs/tts.md).

- ``TtsRequestRecord`` (schema ``fdb-tts-request-1``): one line of
  ``concurrency-N/requests.jsonl`` per request, warm-ups included (``warmup: true``). Every time
  is on the client's monotonic clock (``time.perf_counter``), in seconds from the moment just
  before the request was sent; ``chunks`` holds each arrival of audio payload bytes as
  ``[t_s, bytes]`` so every metric can be recomputed from the file.
- ``TtsLevelSpec``: what one level replays (the level directory's ``level.json``).

The recorder writes these; the scorers read them; neither imports the other.
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from fdb.io import Record

TTS_REQUEST_SCHEMA = "fdb-tts-request-1"
TTS_LEVEL_SCHEMA = "fdb-tts-level-1"

Transport = Literal["pcm", "sse", "wav", "realtime"]
RateSource = Literal["header", "content-type", "wav-header", "sse-event", "session", "option"]


class TtsRequestRecord(Record):
    """One request of a level, as the client saw it."""

    model_config = ConfigDict(populate_by_name=True)

    schema_: str = Field(TTS_REQUEST_SCHEMA, alias="schema")
    id: str  # the Seed-TTS utt_id
    list_name: str  # "en/meta.lst"
    index: int  # position in the level's order (warm-ups count from 0 too)
    warmup: bool = False
    concurrency: int
    status: Literal["ok", "failed"]
    error: str | None = None
    http_status: int | None = None
    content_type: str | None = None
    transport: Transport | None = None
    sample_rate: int | None = None
    channels: int | None = None
    bit_depth: int | None = None
    rate_source: RateSource | None = None
    started_wall: str | None = None  # ISO time of the send (for reading logs side by side)
    start_s: float | None = None  # send time, seconds from the level's first send (client clock)
    chunks: list[tuple[float, int]] = Field(default_factory=list)  # (t_s, audio bytes) per arrival
    end_s: float | None = None  # the response body ended (or the request failed)
    done_s: float | None = (
        None  # the server declared the end of the audio (SSE done, response.done)
    )
    bytes_after_done: int = 0  # audio bytes that arrived after done_s
    audio_bytes: int = 0
    partial_frame_bytes: int = 0  # trailing bytes that do not fill one sample frame
    max_audio_s: float | None = None  # the bound the audio must not exceed (stop condition), if any
    target_text: str
    audio_path: str | None = None  # relative to the level directory
    headers: dict[str, str] = Field(default_factory=dict)  # the audio-describing response headers

    @classmethod
    def begin(
        cls,
        item,
        index: int,
        warmup: bool,
        concurrency: int,
        max_audio_s: float | None,
        transport: Transport | None = None,
    ) -> TtsRequestRecord:
        """The record of a request about to be sent for ``item`` (a Seed-TTS row): ``ok`` until
        the request fails."""
        return cls(
            id=item.id,
            list_name=item.list_name,
            index=index,
            warmup=warmup,
            concurrency=concurrency,
            status="ok",
            target_text=item.target_text,
            max_audio_s=max_audio_s,
            transport=transport,
        )


class TtsLevelSpec(Record):
    """level.json: one concurrency level of a run."""

    model_config = ConfigDict(populate_by_name=True)

    schema_: str = Field(TTS_LEVEL_SCHEMA, alias="schema")
    concurrency: int
    url: str
    requests: int
    warmups: int
    body: dict[str, object]  # the request body without input/ref_audio/ref_text
    ref_audio: str
