"""A session's conversation history, and how much of each reply it keeps (what was heard).

Every reply is tracked as a :class:`ReplyRecord`: its text as sent (the transcript deltas
joined) and its *boundaries*, ``(text_end, audio_ms)`` pairs at the end of each chunk whose
audio was sent in full (``sglang.response.progress``). The history keeps a reply up to a
boundary (the Full-Duplex Guide, "Voice Conversation"):

- a reply the model finished and nobody cut: all of it;
- an interrupted reply (speech or ``response.cancel``): up to the last boundary whose audio had
  *played* on the client's clock when the interruption came (see
  :meth:`serving.realtime.delivery.AudioDelivery.played_ms`), never past what was sent;
- ``conversation.item.truncate``: up to the last boundary whose audio ended by ``audio_end_ms``,
  clamped to the audio sent; it may move the cut either way, also after the next reply began,
  while the reply's entry is still in the history.

A cut reply ends with "…" in the history, and while the history holds one the system message
says that such a reply was cut off. A reply the history keeps nothing of leaves no answer: its
user text joins the next utterance in one user message, as if the user had kept talking; a
truncate cannot bring such a reply back (it "changes nothing").
"""

from __future__ import annotations

from dataclasses import dataclass, field


class DialogError(Exception):
    """A truncate the history refuses (an unknown item, an item without audio); ``code``,
    ``param`` and ``event_id`` as the protocol's error event would carry them."""

    def __init__(
        self, code: str, message: str, *, param: str | None = None, event_id: str | None = None
    ):
        super().__init__(message)
        self.code, self.message, self.param, self.event_id = code, message, param, event_id


CUT_MARK = "…"
CUT_NOTE = "A reply of yours that ends with … was cut off by the user: they heard only that part."


@dataclass(frozen=True)
class Boundary:
    text_end: int  # characters of the reply text
    audio_ms: float  # where that text's audio ends in the reply's audio


NOTHING = Boundary(0, 0.0)


@dataclass(eq=False)
class ReplyRecord:
    response_id: str
    item_id: str
    user_text: str
    audio: bool
    text: str = ""
    boundaries: list[Boundary] = field(default_factory=list)
    sent_ms: float = 0.0
    played_ms: float | None = None  # an interrupted reply: its audio played by then
    open: bool = True  # still being generated / delivered
    finished: bool = False  # the model ended the reply itself
    limit_ms: float | None = None  # a truncate that came while the reply was open
    kept: Boundary = NOTHING
    entry: dict[str, str] | None = None  # the assistant message in the history

    def boundary_at(self, audio_ms: float) -> Boundary:
        """The last boundary whose audio ended by ``audio_ms`` (never past what was sent)."""
        reach = min(audio_ms, self.sent_ms) + 1e-3  # boundaries are rounded to 1 µs
        kept = NOTHING
        for boundary in self.boundaries:
            if boundary.audio_ms <= reach:
                kept = boundary
        return kept

    def content(self) -> str:
        said = self.text[: self.kept.text_end]
        cut = not self.finished or self.kept.text_end < len(self.text)
        return said + (CUT_MARK if cut else "")


class Dialog:
    def __init__(self, max_messages: int) -> None:
        self._max_messages = max_messages
        self.history: list[dict[str, str]] = []
        self._carry: list[str] = []  # user words whose reply kept nothing
        self._records: dict[str, ReplyRecord] = {}

    # --- prompts -----------------------------------------------------------------------------

    def user_turn(self, text: str) -> str:
        """The user message of the next reply: carried words, then ``text``."""
        joined = self.preview_user_turn(text)
        self._carry.clear()
        return joined

    def preview_user_turn(self, text: str) -> str:
        """What :meth:`user_turn` would return now, leaving the carried words in place."""
        return " ".join([*self._carry, text])

    def carry(self, text: str) -> None:
        """A turn interrupted before its reply began: its words join the next utterance."""
        if text:
            self._carry.append(text)

    def messages(self, instructions: str, user_text: str) -> list[dict[str, str]]:
        keep = self._max_messages
        history = self.history[-keep:] if keep else []
        system = instructions
        if any(m["role"] == "assistant" and m["content"].endswith(CUT_MARK) for m in history):
            system = f"{instructions.rstrip()} {CUT_NOTE}".strip()
        return [
            {"role": "system", "content": system},
            *history,
            {"role": "user", "content": user_text},
        ]

    # --- replies -----------------------------------------------------------------------------

    def open(self, response_id: str, item_id: str, user_text: str, audio: bool) -> ReplyRecord:
        record = ReplyRecord(response_id, item_id, user_text, audio)
        self._records[item_id] = record
        return record

    def close(self, record: ReplyRecord, finished: bool) -> Boundary:
        """The reply ended; the history keeps it up to what was heard (``played_ms``, or all
        that was sent), or up to an earlier truncate's position."""
        record.open, record.finished = False, finished
        reach = record.sent_ms if record.played_ms is None else record.played_ms
        if record.limit_ms is not None:
            reach = min(reach, record.limit_ms)
        if not record.audio:
            record.kept = record.boundaries[-1] if record.boundaries else NOTHING
        else:
            record.kept = record.boundary_at(reach)
        if record.kept.text_end == 0:
            self.carry(record.user_text)
        else:
            record.entry = {"role": "assistant", "content": record.content()}
            self.history += [{"role": "user", "content": record.user_text}, record.entry]
        return record.kept

    def truncate(
        self, item_id: str | None, audio_end_ms: float, event_id: str | None
    ) -> tuple[ReplyRecord, Boundary, float]:
        """``conversation.item.truncate``: (the reply, the boundary the history keeps, the cut
        position used: ``audio_end_ms`` clamped to the audio sent)."""
        record = self._records.get(item_id or "")
        if record is None:
            raise DialogError(
                "item_not_found",
                f"no item {item_id!r} in this conversation",
                param="item_id",
                event_id=event_id,
            )
        if not record.audio:
            raise DialogError(
                "invalid_value",
                f"item {item_id!r} has no audio to truncate",
                param="item_id",
                event_id=event_id,
            )
        position = min(float(audio_end_ms), record.sent_ms)
        if record.open:  # applied when the reply ends
            record.limit_ms = (
                position if record.limit_ms is None else min(record.limit_ms, position)
            )
            return record, record.boundary_at(record.limit_ms), position
        if record.entry is not None and any(m is record.entry for m in self.history):
            record.kept = record.boundary_at(position)  # cut to nothing, the entry reads "…"
            record.entry["content"] = record.content()
        return record, record.kept, position
