"""Conformance battery: protocol scenarios against any /v1/realtime server, one result per rule.

1. One paced session is recorded (the spoken question between 0.5 s of silence and
   ``reply_room_s`` of silence: fdb's Piper voice by default, :mod:`recorders.conformance_speech`)
   and its oracle verdict is split by rule; for the 24 kHz profiles the session also shows
   whether the server reads the input at 24 kHz (``input-24k``).
2. Short probes on fresh connections check how the server answers bad client input.
3. Scenarios on fresh connections (:mod:`recorders.conformance_scenarios`) make the server do
   what a recorded session may never show: barge-in with ``interrupt_response`` on and off,
   ``response.cancel``, ``conversation.item.truncate``, and ``commit`` with
   ``turn_detection: null`` (profiles with server-side turn detection).

Each rule applies to the profiles it names (others leave it out). A rule whose scenario did not
happen (the handshake failed, no input was sent, no reply came to barge into) is
``not exercised``: neither a pass nor a fail, and listed in the summary.
"""

from __future__ import annotations

import asyncio
import base64
import json
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake

from fdb.audio import Audio
from fdb.dialects import Dialect, get_dialect, views
from fdb.errors import FdbError
from fdb.session_records import SessionRecord, TraceEvent, read_trace
from recorders.conformance_scenarios import (
    RuleResult,
    ScenarioInput,
    Status,
    describe,
    run_scenarios,
)
from recorders.conformance_speech import padded, spoken_question, trimmed
from recorders.session import record_session

PROBE_TIMEOUT_S = 5.0
NO_SUCH_MODEL = "fdb-conformance-no-such-model"
DEFAULT_TURN_DETECTION = {"type": "server_vad", "silence_duration_ms": 500}
LEAD_S = 0.5  # silence before the question in the recorded session
TIMELINE_SLACK_MS = 100.0  # a VAD event may name the ms of the packet in flight
EARLY_STOP_MS = 300.0  # a speech_stopped this far before the question's end is off the timeline
INPUT_24K = (
    "24 kHz PCM16 input is read at 24 kHz (declared rate; speech_started/stopped on the sent "
    "timeline)"
)
SCENARIO_RULES = ("barge-in", "barge-in-off", "cancel", "truncate", "commit", "commit-response")


def default_turn_detection(profile: Dialect) -> dict[str, Any] | None:
    """server_vad with 500 ms of silence for profiles with server-side turn detection (turn-based,
    legacy, OpenAI); none for the native profile, which takes none."""
    return dict(DEFAULT_TURN_DETECTION) if profile.turn_detection.required else None


def resolve_turn_detection(
    profile: Dialect, value: dict[str, Any] | str | None
) -> dict[str, Any] | None:
    """``--turn-detection`` as given (checked by the profile), or the profile's default when
    empty."""
    if value is None or value == "":
        return default_turn_detection(profile)
    return profile.validate_turn_detection(value)


# --- the recorded session ------------------------------------------------------------------------


@dataclass(frozen=True)
class SessionFacts:
    """What the recorded session's trace shows happened, for deciding what was exercised."""

    connected: bool
    opened: bool  # session.updated answered the session.update
    appends: int
    input_complete: bool  # every packet of the input was sent
    end_sent: bool  # sglang.input_audio.end (drain) / the tail session.update (tail)
    responses: int  # response.created / response.done / audio deltas received
    why: str  # why the session stopped early ("" when it did not)

    @classmethod
    def of(cls, trace: Sequence[TraceEvent], rec: SessionRecord, profile: Dialect) -> SessionFacts:
        sends = [e for e in trace if e.dir == "send"]
        recvs = [e for e in trace if e.dir == "recv"]
        sent_bytes = sum(
            int(e.event.get("audio_bytes", 0))
            for e in sends
            if e.type == "input_audio_buffer.append"
        )
        updates = sum(e.type == "session.update" for e in sends)
        end_sent = (
            updates >= 2
            if profile.end.mode == "tail"
            else any(e.type == "sglang.input_audio.end" for e in sends)
        )
        kinds = {"response.created", "response.done", *profile.events.audio_delta}
        return cls(
            connected=bool(recvs),
            opened=any(e.type == "session.updated" for e in recvs),
            appends=sum(e.type == "input_audio_buffer.append" for e in sends),
            input_complete=sent_bytes >= rec.input.samples * 2 > 0,
            end_sent=end_sent,
            responses=sum(e.type in kinds for e in recvs),
            why=rec.failure or "",
        )


