"""Cut every reply of a recorded session from its trace (spec "Listening quality").

A reply is the audio of one response as the client played it: the export's playout rule
(``fdb.playout``, the same code the observation windows use, under the session's profile and
requested turn detection), per response, its played parts back to back (late-arrival gaps left
out), stopped where a barge-in cut dropped it (a cancelled ``response.done`` on the turn-based
and native profiles; ``output_audio_buffer.cleared`` or ``input_audio_buffer.speech_started``
on the legacy and OpenAI ones), with no window end; resampled once to 16 kHz (soxr HQ).

Its reference transcript is the ``transcript`` of the ``output_audio`` content of
``response.done``, else ``response.output_audio_transcript.done``, else the joined transcript
deltas; its status is ``response.done``'s status (``incomplete`` without one).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fdb.audio import pcm16_to_float, resample
from fdb.dialects import Dialect
from fdb.playout import played_replies, trace_playout_inputs
from fdb.session_records import TraceEvent

TRANSCRIPT_DONE = ("response.output_audio_transcript.done", "response.audio_transcript.done")
TRANSCRIPT_DELTA = ("response.output_audio_transcript.delta", "response.audio_transcript.delta")
REPLY_RATE = 16000


@dataclass
class CutReply:
    response_id: str
    index: int
    status: str = "incomplete"
    transcript: str | None = None
    pcm: bytes = b""  # the played audio, PCM16 at the session's output rate
    deltas: int = 0
    barge_in_cut: bool = False
    _text_deltas: list[str] = field(default_factory=list)

    def audio(self, output_rate: int) -> np.ndarray:
        if not self.pcm:
            return np.zeros(0, np.float32)
        return resample(pcm16_to_float(self.pcm), output_rate, REPLY_RATE)


def _done_transcript(response: dict) -> str | None:
    texts = [
        c.get("transcript")
        for item in response.get("output") or []
        for c in item.get("content") or []
        if isinstance(c, dict) and c.get("transcript")
    ]
    return " ".join(texts) if texts else None


def _text(trace: list[TraceEvent], profile: Dialect, get) -> None:
    """Status and transcript of each reply from the received events (a reply is registered at
    its first event of any kind, which sets its order)."""
    for ev in trace:
        if ev.dir != "recv":
            continue
        if ev.type in profile.events.audio_delta:
            get(ev.event.get("response_id"))
        elif ev.type in TRANSCRIPT_DELTA:
            get(ev.event.get("response_id"))._text_deltas.append(str(ev.event.get("delta") or ""))
        elif ev.type in TRANSCRIPT_DONE:
            get(ev.event.get("response_id")).transcript = ev.event.get("transcript")
        elif ev.type == "response.done":
            response = ev.event.get("response") or {}
            reply = get(response.get("id"))
            reply.status = str(response.get("status") or "incomplete")
            reply.transcript = _done_transcript(response) or reply.transcript


def cut_replies(
    trace: list[TraceEvent],
    output: bytes,
    profile: Dialect,
    output_rate: int,
    turn_detection: dict | None = None,
) -> list[CutReply]:
    """Replies of one session in order of their first audio or text event (see module rule).
    Raises ValueError when output.pcm is shorter than the trace says."""
    deltas, cancels = trace_playout_inputs(trace, output, profile, turn_detection)
    replies: dict[str, CutReply] = {}

    def get(rid) -> CutReply:
        return replies.setdefault(str(rid), CutReply(response_id=str(rid), index=len(replies)))

    _text(trace, profile, get)
    for rid, played in played_replies(deltas, cancels, output_rate).items():
        reply = get(rid)
        reply.pcm, reply.deltas, reply.barge_in_cut = played.pcm(), played.deltas, played.cut
    for reply in replies.values():
        if reply.transcript is None and reply._text_deltas:
            reply.transcript = "".join(reply._text_deltas)
    return list(replies.values())
