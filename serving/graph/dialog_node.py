"""``dialog``: the conversation history of a session graph, with the history rules of
:mod:`serving.conversation.dialog` (what a cut reply keeps, carried words, the cut note).

- Each final transcript opens turn N (``turn.queued``); the turns are answered one at a time,
  in order: an empty one is ``turn.empty``, any other sends the history as ``messages``.
- The reply's spoken text and its boundaries arrive as ``reply.progress`` (text, text_end,
  audio_ms) from the speech node; the reply closes at that node's ``turn.done``, which a pacing
  sink releases once the audio has played (with ``sent_ms``, the audio the client got).
- Speech that starts (``speech.started``) while a reply is open or waiting interrupts it; the
  client's ``interrupt`` without a turn (response.cancel) interrupts the open reply. The open
  reply sends ``interrupt`` + ``turn.interrupted`` (``started``: True) and waits for the
  graph's ``reply.delivered`` (``sent_ms``, ``played_ms``) before the history keeps what was
  heard; a waiting turn is ``turn.interrupted`` (``started``: False) and its words are carried.
  A transcript that arrives while the user speaks again is interrupted at once (the guide:
  speech that started after the utterance ended and has not stopped when the reply begins).
- Each close is reported as ``reply.heard`` (``final``: True; ``report``: the client hears of it,
  as after an interruption or a truncate), and so is every client ``truncate`` (``final``: False).
- ``configure`` sets the instructions (the system prompt), the output modalities,
  ``interrupt_response`` (false: speech during a reply does not interrupt it) and
  ``create_response`` (false: a final transcript joins the conversation as a user item and
  waits, as the client's ``item`` texts do, for a ``respond``).
- ``respond`` (the client's response.create) answers the items waiting, as one user turn, once
  the first ``after`` final transcripts of the session have arrived (the utterances the client
  committed before it); with nothing waiting the turn is ``turn.empty``.
- A tentative transcript (``is_final`` False: the recognizer's prefetch at a pause) sends
  ``reply.prefetch`` with the messages the final one would send if no reply is open or waiting,
  so the reply model may start ahead; ``speech.resumed`` and ``speech.started`` withdraw it
  (``reply.prefetch`` with messages None). The history does not change until the final one.
"""

from __future__ import annotations

from fdb.errors import FdbError
from serving.conversation.dialog import Boundary, Dialog, ReplyRecord
from serving.graph.kinds import DialogOptions
from serving.graph.runtime import Emit, Node, NodeContext
from serving.graph.streams import Chunk, Message, Messages, control