# rule id -> (oracle rule prefix, description, applies to the profile, exercised when)
SESSION_RULES: list[
    tuple[str, str, str, Callable[[Dialect], bool], Callable[[SessionFacts], bool]]
] = [
    (
        "handshake",
        "handshake",
        "session.created -> session.update -> session.updated (echo, rates, grant)",
        lambda p: True,
        lambda f: f.connected,
    ),
    (
        "paced-append",
        "input",
        "80 ms appends on an absolute schedule, seq contiguous, input complete",
        lambda p: True,
        lambda f: f.opened and f.appends > 0,
    ),
    (
        "receipts",
        "accepted",
        "one sglang.input_audio.accepted per append at the cumulative ms",
        lambda p: p.events.receipts,
        lambda f: f.opened and f.appends > 0,
    ),
    (
        "units",
        "units",
        "sglang.unit.done tiles the input in unit_ms steps",
        lambda p: p.events.unit_done,
        lambda f: f.opened and f.appends > 0,
    ),
    (
        "end-drain-close",
        "end",
        "end -> ended -> drained (arithmetic) -> session.close -> session.closed",
        lambda p: p.end.mode == "drain",
        lambda f: f.end_sent,
    ),
    (
        "legacy-tail",
        "end",
        "the no-op session.update after the input is answered by session.updated",
        lambda p: p.end.mode == "tail",
        lambda f: f.end_sent,
    ),
    (
        "responses",
        "responses",
        "response lifecycle: created/done pairs, reasons, cancellations",
        lambda p: True,
        lambda f: f.responses > 0,
    ),
    (
        "no-error",
        "error",
        "no error event and no client-side failure",
        lambda p: True,
        lambda f: f.connected,
    ),
]


def _not_run(facts: SessionFacts) -> str:
    if not facts.opened:
        return "the handshake failed (no session.updated)" + (f": {facts.why}" if facts.why else "")
    if facts.appends == 0:
        return "no input was sent" + (f": {facts.why}" if facts.why else "")
    if not facts.end_sent:
        return "the session ended before the input's end" + (f": {facts.why}" if facts.why else "")
    return "no response arrived" + (f" ({facts.why})" if facts.why else "")


def _left_open(trace: Sequence[TraceEvent], violations: list[str]) -> tuple[list[str], str]:
    """A ``tail`` session ends when its no-op session.update is answered, whether or not a reply
    is still being sent: a response the client left in progress has no response.done through no
    fault of the server. Those violations are taken out (and named); every other one stays."""
    created = [
        views.lenient(views.ResponseEvent, e.event).body.shown("id")
        for e in trace
        if e.dir == "recv" and e.type == "response.created"
    ]
    done = {
        views.as_key(views.lenient(views.ResponseEvent, e.event).body.shown("id"))
        for e in trace
        if e.dir == "recv" and e.type == "response.done"
    }
    left = [rid for rid in created if views.as_key(rid) not in done]
    kept = [
        v
        for v in violations
        if not any(
            v.startswith(f"responses: response {rid!r} has no response.done") for rid in left
        )
    ]
    if len(kept) == len(violations):
        return violations, ""
    return (
        kept,
        f"{len(left)} response(s) still in progress when the client ended the session (not judged)",
    )


