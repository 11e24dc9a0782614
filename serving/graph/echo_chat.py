"""``echo_chat``: a chat node that answers each turn with the user's last message (a fixture
backend: no model)."""

from __future__ import annotations

from serving.graph.kinds import KindOptions
from serving.graph.runtime import Emit, Node
from serving.graph.streams import Chunk, TextDelta, control


class EchoChatOptions(KindOptions):
    prefix: str = ""


class EchoChatNode(Node):
    def __init__(self, models, options: EchoChatOptions):
        self._prefix = options.prefix

    async def on_chunk(self, chunk: Chunk, emit: Emit) -> None:
        if chunk.format != "messages":
            return
        users = [m.content for m in chunk.payload.messages if m.role == "user"]
        if users:
            await emit(Chunk("text_delta", TextDelta(self._prefix + users[-1], chunk.payload.language), turn=chunk.turn))
        await emit(control("turn.done", turn=chunk.turn))