class DialogNode(Node):
    @classmethod
    def build(cls, ctx: NodeContext) -> DialogNode:
        return cls(ctx.decl.options, ctx.max_history_messages)

    def __init__(self, options: DialogOptions, max_history_messages: int = 12):
        self._options = options
        self._instructions = options.system_prompt
        self._audio = True
        self._dialog = Dialog(max_history_messages)
        self._records: dict[int, ReplyRecord] = {}
        self._turn = 0
        self._open: int | None = None  # the reply being generated or delivered
        self._closing: int | None = None  # an interrupted reply waiting for reply.delivered
        self._waiting: list[tuple[int, str]] = []
        self._carry_later: list[str] = []  # words of waiting turns interrupted with the open one
        self._speaking = False
        self._languages: dict[
            int, str
        ] = {}  # per queued turn: the language its transcript reported
        self._language: str | None = None  # the language last heard in an answered turn
        self._prefetched = False  # a reply.prefetch was sent and not withdrawn or answered
        self._interrupt_response = True
        self._create_response = True
        self._items: list[str] = []  # user texts waiting for a respond (create_response false)
        self._finals = 0  # final transcripts so far
        self._respond_after: int | None = None  # a respond waiting for this many final transcripts

    @property
    def history(self) -> list[dict[str, str]]:
        return self._dialog.history

    async def on_chunk(self, chunk: Chunk, emit: Emit) -> None:
        if chunk.format == "transcript" and chunk.payload.is_final:
            await self._utterance(chunk, emit)
        elif chunk.format == "transcript":
            await self._prefetch(chunk, emit)
        elif chunk.control == "speech.resumed":
            await self._withdraw(emit)
        elif chunk.control == "speech.started":
            self._speaking = self._interrupt_response
            await self._withdraw(emit)
            if self._interrupt_response:
                await self._interrupt_all(chunk.t_ms, emit)
        elif chunk.control == "speech.stopped":
            self._speaking = False
        elif chunk.control == "interrupt" and chunk.turn is None and self._open is not None:
            await self._interrupt(self._open, None, emit)
        elif chunk.control == "configure":
            data = chunk.payload.data
            self._instructions = data.get("instructions", self._instructions)
            if "output_modalities" in data:
                self._audio = "audio" in data["output_modalities"]
            self._interrupt_response = data.get("interrupt_response", self._interrupt_response)
            self._create_response = data.get("create_response", self._create_response)
        elif chunk.control == "item":
            self._items.append(chunk.payload.data["text"][: self._options.max_text_chars])
        elif chunk.control == "respond":
            self._respond_after = chunk.payload.data.get("after", 0)
            await self._respond_when_heard(emit)
        elif chunk.control == "truncate" and chunk.turn in self._records:
            await self._truncate(chunk, emit)

    async def on_control(self, chunk: Chunk, emit: Emit) -> None:
        record = self._records.get(chunk.turn)
        data = chunk.payload.data
        if chunk.control == "reply.progress" and record is not None and record.open:
            record.text += (" " if record.text else "") + data["text"]
            record.boundaries.append(Boundary(len(record.text), data["audio_ms"]))
        elif chunk.control == "turn.done" and chunk.turn == self._open:
            self._open = None
            last = record.boundaries[-1].audio_ms if record.boundaries else 0.0
            record.sent_ms = data.get("sent_ms", last)
            await self._close(record, True, emit)
        elif chunk.control == "reply.delivered" and chunk.turn == self._closing:
            self._closing = None
            last = record.boundaries[-1].audio_ms if record.boundaries else 0.0
            record.sent_ms = data.get("sent_ms", last)
            record.played_ms = data.get("played_ms")
            await self._close(record, False, emit)

    def idle(self) -> bool:
        return self._open is None and self._closing is None and not self._waiting

    # --- turns -------------------------------------------------------------------------------

    async def _respond_when_heard(self, emit: Emit) -> None:
        """The waiting respond, once the transcripts it waits for have arrived."""
        if self._respond_after is None or self._finals < self._respond_after:
            return
        self._respond_after = None
        text, self._items = " ".join(t for t in self._items if t), []
        self._turn += 1
        await emit(control("turn.queued", turn=self._turn, t_ms=None))
        self._waiting.append((self._turn, text))
        await self._next(emit)

    async def _utterance(self, chunk: Chunk, emit: Emit) -> None:
        self._prefetched = False  # the reply model keeps a prefetch only for the same messages
        self._finals += 1
        if not self._create_response:
            self._items.append(chunk.payload.text[: self._options.max_text_chars])
            await self._respond_when_heard(emit)
            return
        self._turn += 1
        turn = self._turn
        await emit(control("turn.queued", turn=turn, t_ms=chunk.t_ms))
        if chunk.payload.language:
            self._languages[turn] = chunk.payload.language
        text = chunk.payload.text[: self._options.max_text_chars]
        if self._speaking:  # the user speaks again: a reply now would be spoken over
            self._dialog.carry(text)
            await emit(control("turn.interrupted", turn=turn, t_ms=chunk.t_ms, started=False))
            return
        self._waiting.append((turn, text))
        await self._next(emit)

    async def _interrupt_all(self, t_ms: int | None, emit: Emit) -> None:
        waiting, self._waiting = self._waiting, []
        if self._open is not None:
            await self._interrupt(self._open, t_ms, emit)
        for turn, text in waiting:
            if self._closing is None:
                self._dialog.carry(text)
            else:
                self._carry_later.append(text)  # after the open reply's own words
            await emit(control("turn.interrupted", turn=turn, t_ms=t_ms, started=False))

    async def _interrupt(self, turn: int, t_ms: int | None, emit: Emit) -> None:
        self._open, self._closing = None, turn
        await emit(control("interrupt", turn=turn, t_ms=t_ms))
        await emit(control("turn.interrupted", turn=turn, t_ms=t_ms, started=True))

    async def _close(self, record: ReplyRecord, finished: bool, emit: Emit) -> None:
        turn = int(record.item_id)
        kept = self._dialog.close(record, finished)
        for text in self._carry_later:
            self._dialog.carry(text)
        self._carry_later.clear()
        report = record.audio and (not finished or record.limit_ms is not None)
        await emit(self._heard(turn, record, kept, final=True, report=report))
        await self._next(emit)

    async def _truncate(self, chunk: Chunk, emit: Emit) -> None:
        record = self._records[chunk.turn]
        data = chunk.payload.data
        record.sent_ms = max(record.sent_ms, data.get("sent_ms", 0.0))
        _, kept, _ = self._dialog.truncate(record.item_id, data["audio_end_ms"], None)
        await emit(self._heard(chunk.turn, record, kept, final=False, report=True))

    @staticmethod
    def _heard(turn: int, record: ReplyRecord, kept: Boundary, final: bool, report: bool) -> Chunk:
        return control(
            "reply.heard",
            turn=turn,
            final=final,
            report=report,
            text_end=kept.text_end,
            audio_ms=kept.audio_ms,
            text=record.text[: kept.text_end],
        )

    async def _prefetch(self, chunk: Chunk, emit: Emit) -> None:
        """The messages a final transcript with this text would send now (as :meth:`_start`
        builds them), when it would start a reply at once."""
        if not self.idle() or not self._create_response:
            return
        text = chunk.payload.text[: self._options.max_text_chars]
        if not text:
            return
        messages = self._messages(self._dialog.preview_user_turn(text))
        if messages is None:
            return
        self._prefetched = True
        await emit(
            control(
                "reply.prefetch",
                messages=messages,
                language=chunk.payload.language or self._language,
            )
        )

    async def _withdraw(self, emit: Emit) -> None:
        if self._prefetched:
            self._prefetched = False
            await emit(control("reply.prefetch", messages=None))

    async def _next(self, emit: Emit) -> None:
        while self._open is None and self._closing is None and self._waiting:
            turn, text = self._waiting.pop(0)
            if text:
                await self._start(turn, text, emit)
            else:
                await emit(control("turn.empty", turn=turn))

    def _messages(self, user_text: str) -> list[dict[str, str]] | None:
        """The reply's messages for ``user_text``; None when they would exceed max_history_chars."""
        messages = self._dialog.messages(self._instructions, user_text)
        size = sum(len(m["content"]) for m in messages) + self._options.max_text_chars
        return None if size > self._options.max_history_chars else messages

    async def _start(self, turn: int, text: str, emit: Emit) -> None:
        user_text = self._dialog.user_turn(text)
        messages = self._messages(user_text)
        if messages is None:
            raise FdbError(
                f"dialog: turn {turn}'s history exceeds max_history_chars "
                f"({self._options.max_history_chars})",
                "open a new session",
            )
        self._records[turn] = self._dialog.open(str(turn), str(turn), user_text, self._audio)
        self._open = turn
        self._language = self._languages.pop(turn, None) or self._language  # an answered turn's
        await emit(
            Chunk(
                "messages",
                Messages(tuple(Message(m["role"], m["content"]) for m in messages), self._language),
                turn=turn,
            )
        )