def session_results(
    rec: SessionRecord,
    trace: Sequence[TraceEvent],
    profile: Dialect,
    speech_ms: tuple[float, float],
) -> list[RuleResult]:
    """The recorded session's verdict, split into one row per rule; a rule whose part of the
    session never happened is ``not exercised``."""
    facts = SessionFacts.of(trace, rec, profile)
    rows = []
    for rule, prefix, text, applies, exercised in SESSION_RULES:
        if not applies(profile):
            continue
        bad = [v for v in rec.verdict.violations if v.startswith(f"{prefix}:")]
        if not exercised(facts):
            rows.append(
                RuleResult(
                    rule=rule, description=text, status="not exercised", detail=_not_run(facts)
                )
            )
            continue
        note = ""
        if rule == "responses" and profile.end.mode == "tail":
            bad, note = _left_open(trace, bad)
        rows.append(
            RuleResult(
                rule=rule,
                description=text,
                status="fail" if bad else "pass",
                detail="; ".join(bad[:3] + ([note] if note else [])),
            )
        )
    pacing = rec.pacing
    rows.append(
        RuleResult(
            rule="pacing",
            description="no packet more than 80 ms off schedule (client side)",
            status="not exercised"
            if facts.appends == 0
            else "pass"
            if pacing.violations == 0
            else "fail",
            detail=_not_run(facts)
            if facts.appends == 0
            else f"max lateness {pacing.max_lateness_ms} ms; loop lag max {rec.loop_lag.max_ms} ms",
        )
    )
    spoken = rec.responses.created >= 1 and rec.responses.output_bytes > 0
    rows.append(
        RuleResult(
            rule="question-answered",
            description="the spoken question gets a response with audio",
            status="not exercised" if not facts.input_complete else "pass" if spoken else "fail",
            detail=_not_run(facts)
            if not facts.input_complete
            else f"{rec.responses.created} responses, {rec.responses.output_duration_s:.2f} s "
            "audio",
        )
    )
    if profile.formats.input_rate == 24000:
        rows.append(input_rate_result(trace, profile, speech_ms, facts))
    return rows


def _declared_input(profile: Dialect, trace: Sequence[TraceEvent]) -> str | None:
    """What the first session.updated declares about the input format, when it declares it
    wrong for 24 kHz PCM16 (None when it is right or says nothing)."""
    updated = next((e for e in trace if e.dir == "recv" and e.type == "session.updated"), None)
    session = views.lenient(views.SessionEvent, updated.event).session if updated else None
    return profile.session.wrong_24k_input(session or {})


def input_rate_result(
    trace: Sequence[TraceEvent],
    profile: Dialect,
    speech_ms: tuple[float, float],
    facts: SessionFacts,
) -> RuleResult:
    """``input-24k``: the server takes 24 kHz PCM16 and reads it at 24 kHz: it declares no other
    rate, and its speech_started/stopped ms fall on the client's timeline (a server that read
    24 kHz as 16 kHz would name ms 1.5 times later than the audio sent by then)."""
    text = INPUT_24K
    wrong = _declared_input(profile, trace)
    if wrong:
        return RuleResult(rule="input-24k", description=text, status="fail", detail=wrong)
    if not facts.opened or facts.appends == 0:
        return RuleResult(
            rule="input-24k", description=text, status="not exercised", detail=_not_run(facts)
        )
    sent, problems, seen = 0.0, [], []
    for ev in trace:
        if ev.dir == "send" and ev.type == "input_audio_buffer.append":
            sent += int(ev.event.get("audio_bytes", 0)) / 2 / (profile.formats.input_rate / 1000.0)
            continue
        key = (
            {
                "input_audio_buffer.speech_started": "audio_start_ms",
                "input_audio_buffer.speech_stopped": "audio_end_ms",
            }.get(ev.type)
            if ev.dir == "recv"
            else None
        )
        value = views.lenient(views.InputItemEvent, ev.event).shown(key) if key else None
        if not isinstance(value, int | float) or isinstance(value, bool):
            continue
        seen.append(f"{ev.type.rsplit('.', 1)[-1]} {value:g}")
        if value > sent + TIMELINE_SLACK_MS:
            problems.append(
                f"{ev.type} {key} {value:g} is beyond the {sent:.0f} ms of audio sent by then"
            )
        if key == "audio_end_ms" and len(seen) <= 2 and value < speech_ms[1] - EARLY_STOP_MS:
            problems.append(
                f"the first speech_stopped is at {value:g} ms, the question ends at "
                f"{speech_ms[1]:.0f} ms"
            )
    if problems:
        return RuleResult(
            rule="input-24k",
            description=text,
            status="fail",
            detail="; ".join(problems[:2]) + ": the server reads the input at another rate",
        )
    if not seen:
        return RuleResult(
            rule="input-24k",
            description=text,
            status="not exercised",
            detail="no speech_started/speech_stopped with a time to place on the timeline",
        )
    return RuleResult(
        rule="input-24k",
        description=text,
        status="pass",
        detail=f"question at {speech_ms[0]:.0f}-{speech_ms[1]:.0f} ms; server: "
        f"{', '.join(seen[:2])}",
    )


