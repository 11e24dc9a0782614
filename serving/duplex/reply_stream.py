"""The LLM's reply to one turn, as speakable chunks while it is being generated.

:meth:`ReplyStream.start` runs the LLM's token stream in a thread of its own (not in the
model pool: a stream waiting for the model's lock, or held as below, must never keep the pool
from running the synthesis it waits for). That thread cuts the text with a
:class:`~serving.conversation.chunker.SpeechChunker` and hands every chunk to the event loop the
moment it is complete, so its synthesis can start while the rest of the reply is still being
generated. :meth:`ReplyStream.get` awaits the next chunk (``None`` once
the reply is complete; an LLM error is raised there).

With ``hold_first`` (audio replies) the thread pauses after the first chunk until
:meth:`ReplyStream.release` (its synthesis is done), for at most ``HOLD_MAX_S``: the first
audio waits for that synthesis, which the LLM running beside it would slow down on a small CPU,
while the first chunk's audio then leaves the LLM time enough for the rest.

Between tokens the thread checks whether the turn was interrupted or :meth:`ReplyStream.stop`
was called (the reply ended early, or its consumer went away); it then closes the token stream,
which frees the model for the next caller at once.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from serving.conversation.chunker import FIRST_CHUNK, SpeechChunker
from serving.realtime.turn import Turn

HOLD_MAX_S = 3.0
POLL_S = 0.02  # how often a held thread looks at the turn's interrupted flag


class ReplyStream:
    def __init__(
        self,
        llm: Any,
        turn: Turn,
        messages: list[dict[str, str]],
        max_tokens: int,
        temperature: float,
        hold_first: bool = False,
        first_chunk: tuple[int, int] = FIRST_CHUNK,
    ) -> None:
        self._llm = llm
        self._first_chunk = first_chunk  # the system's rule (SystemConfig.first_chunk)
        self._turn = turn
        self._messages = messages
        self._max_tokens = max_tokens
        self._temperature = temperature
        self._queue: asyncio.Queue[str | BaseException | None] = asyncio.Queue()
        self._stop = threading.Event()
        self._go = threading.Event()  # set: no pause after the first chunk
        if not hold_first:
            self._go.set()
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> None:
        """Start generating (call from the event loop)."""
        self._loop = asyncio.get_running_loop()
        threading.Thread(target=self._generate, name="fdb-llm-stream", daemon=True).start()

    def stop(self) -> None:
        """Stop generating at the next token (idempotent)."""
        self._stop.set()
        self._go.set()

    def release(self) -> None:
        """The first chunk is synthesized: generation goes on (idempotent)."""
        self._go.set()

    async def get(self) -> str | None:
        """The next chunk, or None when the reply is complete."""
        item = await self._queue.get()
        if isinstance(item, BaseException):
            raise item
        return item

    # --- in the stream's thread ------------------------------------------------------------------

    def _stopped(self) -> bool:
        return self._stop.is_set() or self._turn.interrupted

    def _hand(self, item: str | BaseException | None) -> None:
        assert self._loop is not None
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, item)
        except RuntimeError:  # the session's loop is gone: nobody waits for this reply
            self._stop.set()

    def _hold(self) -> None:
        deadline = time.monotonic() + HOLD_MAX_S
        while not self._go.wait(POLL_S) and not self._stopped() and time.monotonic() < deadline:
            pass
        self._go.set()  # held once at most

    def _generate(self) -> None:
        chunker = SpeechChunker(*self._first_chunk)
        pieces = self._llm.stream_reply(self._messages, self._max_tokens, self._temperature)
        try:
            for piece in pieces:
                if self._stopped():
                    return
                for chunk in chunker.push(piece):
                    self._hand(chunk)
                if chunker.chunks and not self._go.is_set():
                    self._hold()
            if not self._stopped():
                for chunk in chunker.finish():
                    self._hand(chunk)
                self._hand(None)
        except Exception as exc:  # handed to the consumer, which fails the session
            self._hand(exc)
        finally:
            pieces.close()
