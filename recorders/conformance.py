"""Conformance battery: protocol scenarios against any /v1/realtime server, one result per rule.

One paced session is recorded (the question WAV when given, else 2 s of a quiet tone) and its
oracle verdict is split by rule; short probes on fresh connections then check how the server
answers bad client input. Each rule applies to the profiles it names; rules that cannot run
(no question audio) are ``skip``, never ``pass``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import tempfile
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake

from fdb.audio import Audio
from fdb.profiles import Profile, get_profile
from fdb.session_records import SessionRecord
from recorders.recording import session_update_body
from recorders.session import record_session

PROBE_TIMEOUT_S = 5.0
NO_SUCH_MODEL = "fdb-conformance-no-such-model"


class RuleResult(BaseModel):
    rule: str
    description: str
    status: Literal["pass", "fail", "skip"]
    detail: str = ""


# rule id -> (oracle rule prefix or None, description, applies to the profile)
SESSION_RULES: list[tuple[str, str | None, str, Any]] = [
    ("handshake", "handshake", "session.created -> session.update -> session.updated (echo, rates, grant)", None),
    ("paced-append", "input", "80 ms appends on an absolute schedule, seq contiguous, input complete", None),
    ("receipts", "accepted", "one sglang.input_audio.accepted per append at the cumulative ms", "receipts"),
    ("units", "units", "sglang.unit.done tiles the input in unit_ms steps", "receipts"),
    ("end-drain-close", "end", "end -> ended -> drained (arithmetic) -> session.close -> session.closed", "drain"),
    ("legacy-tail", "end", "the no-op session.update after the input is answered by session.updated", "tail"),
    ("responses", "responses", "response lifecycle: created/done pairs, reasons, cancellations", None),
    ("no-error", "error", "no error event and no client-side failure", None),
]


def _applies(profile: Profile, need: str | None) -> bool:
    return (need is None or (need == "receipts" and profile.expects_receipts)
            or (need == "drain" and profile.end_mode == "drain") or (need == "tail" and profile.end_mode == "tail"))


def session_results(rec: SessionRecord, profile: Profile, answered_expected: bool) -> list[RuleResult]:
    """The recorded session's verdict, split into one row per rule."""
    rows = []
    for rule, prefix, text, need in SESSION_RULES:
        if not _applies(profile, need):
            continue
        bad = [v for v in rec.verdict.violations if v.startswith(f"{prefix}:")]
        rows.append(RuleResult(rule=rule, description=text, status="fail" if bad else "pass", detail="; ".join(bad[:3])))
    pacing = rec.pacing
    rows.append(RuleResult(
        rule="pacing", description="no packet more than 80 ms off schedule (client side)",
        status="pass" if pacing.violations == 0 else "fail",
        detail=f"max lateness {pacing.max_lateness_ms} ms; loop lag max {rec.loop_lag.max_ms} ms",
    ))
    spoken = rec.responses.created >= 1 and rec.responses.output_bytes > 0
    rows.append(RuleResult(
        rule="question-answered", description="a spoken question gets a response with audio",
        status="skip" if not answered_expected else "pass" if spoken else "fail",
        detail="no --question given" if not answered_expected else
        f"{rec.responses.created} responses, {rec.responses.output_duration_s:.2f} s audio",
    ))
    return rows


async def _probe(url: str, profile: Profile, body: dict | None, payload: str, update: bool) -> tuple[str, str]:
    """Connect, (optionally) open the session, send ``payload``; ('error', code) when the server
    answers with an error event, else ('<what happened>', detail)."""
    headers = list(profile.extra_headers) or None
    try:
        async with asyncio.timeout(PROBE_TIMEOUT_S):
            async with connect(url, compression=None, ping_interval=None, proxy=None,
                               additional_headers=headers, max_size=16 * 1024 * 1024) as ws:
                steps = [await _until(ws, "session.created")]
                if update:
                    await ws.send(json.dumps({"type": "session.update", "event_id": "evt_conf_update", "session": body}))
                    steps.append(await _until(ws, "session.updated"))
                if any(e["type"] == "error" for e in steps):
                    return "handshake", "the handshake itself was answered with an error event"
                await ws.send(payload)
                event = await _until(ws, "error", "session.updated")
                if event["type"] == "error":
                    return "error", str((event.get("error") or {}).get("code"))
                return "accepted", f"answered with {event['type']}"
    except TimeoutError:
        return "silent", f"no error event within {PROBE_TIMEOUT_S:g} s"
    except ConnectionClosed as exc:
        return "closed", f"closed the connection (code {exc.rcvd.code if exc.rcvd else None}) without an error event"
    except (OSError, InvalidHandshake) as exc:
        return "unreachable", str(exc)


async def _until(ws, *types: str) -> dict:
    """The next event of one of ``types`` or an error event."""
    while True:
        event = json.loads(await ws.recv())
        if event.get("type") in types or event.get("type") == "error":
            return event


async def probe_results(url: str, profile: Profile, turn_detection: dict | None, model: str | None) -> list[RuleResult]:
    body = session_update_body(profile, turn_detection, model, None)
    packet = base64.b64encode(b"\0\0" * profile.packet_samples).decode()
    probes = [("invalid-json", "invalid JSON is answered with an error event", False, "{not json")]
    if profile.sends_seq:
        append = {"type": "input_audio_buffer.append", "event_id": "evt_conf_seq", "audio": packet, "sglang": {"seq": 5}}
        probes.append(("out-of-order-seq", "an append with seq 5 first is rejected", True, json.dumps(append)))
    if profile.session_shape == "ga":
        wrong = {**session_update_body(profile, turn_detection, None, None), "model": NO_SUCH_MODEL}
        update = {"type": "session.update", "event_id": "evt_conf_model", "session": wrong}
        probes.append(("model-mismatch", "session.update naming another model is rejected", False, json.dumps(update)))
    rows = []
    for rule, text, opened, payload in probes:
        what, detail = await _probe(url, profile, body, payload, opened)
        rows.append(RuleResult(rule=rule, description=text, status="pass" if what == "error" else "fail",
                               detail=f"error {detail}" if what == "error" else detail))
    return rows


def default_input(seconds: float = 2.0, rate: int = 16000) -> Audio:
    t = np.arange(int(seconds * rate)) / rate
    return Audio((0.02 * np.sin(2 * np.pi * 440 * t)).astype(np.float32), rate)


async def run_conformance(
    url: str, profile: str | Profile, turn_detection: dict | str | None = None, model: str | None = None,
    question: Audio | None = None, timeout_s: float = 60.0, tail_s: float | None = None,
) -> list[RuleResult]:
    """The whole battery; raises FdbError only for bad local arguments (profile, turn detection)."""
    profile = get_profile(profile)
    td = profile.validate_turn_detection(turn_detection)
    with tempfile.TemporaryDirectory(prefix="fdb-conformance-") as tmp:
        rec = await record_session(
            url, question or default_input(), Path(tmp) / "session", sample_id="conformance/session",
            variant="main", profile=profile, turn_detection=td, model=model, timeout_s=timeout_s, tail_s=tail_s,
        )
    rows = session_results(rec, profile, question is not None)
    if rec.status == "admission_denied" or "cannot connect" in (rec.failure or ""):
        return [RuleResult(rule="connect", description="the server accepts a WebSocket", status="fail",
                           detail=rec.failure or "")] + rows
    return rows + await probe_results(url, profile, td, model)