# --- probes --------------------------------------------------------------------------------------


async def _probe(
    url: str, profile: Dialect, body: dict | None, payload: str, update: bool
) -> tuple[str, str]:
    """Connect, (optionally) open the session, send ``payload``; ('error', code) when the server
    answers with an error event, else ('<what happened>', detail)."""
    headers = list(profile.client.headers) or None
    try:
        async with asyncio.timeout(PROBE_TIMEOUT_S):
            async with connect(
                url,
                compression=None,
                ping_interval=None,
                proxy=None,
                additional_headers=headers,
                max_size=16 * 1024 * 1024,
            ) as ws:
                steps = [await _until(ws, views.SESSION_CREATED)]
                if update:
                    await ws.send(
                        json.dumps(
                            {
                                "type": "session.update",
                                "event_id": "evt_conf_update",
                                "session": body,
                            }
                        )
                    )
                    steps.append(await _until(ws, views.SESSION_UPDATED))
                if any(isinstance(e, views.Error) for e in steps):
                    return "handshake", "the handshake itself was answered with an error event"
                await ws.send(payload)
                event = await _until(ws, views.ERROR, views.SESSION_UPDATED)
                if isinstance(event, views.Error):
                    return "error", str(event.body.shown("code"))
                return "accepted", f"answered with {event.type}"
    except TimeoutError:
        return "silent", f"no error event within {PROBE_TIMEOUT_S:g} s"
    except ConnectionClosed as exc:
        return (
            "closed",
            f"closed the connection (code {exc.rcvd.code if exc.rcvd else None}) without an error "
            "event",
        )
    except (OSError, InvalidHandshake) as exc:
        return "unreachable", str(exc)


async def _until(ws, *types: str) -> views.Event:
    """The next event of one of ``types`` or an error event, read through its view."""
    while True:
        event = views.read_event(json.loads(await ws.recv()))
        if event.type in types or event.type == views.ERROR:
            return event


def _probes(profile: Dialect, turn_detection: dict | None) -> list[tuple[str, str, bool, str]]:
    packet = base64.b64encode(b"\0\0" * profile.packet_samples).decode()
    probes = [("invalid-json", "invalid JSON is answered with an error event", False, "{not json")]
    if profile.client.sends_seq:
        append = {
            "type": "input_audio_buffer.append",
            "event_id": "evt_conf_seq",
            "audio": packet,
            "sglang": {"seq": 5},
        }
        probes.append(
            ("out-of-order-seq", "an append with seq 5 first is rejected", True, json.dumps(append))
        )
    if profile.session.names_model:
        wrong = {**profile.session_update(turn_detection, None, None), "model": NO_SUCH_MODEL}
        update = {"type": "session.update", "event_id": "evt_conf_model", "session": wrong}
        probes.append(
            (
                "model-mismatch",
                "session.update naming another model is rejected",
                False,
                json.dumps(update),
            )
        )
    return probes


async def probe_results(
    url: str,
    profile: Dialect,
    turn_detection: dict | None,
    model: str | None,
    only: set[str] | None = None,
) -> list[RuleResult]:
    body = profile.session_update(turn_detection, model, None)
    rows = []
    for rule, text, opened, payload in _probes(profile, turn_detection):
        if only is not None and rule not in only:
            continue
        what, detail = await _probe(url, profile, body, payload, opened)
        status: Status = (
            "pass"
            if what == "error"
            else "not exercised"
            if what in ("handshake", "unreachable")
            else "fail"
        )
        rows.append(
            RuleResult(
                rule=rule,
                description=text,
                status=status,
                detail=f"error {detail}" if what == "error" else detail,
            )
        )
    return rows


# --- the battery ---------------------------------------------------------------------------------


