"""The LLM's reply as speakable chunks while it is generated (``ReplyStream``, which the native
duplex engine speaks from): an error reaches the consumer, and the real SmolLM2's streaming matches
its whole reply. The session graph's streamed reply: tests/serving/test_graph_streaming.py."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from serving.duplex.reply_stream import ReplyStream
from serving.realtime.turn import Turn, Utterance


def test_stream_errors_reach_the_consumer():
    class Broken:
        def stream_reply(self, messages, max_tokens, temperature):
            yield "Hello there. "
            raise RuntimeError("model failed")

    async def scenario() -> list:
        turn = Turn(Utterance("item_1", np.zeros(1, np.float32), 0, 0))
        stream = ReplyStream(Broken(), turn, [], 8, 0.0)
        stream.start()
        got = [await stream.get()]
        with pytest.raises(RuntimeError, match="model failed"):
            await stream.get()
        return got

    assert asyncio.run(scenario()) == ["Hello there."]


@pytest.mark.parametrize(
    ("first_chunk", "first"),
    [(None, "one two three four five six seven"), ((3, 4), "one two three four")],
)
def test_the_native_reply_stream_cuts_its_first_chunk_by_the_systems_rule(first_chunk, first):
    class Words:
        def stream_reply(self, messages, max_tokens, temperature):
            yield from (f"{w} " for w in "one two three four five six seven eight nine".split())

    async def scenario() -> list:
        turn = Turn(Utterance("item_1", np.zeros(1, np.float32), 0, 0))
        extra = {} if first_chunk is None else {"first_chunk": first_chunk}
        stream = ReplyStream(Words(), turn, [], 16, 0.0, **extra)
        stream.start()
        chunks = []
        while (chunk := await stream.get()) is not None:
            chunks.append(chunk)
        return chunks

    chunks = asyncio.run(scenario())
    assert (
        chunks[0] == first
        and " ".join(chunks).split() == "one two three four five six seven eight nine".split()
    )


def test_smollm2_stream_matches_its_whole_reply():
    from fdb.models.llm import SmolLm2

    llm = SmolLm2()
    messages = [
        {"role": "system", "content": "You are a helpful voice assistant."},
        {"role": "user", "content": "Why is the sky blue?"},
    ]
    # llama.cpp reuses the previous call's prompt prefix, and a prompt evaluated whole may decode
    # differently from one partly taken from that cache: compare calls made in the same state.
    llm.reply(messages, max_tokens=20)
    pieces = list(llm.stream_reply(messages, max_tokens=20))
    assert len(pieces) > 5
    assert "".join(pieces).strip() == llm.reply(messages, max_tokens=20)
    stream = llm.stream_reply(messages, max_tokens=20)
    next(stream)
    stream.close()  # an abandoned stream frees the model
    assert llm.reply(messages, max_tokens=4)
