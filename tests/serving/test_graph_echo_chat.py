"""The echo_chat kind: declared in a session graph, built, it answers with the user's last message."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path

import yaml

from serving.graph.declare import load_graph
from serving.graph.nodes import EmbeddedModels, build_nodes
from serving.graph.streams import Chunk, Message, Messages

CASCADE = Path(__file__).resolve().parents[2] / "serving" / "graph" / "embedded-cascade.yaml"


def test_echo_chat_answers_with_the_last_user_message():
    decl = yaml.safe_load(CASCADE.read_text(encoding="utf-8"))
    decl = copy.deepcopy(decl)
    decl["session_nodes"]["llm"] = {"kind": "echo_chat", "prefix": "you said: ",
                                    "inputs": decl["session_nodes"]["llm"]["inputs"]}
    graph = load_graph(decl)
    node = build_nodes(graph, EmbeddedModels())["llm"]
    sent: list[Chunk] = []

    async def emit(chunk: Chunk) -> None:
        sent.append(chunk)

    messages = Messages((Message("system", "be brief"), Message("user", "hello there")))
    asyncio.run(node.on_chunk(Chunk("messages", messages, turn=1), emit))
    assert [(c.format, c.control, c.turn) for c in sent] == [("text_delta", None, 1), ("session", "turn.done", 1)]
    assert sent[0].payload.text == "you said: hello there"
