"""The events of one response, from ``response.created`` to ``response.done``.

Order for an audio reply (the OpenAI Realtime GA flow): ``response.created`` (status
in_progress); before the first content, ``response.output_item.added`` and
``conversation.item.added`` (the assistant message, in progress) and
``response.content_part.added``; then per chunk of the reply (a sentence, or part of one: see
:mod:`serving.conversation.chunker`) one ``response.output_audio_transcript.delta`` followed by that
chunk's ``response.output_audio.delta`` events; then ``response.output_audio.done``,
``response.output_audio_transcript.done``, ``response.content_part.done``,
``response.output_item.done``, ``conversation.item.done`` and ``response.done``. A text-only
session gets ``response.output_text.delta`` / ``.done`` instead. ``response.done`` always comes,
whatever the outcome: completed (reason ``stop`` or ``empty_turn``), or cancelled
(``turn_detected``: speech during the reply; ``client_cancelled``: response.cancel); the
connection's dialect names the reason (:mod:`serving.realtime.wire`). The ``.done`` events of
an item and its part are sent only when they were added, and always before ``response.done``.
"""

from __future__ import annotations

from typing import Any

from fdb.dialects.events import (
    ContentPart,
    ContentPartAdded,
    ContentPartDone,
    ItemAdded,
    ItemDone,
    OutputAudioDone,
    OutputAudioTranscriptDelta,
    OutputAudioTranscriptDone,
    OutputContent,
    OutputItem,
    OutputItemAdded,
    OutputItemDone,
    OutputTextDelta,
    OutputTextDone,
    ResponseBody,
    ResponseCreated,
    ResponseDone,
    StatusDetails,
    new_id,
)
from serving.realtime.outbox import Outbox


class Conversation:
    """The ids of a session's conversation items in order: ``previous_item_id`` of the next."""

    def __init__(self) -> None:
        self.last_item_id: str | None = None

    def add(self, item_id: str) -> str | None:
        """Append ``item_id``; the id before it."""
        previous, self.last_item_id = self.last_item_id, item_id
        return previous


def user_item(
    item_id: str,
    kind: str,
    transcript: str | None = None,
    text: str | None = None,
    status: str = "completed",
) -> dict[str, Any]:
    """A user message item with one ``input_audio`` or ``input_text`` part."""
    part: dict[str, Any] = {"type": kind}
    if kind == "input_audio":
        part["transcript"] = transcript
    else:
        part["text"] = text
    return {
        "id": item_id,
        "object": "realtime.item",
        "type": "message",
        "role": "user",
        "status": status,
        "content": [part],
    }


class Reply:
    """Builds and sends the events of one response and remembers what the client got."""

    def __init__(
        self, outbox: Outbox, modalities: tuple[str, ...], conversation: Conversation | None = None
    ) -> None:
        self._outbox = outbox
        self._conversation = conversation or Conversation()
        self.audio = "audio" in modalities
        self.modalities = list(modalities)
        self.response_id = new_id("resp")
        self.item_id = new_id("item")
        self.text_sent = ""  # transcript / text deltas sent so far
        self.audio_started = False
        self._previous: str | None = None
        self._item_added = False

    def _content(self) -> list[OutputContent]:
        if not (self.text_sent or self.audio_started or self._item_added):
            return []
        kind = "output_audio" if self.audio else "output_text"
        return [
            OutputContent(type=kind, transcript=self.text_sent)
            if self.audio
            else OutputContent(type=kind, text=self.text_sent)
        ]

    def _item(self, status: str) -> OutputItem:
        return OutputItem(id=self.item_id, status=status, content=self._content())

    def _body(self, status: str, details: StatusDetails | None) -> ResponseBody:
        item_status = {"in_progress": "in_progress", "completed": "completed"}.get(
            status, "incomplete"
        )
        content = self._content()
        output = (
            [OutputItem(id=self.item_id, status=item_status, content=content)] if content else []
        )
        return ResponseBody(
            id=self.response_id,
            status=status,
            status_details=details,
            output=output,
            output_modalities=self.modalities,
        )

    def _part(self) -> dict[str, str]:
        return {"response_id": self.response_id, "item_id": self.item_id}

    def _content_part(self) -> ContentPart:
        return (
            ContentPart(type="audio", transcript=self.text_sent)
            if self.audio
            else ContentPart(type="text", text=self.text_sent)
        )

    async def created(self) -> None:
        await self._outbox.send(ResponseCreated(response=self._body("in_progress", None)))

    async def open_item(self) -> None:
        """The assistant item and its part, before the first content (once)."""
        if self._item_added:
            return
        self._item_added = True
        self._previous = self._conversation.add(self.item_id)
        empty = OutputItem(id=self.item_id, status="in_progress", content=[]).model_dump(
            mode="json"
        )
        await self._outbox.send(OutputItemAdded(response_id=self.response_id, item=empty))
        await self._outbox.send(ItemAdded(previous_item_id=self._previous, item=empty))
        await self._outbox.send(ContentPartAdded(**self._part(), part=self._content_part()))

    async def text_delta(self, chunk: str) -> None:
        """One chunk of reply text (the transcript of the audio that follows, when audio)."""
        await self.open_item()
        delta = (" " if self.text_sent else "") + chunk
        self.text_sent += delta
        event = (
            OutputAudioTranscriptDelta(**self._part(), delta=delta)
            if self.audio
            else OutputTextDelta(**self._part(), delta=delta)
        )
        await self._outbox.send(event)

    async def finish(self, status: str, reason: str | None) -> None:
        """Close the parts and the item that started, then ``response.done``."""
        if self.audio and self.audio_started:
            await self._outbox.send(OutputAudioDone(**self._part()))
        if self.text_sent:
            done = (
                OutputAudioTranscriptDone(**self._part(), transcript=self.text_sent)
                if self.audio
                else OutputTextDone(**self._part(), text=self.text_sent)
            )
            await self._outbox.send(done)
        if self._item_added:
            item_status = "completed" if status == "completed" else "incomplete"
            item = self._item(item_status).model_dump(mode="json")
            await self._outbox.send(ContentPartDone(**self._part(), part=self._content_part()))
            await self._outbox.send(OutputItemDone(response_id=self.response_id, item=item))
            await self._outbox.send(ItemDone(previous_item_id=self._previous, item=item))
        details = StatusDetails(type=status, reason=reason)
        await self._outbox.send(ResponseDone(response=self._body(status, details)))