def rule_table(profile: Dialect) -> list[tuple[str, str]]:
    """(rule, what it checks) of every rule the battery reports for ``profile``, in table order."""
    rows = [(rule, text) for rule, _, text, applies, _ in SESSION_RULES if applies(profile)]
    rows += [
        ("pacing", "no packet more than 80 ms off schedule (client side)"),
        ("question-answered", "the spoken question gets a response with audio"),
    ]
    if profile.formats.input_rate == 24000:
        rows.append(("input-24k", INPUT_24K))
    rows += [(rule, text) for rule, text, *_ in _probes(profile, None)]
    if profile.turn_detection.required:
        rows += [(rule, describe(rule, profile)) for rule in SCENARIO_RULES]
    return rows


def question_speech(question: Audio | None) -> Audio:
    """The question trimmed to its speech: the user's WAV, else fdb's spoken question."""
    source = question if question is not None else spoken_question()
    speech = trimmed(source)
    if speech is None:
        raise FdbError(
            "the --question WAV holds no speech (nothing above -40 dBFS)",
            "pass a WAV of a spoken question, or leave --question out for fdb's own",
        )
    return speech


async def _record(
    url: str,
    profile: Dialect,
    speech: Audio,
    td: dict | None,
    model: str | None,
    timeout_s: float,
    tail_s: float | None,
    reply_room_s: float,
) -> tuple[SessionRecord, list[TraceEvent]]:
    audio = padded(speech, speech.rate, LEAD_S, reply_room_s)
    with tempfile.TemporaryDirectory(prefix="fdb-conformance-") as tmp:
        rec = await record_session(
            url,
            audio,
            Path(tmp) / "session",
            sample_id="conformance/session",
            variant="main",
            profile=profile,
            turn_detection=td,
            model=model,
            timeout_s=timeout_s,
            tail_s=tail_s,
        )
        trace_path = Path(tmp) / "session" / "trace.jsonl"
        trace = read_trace(trace_path) if trace_path.exists() else []
    return rec, trace


def _unreachable(profile: Dialect, rec: SessionRecord, only: set[str] | None) -> list[RuleResult]:
    rows = [
        RuleResult(
            rule="connect",
            description="the server accepts a WebSocket",
            status="fail",
            detail=rec.failure or "",
        )
    ]
    for rule, text in rule_table(profile):
        if only is None or rule in only:
            rows.append(
                RuleResult(
                    rule=rule,
                    description=text,
                    status="not exercised",
                    detail="the server could not be reached",
                )
            )
    return rows


async def run_conformance(
    url: str,
    profile: str | Dialect,
    turn_detection: dict | str | None = None,
    model: str | None = None,
    question: Audio | None = None,
    timeout_s: float = 60.0,
    tail_s: float | None = None,
    reply_timeout_s: float = 30.0,
    reply_room_s: float = 4.0,
    only: set[str] | None = None,
) -> list[RuleResult]:
    """The whole battery (the rules in ``only``, when given); raises FdbError only for bad local
    arguments (profile, turn detection, a question without speech)."""
    profile = get_dialect(profile)
    td = resolve_turn_detection(profile, turn_detection)
    speech = question_speech(question)
    rows: list[RuleResult] = []
    session_rules = (
        {r for r, _ in rule_table(profile)}
        - set(SCENARIO_RULES)
        - {r for r, *_ in _probes(profile, None)}
    )
    if only is None or only & session_rules:
        rec, trace = await _record(url, profile, speech, td, model, timeout_s, tail_s, reply_room_s)
        if rec.status == "admission_denied" or "cannot connect" in (rec.failure or ""):
            return _unreachable(profile, rec, only)
        speech_ms = (LEAD_S * 1000.0, (LEAD_S + speech.duration_s) * 1000.0)
        rows += [
            r
            for r in session_results(rec, trace, profile, speech_ms)
            if only is None or r.rule in only
        ]
    rows += await probe_results(url, profile, td, model, only)
    if profile.turn_detection.required:
        inp = ScenarioInput(
            url,
            profile,
            td,
            model,
            speech.resample(profile.formats.input_rate).to_pcm16(),
            reply_timeout_s,
        )
        rows += await run_scenarios(inp, only)
    return rows
