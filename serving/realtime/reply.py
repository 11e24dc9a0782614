"""The events of one response, from ``response.created`` to ``response.done``.

Order for an audio reply: ``response.created`` (status in_progress), then per chunk of the
reply (a sentence, or part of one: see :mod:`serving.realtime.chunker`) one
``response.output_audio_transcript.delta`` followed by that chunk's
``response.output_audio.delta`` events, then ``response.output_audio.done``,
``response.output_audio_transcript.done`` and ``response.done``. A text-only session gets
``response.output_text.delta`` / ``.done`` instead. ``response.done`` always comes, whatever the
outcome: completed with reason ``stop`` or ``empty_turn``, or cancelled with ``interrupted``.
The ``.done`` events of a part are sent only when the part started, and always before
``response.done``.
"""

from __future__ import annotations

from serving.realtime.events import (
    OutputAudioDone,
    OutputAudioTranscriptDelta,
    OutputAudioTranscriptDone,
    OutputContent,
    OutputItem,
    OutputTextDelta,
    OutputTextDone,
    ResponseBody,
    ResponseCreated,
    ResponseDone,
    StatusDetails,
    new_id,
)
from serving.realtime.outbox import Outbox


class Reply:
    """Builds and sends the events of one response and remembers what the client got."""

    def __init__(self, outbox: Outbox, modalities: tuple[str, ...]) -> None:
        self._outbox = outbox
        self.audio = "audio" in modalities
        self.modalities = list(modalities)
        self.response_id = new_id("resp")
        self.item_id = new_id("item")
        self.text_sent = ""  # transcript / text deltas sent so far
        self.audio_started = False

    def _body(self, status: str, details: StatusDetails | None) -> ResponseBody:
        item_status = {"in_progress": "in_progress", "completed": "completed"}.get(status, "incomplete")
        content = []
        if self.text_sent or self.audio_started:
            kind = "output_audio" if self.audio else "output_text"
            content = [OutputContent(type=kind, transcript=self.text_sent) if self.audio
                       else OutputContent(type=kind, text=self.text_sent)]
        output = [OutputItem(id=self.item_id, status=item_status, content=content)] if content else []
        return ResponseBody(id=self.response_id, status=status, status_details=details,
                            output=output, output_modalities=self.modalities)

    def _part(self) -> dict[str, str]:
        return {"response_id": self.response_id, "item_id": self.item_id}

    async def created(self) -> None:
        await self._outbox.send(ResponseCreated(response=self._body("in_progress", None)))

    async def text_delta(self, chunk: str) -> None:
        """One chunk of reply text (the transcript of the audio that follows, when audio)."""
        delta = (" " if self.text_sent else "") + chunk
        self.text_sent += delta
        event = (OutputAudioTranscriptDelta(**self._part(), delta=delta) if self.audio
                 else OutputTextDelta(**self._part(), delta=delta))
        await self._outbox.send(event)

    async def finish(self, status: str, reason: str) -> None:
        """Close the parts that started, then ``response.done``."""
        if self.audio and self.audio_started:
            await self._outbox.send(OutputAudioDone(**self._part()))
        if self.text_sent:
            done = (OutputAudioTranscriptDone(**self._part(), transcript=self.text_sent) if self.audio
                    else OutputTextDone(**self._part(), text=self.text_sent))
            await self._outbox.send(done)
        details = StatusDetails(type=status, reason=reason)
        await self._outbox.send(ResponseDone(response=self._body(status, details)))
