"""fdb's own interruption-relevance rubric, used only when no official checkout is given.

It is not the official prompt: outputs that use it are labeled "fdb's own relevance rubric".
It keeps the official 0-5 scale and asks for the same two closing lines, so the official parse
rule reads it unchanged.
"""

from __future__ import annotations

FDB_RELEVANCE_PROMPT = """\
You are grading one moment of a spoken conversation between a user and a voice assistant.
The user asked for something, the assistant started answering, and the user cut in with a new
turn while the assistant was still talking. You see the user's earlier turn, the user's
interrupting turn, and a transcript of everything the assistant said after the interruption
ended. The transcript comes from speech recognition and may contain small recognition errors.

Rate how well the assistant's speech after the interruption responds to the interrupting turn:
  0 - it has nothing to do with the interrupting turn;
  1 - it mostly continues the earlier topic or says something unrelated;
  2 - it touches the interrupting turn only in passing;
  3 - it responds to the interrupting turn, but partly or vaguely;
  4 - it responds to the interrupting turn clearly, with minor gaps;
  5 - it responds to the interrupting turn directly and completely.
Judge relevance to the interrupting turn only, not style, length or factual accuracy.

Write a short analysis first. End your reply with exactly these two lines, the rating as a
single digit and nothing after it:
Analysis: <your analysis>
I would rate the AI's response as <rating>"""


def fdb_relevance_message(context: str, interrupt: str, response: str) -> str:
    return (
        f"Earlier user turn: {context}\n"
        f"Interrupting user turn: {interrupt}\n"
        f"Assistant after the interruption: {response}\n"
    )
