"""One pair's semantic grading: the payload the judge sees, the request, and the verdict after
quote verification. Controls and real pairs go through exactly the same code."""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel

from fdb.records import OfficialTranscript
from judges.bodies import chat, decoding
from judges.config import JudgeSettings
from judges.engine import Parsed
from judges.semantic.rubric import AXES, CORRECT_HANDLING, SEMANTIC_PROMPT, STATUSES

SEMANTIC_SEED = 1
SEMANTIC_MAX_TOKENS = 8192  # thinking mode needs room; a truncated reply is invalid, not kept
MAX_ATTEMPTS = 3
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL)
_NON_WORD = re.compile(r"[^\w']+")


class PairView(BaseModel):
    """The inputs of one pair, whether read from a repeat or from a control file."""

    sample_id: str
    category: str
    transcripts: dict[str, OfficialTranscript]  # clean_input, input, clean_output, output
    metadata: dict[str, Any] | None = None


def _words(transcript: OfficialTranscript, start_s: float | None = None) -> str:
    keep = [c for c in transcript.chunks if start_s is None or c.timestamp[0] >= start_s]
    return " ".join(c.text.strip() for c in keep).strip()


def _overlap(meta: dict[str, Any] | None) -> list[float] | None:
    span = (meta or {}).get("timestamps")
    if isinstance(span, list) and len(span) == 2 and all(isinstance(v, int | float) for v in span):
        return [float(span[0]), float(span[1])]
    return None


def payload(pair: PairView) -> dict[str, Any]:
    """What the judge is shown for one pair."""
    t, meta = pair.transcripts, pair.metadata or {}
    overlap = _overlap(meta)
    return {
        "category": pair.category,
        "correct_handling": CORRECT_HANDLING.get(pair.category, "not defined for this category"),
        "earlier_context": meta.get("context_text") or None,
        "overlap_speech": meta.get("current_turn_text") or None,
        "overlap_window_s": overlap,
        "user_clean": t["clean_input"].text.strip(),
        "user_with_overlap": t["input"].text.strip(),
        "reply_without_overlap": t["clean_output"].text.strip(),
        "reply_with_overlap": t["output"].text.strip(),
        "reply_from_overlap_on": _words(t["output"], overlap[0]) if overlap else None,
    }


def semantic_requests(settings: JudgeSettings, pair: PairView) -> list[dict[str, Any]]:
    user = json.dumps(payload(pair), indent=2, ensure_ascii=False)
    extra = decoding(
        settings, enable_thinking=True, temperature=0.0, max_tokens=SEMANTIC_MAX_TOKENS
    )
    return [chat(settings.model, SEMANTIC_PROMPT, user, SEMANTIC_SEED, extra)] * MAX_ATTEMPTS


def normalize(text: str) -> str:
    return " ".join(_NON_WORD.sub(" ", text.lower().replace("\u2019", "'")).split())


def quote_found(quote: Any, sources: list[str]) -> bool:
    """True when the quote, normalized, is a whole-word passage of one of the sources."""
    if not isinstance(quote, str) or not normalize(quote):
        return False
    needle = f" {normalize(quote)} "
    return any(needle in f" {normalize(src)} " for src in sources)


def _sources(shown: dict[str, Any]) -> list[str]:
    return [
        v
        for k, v in shown.items()
        if isinstance(v, str) and k not in ("category", "correct_handling")
    ]


def parse_verdict(text: str, shown: dict[str, Any]) -> Parsed:
    """The first JSON object holding the three axes; a verdict with a missing or wrong quote
    becomes unresolved. A malformed status makes the reply invalid."""
    text = _THINK.sub("", text)
    decoder = json.JSONDecoder()
    start = text.find("{")
    while start != -1:
        try:
            obj, _ = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            obj = None
        if isinstance(obj, dict) and all(axis in obj for axis in AXES):
            return _verdict(obj, _sources(shown))
        start = text.find("{", start + 1)
    return Parsed("unparsed", reason="no JSON object with the three axes")


def _verdict(obj: dict[str, Any], sources: list[str]) -> Parsed:
    axes: dict[str, dict[str, Any]] = {}
    for axis in AXES:
        item = obj[axis]
        status = item.get("status") if isinstance(item, dict) else None
        if status not in STATUSES:
            return Parsed(
                "invalid",
                {"reply": obj},
                f"{axis}: status {status!r} is not one of {', '.join(STATUSES)}",
            )
        found = quote_found(item.get("quote"), sources)
        final = status if found or status == "unresolved" else "unresolved"
        axes[axis] = {
            "status": final,
            "judge_status": status,
            "quote": item.get("quote"),
            "quote_found": found,
            "reason": item.get("reason"),
        }
    return Parsed("ok", {"axes": axes, "joint": joint([a["status"] for a in axes.values()])})


def joint(statuses: list[str]) -> str:
    """accept only when all three accept; fail when any fails; unresolved otherwise."""
    if all(s == "accept" for s in statuses):
        return "accept"
    return "fail" if "fail" in statuses else "unresolved"
