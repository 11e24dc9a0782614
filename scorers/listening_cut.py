"""Cut every reply of a recorded session from its trace (docs/formats.md, "Recording").

The trace JSON is re-read here (scorers never import recorders). Rule, per session:

- audio deltas are the received ``response.output_audio.delta`` / ``response.audio.delta``
  events, sliced from ``output.pcm`` by ``audio_offset`` / ``audio_bytes`` (PCM16 at the
  session's ``output_rate``), grouped by ``response_id`` in receipt order;
- simulated playout (the export's FIFO rule): a chunk starts at max(receipt time, end of the
  previous chunk); a received ``response.done`` with status ``cancelled`` keeps only the part
  of that response played before its receipt time (a barge-in cut) and frees the player;
- the reply is its kept audio back to back (late-arrival gaps left out), resampled once to
  16 kHz (soxr HQ);
- its reference transcript is the ``transcript`` of the ``output_audio`` content of
  ``response.done``, else ``response.output_audio_transcript.done``, else the joined
  transcript deltas; its status is ``response.done``'s status (``incomplete`` without one).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fdb.audio import pcm16_to_float, resample

DELTA_TYPES = ("response.output_audio.delta", "response.audio.delta")
TRANSCRIPT_DONE = ("response.output_audio_transcript.done", "response.audio_transcript.done")
TRANSCRIPT_DELTA = ("response.output_audio_transcript.delta", "response.audio_transcript.delta")
REPLY_RATE = 16000


@dataclass
class CutReply:
    response_id: str
    index: int
    status: str = "incomplete"
    transcript: str | None = None
    chunks: list[list] = field(default_factory=list)  # [start sample, PCM16 bytes] on the player clock
    kept_samples: int | None = None  # set by a barge-in cut (samples at output_rate)
    deltas: int = 0
    barge_in_cut: bool = False
    _text_deltas: list[str] = field(default_factory=list)

    def audio(self, output_rate: int) -> np.ndarray:
        parts = [pcm16_to_float(pcm) for _start, pcm in self.chunks]
        native = np.concatenate(parts) if parts else np.zeros(0, np.float32)
        if self.kept_samples is not None:
            native = native[: self.kept_samples]
        return resample(native, output_rate, REPLY_RATE) if len(native) else np.zeros(0, np.float32)


def read_events(path: Path) -> list[dict]:
    """trace.jsonl lines as dicts (received events only), stable-sorted by ``t``."""
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return sorted((r for r in rows if r.get("dir") == "recv"), key=lambda r: float(r["t"]))


def _done_transcript(response: dict) -> str | None:
    texts = [c.get("transcript") for item in response.get("output") or [] for c in item.get("content") or []
             if isinstance(c, dict) and c.get("transcript")]
    return " ".join(texts) if texts else None


def _cancel(reply: CutReply, at: int) -> int:
    """Keep the part of ``reply`` played before sample ``at``; returns the new player end."""
    kept = 0
    for start, pcm in reply.chunks:
        kept += max(0, min(len(pcm) // 2, at - start))
    total = sum(len(pcm) // 2 for _s, pcm in reply.chunks)
    if kept < total:
        reply.kept_samples, reply.barge_in_cut = kept, True
    return at


def cut_replies(events: list[dict], output: bytes, output_rate: int) -> list[CutReply]:
    """Replies of one session in order of their first event (see module rule)."""
    replies: dict[str, CutReply] = {}
    player_end = None

    def get(rid: str) -> CutReply:
        return replies.setdefault(rid, CutReply(response_id=rid, index=len(replies)))

    for row in events:
        kind, ev, at = row.get("type"), row.get("event") or {}, round(float(row["t"]) * output_rate)
        if kind in DELTA_TYPES:
            reply = get(str(ev.get("response_id")))
            offset, size = int(ev.get("audio_offset", 0)), int(ev.get("audio_bytes", 0))
            if offset + size > len(output):
                raise ValueError(f"output.pcm holds {len(output)} bytes, the trace needs {offset + size}")
            reply.deltas += 1
            if reply.status == "cancelled" or size == 0:
                continue
            start = at if player_end is None else max(at, player_end)
            reply.chunks.append([start, output[offset: offset + size]])
            player_end = start + size // 2
        elif kind in TRANSCRIPT_DELTA:
            get(str(ev.get("response_id")))._text_deltas.append(str(ev.get("delta") or ""))
        elif kind in TRANSCRIPT_DONE:
            get(str(ev.get("response_id"))).transcript = ev.get("transcript")
        elif kind == "response.done":
            response = ev.get("response") or {}
            reply = get(str(response.get("id")))
            reply.status = str(response.get("status") or "incomplete")
            reply.transcript = _done_transcript(response) or reply.transcript
            if reply.status == "cancelled" and reply.chunks:
                player_end = min(player_end, _cancel(reply, at)) if player_end is not None else None
    for reply in replies.values():
        if reply.transcript is None and reply._text_deltas:
            reply.transcript = "".join(reply._text_deltas)
    return list(replies.values())
