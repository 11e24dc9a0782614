"""The protocol oracle: a pure function of a trace that says whether a session followed its dialect.

Each violation names its rule and the event index. The rules below are the ``turn-based``
dialect's; the others differ where their ``Dialect`` (fdb.dialects) says so:

- native (``minicpmo-native-pr2377``): tail policy ``pad`` (drained reports the padding up to
  a whole 1 s unit), the granted capabilities named in ``oracle.required_grant`` must be
  granted, responses end completed/stop, or cancelled/client_closed only after session.close.
  With ``oracle.native``: ``drain``: no response.created, no audio delta and no completed
  response.done after sglang.input_audio.drained (a reply must be over before the drain); no
  response.created before session.updated; one audio item per response (``responses``); for
  unit-aligned input one extra empty (0 ms) unit may close the input (``units``).
- native 80 ms (``personaplex-native-80ms``, ``responses.single``): the native rules, at
  80 ms units and 24 kHz input, except that the whole session is one response: a second
  response.created is a ``responses`` violation, its response.done may follow the drain, and a
  response completed with reason ``input_audio_ended`` must come after sglang.input_audio.end.
- legacy and OpenAI (``end.mode == "tail"``): no receipts and no units; the appends carry no
  seq; the session ends with a second, no-op session.update after the last append that a second
  session.updated answers; turn_detection is echoed where the profile's session shape puts it
  (flat for beta); a response cancelled with reason turn_detected needs an
  input_audio_buffer.speech_started *during* it (after its response.created).
- any profile: an audio delta that names a ``sample_rate_hz`` other than the profile's output
  rate, or a session.updated that declares another output rate, is a ``handshake`` violation.

- ``clock``: trace times never decrease.
- ``handshake``: exactly one session.created, then one session.update, then one
  session.updated answering it; session.updated echoes the requested turn_detection.type under
  session.audio.input.turn_detection, and any declared audio rates match the profile.
- ``input``: appends are sent after session.updated and before sglang.input_audio.end, with
  seq 0, 1, 2, ... and audio totalling the input length.
- ``accepted``: one sglang.input_audio.accepted per append, in seq order, with accepted_end_ms
  equal to the cumulative input ms (to within 1 ms of rounding).
- ``units``: sglang.unit.done ids unit_0, unit_1, ... with media_time.t_start_ms = k * unit_ms;
  every unit but the last lasts unit_ms, durations sum to the input ms (every accepted byte is
  accounted in exactly one unit), all before drained, and none before the client sent the audio
  that completes it.
- ``end``: one sglang.input_audio.end after the last append; one sglang.input_audio.ended after
  it with the profile's tail_policy; one sglang.input_audio.drained after that with
  consumed_ms = input ms, discarded_ms = 0 and the profile's padding; one session.close after
  drained; one session.closed after the close; nothing sent or received after session.closed.
- ``responses``: every response.created gets exactly one response.done; completed responses end
  with reason stop or empty_turn, cancelled ones with interrupted, and each cancellation consumes
  its own earlier input_audio_buffer.speech_started (one speech_started cannot justify two
  cancellations); no audio delta for a response before its response.created or after its
  response.done.
- ``error``: any server error event fails the session; so does any client-side ``failure`` note.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, TypeVar

from fdb.dialects import Dialect, views
from fdb.session_records import TraceEvent, Verdict

MS_TOLERANCE = 1.0  # servers may round receipt times to whole milliseconds

V = TypeVar("V", bound=views.Event)


class _Checker:
    """The trace and the violations found so far. A received event is read through a view
    (:mod:`fdb.dialects.views`), so that a value of the wrong type is judged, never a crash;
    a value a check compares or a message quotes is the one received (``shown``). A sent event
    or a note is the client's own record, read as the dict it wrote."""

    def __init__(self, events: Sequence[TraceEvent]):
        self.events = events
        self.violations: list[str] = []
        self._views: dict[int, views.Event] = {}

    def add(self, rule: str, message: str, index: int | None = None) -> None:
        where = f" (event {index})" if index is not None else ""
        self.violations.append(f"{rule}: {message}{where}")

    def find(self, direction: str, type_: str) -> list[int]:
        return [i for i, ev in enumerate(self.events) if ev.dir == direction and ev.type == type_]

    def one(
        self, rule: str, direction: str, type_: str, after: int | None, after_name: str
    ) -> int | None:
        """The single ``type_`` event, which must come after index ``after``; None when absent."""
        found = self.find(direction, type_)
        if not found:
            self.add(rule, f"no {type_}")
            return None
        if len(found) > 1:
            self.add(rule, f"{len(found)} {type_} events, expected one", found[1])
        if after is not None and found[0] < after:
            self.add(rule, f"{type_} before {after_name}", found[0])
        return found[0]

    def ev(self, index: int) -> dict[str, Any]:
        """A sent event or a note, as the client wrote it."""
        return self.events[index].event

    def view(self, index: int, view: type[V]) -> V:
        """The received event at ``index`` read as ``view`` (the one its trace type names), made
        once."""
        found = self._views.get(index)
        if not isinstance(found, view):
            found = self._views[index] = views.lenient(view, self.events[index].event)
        return found


def judge_trace(
    events: Sequence[TraceEvent],
    profile: Dialect,
    requested_turn_detection: dict[str, Any] | None,
    input_ms: float,
) -> Verdict:
    """Judge a session trace against ``profile``; ``input_ms`` is the input length sent."""
    c = _Checker(events)
    _check_clock(c)
    _check_errors(c)
    updated = _check_handshake(c, profile, requested_turn_detection)
    appends = _check_input(c, profile, updated, input_ms)
    if profile.events.receipts:
        _check_accepted(c, profile, appends)
    if profile.end.mode == "tail":
        _check_tail_end(c, appends)
    else:
        _check_end(c, profile, appends, input_ms)
    if profile.events.unit_done:
        _check_units(c, profile, input_ms)
    _check_responses(c, profile)
    if profile.oracle.native:
        _check_native(c, profile)
    if profile.responses.single:
        _check_single_response(c)
    return Verdict(status="fail" if c.violations else "pass", violations=c.violations)


def _check_clock(c: _Checker) -> None:
    for i in range(1, len(c.events)):
        if c.events[i].t < c.events[i - 1].t:
            c.add("clock", "trace time went backwards", i)
            return


def _check_errors(c: _Checker) -> None:
    for i, ev in enumerate(c.events):
        if ev.dir == "recv" and ev.type == "error":
            event = c.view(i, views.Error)
            if event.error is None and event.shown("error"):  # neither an object nor empty
                quoted = event.shown("error")
                c.add("error", f"server error event with error {quoted!r}, not an object", i)
                continue
            err = event.body
            c.add("error", f"server error {err.shown('code')}: {err.shown('message')}", i)
        elif ev.dir == "note" and ev.type == "failure":
            c.add("error", f"session failed: {ev.event.get('reason')}", i)


def _check_handshake(c: _Checker, profile: Dialect, requested: dict[str, Any] | None) -> int | None:
    """session.created -> session.update -> session.updated, with the turn_detection echo."""
    created = c.one("handshake", "recv", "session.created", None, "")
    if profile.end.mode == "tail":  # the second update/updated pair is the liveness tail
        update = _first(c, "handshake", "send", "session.update", created, "session.created")
        updated = _first(c, "handshake", "recv", "session.updated", update, "session.update")
    else:
        update = c.one("handshake", "send", "session.update", created, "session.created")
        updated = c.one("handshake", "recv", "session.updated", update, "session.update")
    if update is None or updated is None:
        return updated
    answer = c.view(updated, views.SessionEvent)
    answered = answer.shown("client_event_id")
    if answered is not None and answered != c.ev(update).get("event_id"):
        c.add("handshake", "session.updated answers another client event", updated)
    session = answer.session or {}
    in_rate = views.at(session, "audio", "input", "format", "rate")
    out_rate = profile.session.declared_output_rate(session)
    if in_rate is not None and in_rate != profile.formats.input_rate:
        c.add("handshake", f"input rate {in_rate}, expected {profile.formats.input_rate}", updated)
    if out_rate is not None and out_rate != profile.formats.output_rate:
        c.add(
            "handshake", f"output rate {out_rate}, expected {profile.formats.output_rate}", updated
        )
    if requested is not None:
        echoed = profile.session.echoed_turn_detection(session)
        got = echoed.get("type") if echoed else None
        if got != requested.get("type"):
            c.add(
                "handshake",
                f"session.updated echoes turn_detection type {got!r}, requested "
                f"{requested.get('type')!r}",
                updated,
            )
    _check_grant(c, profile, session, updated)
    return updated


def _first(
    c: _Checker, rule: str, direction: str, type_: str, after: int | None, after_name: str
) -> int | None:
    found = c.find(direction, type_)
    if not found:
        c.add(rule, f"no {type_}")
        return None
    if after is not None and found[0] < after:
        c.add(rule, f"{type_} before {after_name}", found[0])
    return found[0]


def _check_grant(c: _Checker, profile: Dialect, session: dict[str, Any], updated: int) -> None:
    for key, want in profile.oracle.required_grant:
        got = views.at(session, "sglang", "granted", key)
        if got != want:
            c.add("handshake", f"granted {key} is {got!r}, the profile needs {want!r}", updated)


def _check_input(c: _Checker, profile: Dialect, updated: int | None, input_ms: float) -> list[int]:
    """Appends after session.updated, seq contiguous from 0 (where sent), totalling the input."""
    appends = c.find("send", "input_audio_buffer.append")
    total_bytes = 0
    for k, i in enumerate(appends):
        if updated is not None and i < updated:
            c.add("input", "append before session.updated", i)
        seq = (c.ev(i).get("sglang") or {}).get("seq")
        if profile.client.sends_seq and seq != k:
            c.add("input", f"append seq {seq}, expected {k}", i)
        total_bytes += int(c.ev(i).get("audio_bytes", 0))
    sent_ms = total_bytes / 2 / (profile.formats.input_rate / 1000.0)
    if abs(sent_ms - input_ms) > 1e-6:
        c.add("input", f"appends carry {sent_ms:g} ms of audio, the input is {input_ms:g} ms")
    return appends


def _check_accepted(c: _Checker, profile: Dialect, appends: list[int]) -> None:
    """One accepted receipt per append, in seq order, at the cumulative input ms."""
    accepted = c.find("recv", "sglang.input_audio.accepted")
    if len(accepted) != len(appends):
        c.add("accepted", f"{len(accepted)} accepted receipts for {len(appends)} appends")
    cumulative = 0.0
    for k, i in enumerate(accepted):
        event = c.view(i, views.InputAudioReceipt)
        if event.shown("seq") != k:
            c.add("accepted", f"accepted seq {event.shown('seq')}, expected {k}", i)
        if k >= len(appends):
            continue
        cumulative += (
            int(c.ev(appends[k]).get("audio_bytes", 0)) / 2 / (profile.formats.input_rate / 1000.0)
        )
        if i < appends[k]:
            c.add("accepted", f"seq {k} accepted before it was sent", i)
        end_ms = event.shown("accepted_end_ms")
        if not _near(end_ms, cumulative):
            c.add("accepted", f"seq {k} accepted_end_ms {end_ms}, expected {cumulative:g}", i)
        client_id = event.shown("client_event_id")
        if client_id is not None and client_id != c.ev(appends[k]).get("event_id"):
            c.add("accepted", f"seq {k} receipt names another client event", i)


def _check_end(c: _Checker, profile: Dialect, appends: list[int], input_ms: float) -> None:
    """end -> ended -> drained -> close -> closed, with the drain arithmetic."""
    end = c.one(
        "end", "send", "sglang.input_audio.end", appends[-1] if appends else None, "the last append"
    )
    for i in appends:
        if end is not None and i > end:
            c.add("input", "append after sglang.input_audio.end", i)
    drain_after, drain_name = end, "sglang.input_audio.end"
    if profile.events.receipts:
        ended = c.one("end", "recv", "sglang.input_audio.ended", end, "sglang.input_audio.end")
        if ended is not None:
            policy = c.view(ended, views.InputAudioReceipt).shown("tail_policy")
            if policy != profile.units.tail_policy:
                c.add(
                    "end", f"tail_policy {policy!r}, expected {profile.units.tail_policy!r}", ended
                )
            _check_ms(c, ended, "accepted_end_ms", input_ms)
        drained = c.one(
            "end", "recv", "sglang.input_audio.drained", ended, "sglang.input_audio.ended"
        )
        if drained is not None:
            for key, want in (
                ("accepted_end_ms", input_ms),
                ("consumed_ms", input_ms),
                ("discarded_ms", 0.0),
                ("padding_ms", profile.units.padding_ms(input_ms)),
            ):
                _check_ms(c, drained, key, want)
        drain_after, drain_name = drained, "sglang.input_audio.drained"
    close = c.one("end", "send", "session.close", drain_after, drain_name)
    closed = c.one("end", "recv", "session.closed", close, "session.close")
    if closed is not None:
        for i in range(closed + 1, len(c.events)):
            if c.events[i].dir != "note":
                c.add("end", f"{c.events[i].type} after session.closed", i)


def _check_tail_end(c: _Checker, appends: list[int]) -> None:
    """The --legacy-tail end: exactly two session.update; the second, after the last append, is
    answered by a second session.updated."""
    updates, updateds = c.find("send", "session.update"), c.find("recv", "session.updated")
    if len(updates) != 2:
        c.add("end", f"{len(updates)} session.update events, expected the handshake and the tail")
        return
    tail = updates[1]
    if appends and tail < appends[-1]:
        c.add("end", "the tail session.update before the last append", tail)
    answers = [i for i in updateds if i > tail]
    if len(updateds) != 2 or not answers:
        c.add(
            "end",
            f"{len(updateds)} session.updated events; the tail session.update has no answer",
            tail,
        )
        return
    answered = c.view(answers[0], views.SessionEvent).shown("client_event_id")
    if answered is not None and answered != c.ev(tail).get("event_id"):
        c.add("end", "the tail session.updated answers another client event", answers[0])


def _check_ms(c: _Checker, index: int, key: str, want: float) -> None:
    value = c.view(index, views.InputAudioReceipt).shown(key)
    if not _near(value, want):
        c.add("end", f"{c.events[index].type} {key} {value}, expected {want:g}", index)


def _near(value: Any, want: float) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and abs(value - want) < MS_TOLERANCE
    )


def _check_units(c: _Checker, profile: Dialect, input_ms: float) -> None:
    """unit_k tiles the input in unit_ms steps; the flushed last unit may be short."""
    units = c.find("recv", "sglang.unit.done")
    drained = c.find("recv", "sglang.input_audio.drained")
    expected = math.ceil(input_ms / profile.units.unit_ms - 1e-9) if input_ms > 0 else 0
    if (
        profile.oracle.native
        and len(units) == expected + 1
        and _empty_eos_unit(c, units[-1], input_ms, profile)
    ):
        units = units[:-1]  # the empty unit that closes unit-aligned input
    if len(units) != expected:
        c.add("units", f"{len(units)} units for {input_ms:g} ms of input, expected {expected}")
    total = 0.0
    sent = _sent_ms_before(c, profile)
    for k, i in enumerate(units):
        event = c.view(i, views.UnitDone)
        if event.shown("unit_id") != f"unit_{k}":
            c.add("units", f"unit id {event.shown('unit_id')!r}, expected 'unit_{k}'", i)
        start, duration = _media_time(event)
        if not _near(start, k * profile.units.unit_ms):
            c.add("units", f"unit_{k} t_start_ms {start}, expected {k * profile.units.unit_ms}", i)
        if not isinstance(duration, int | float) or not 0 < duration <= profile.units.unit_ms:
            c.add(
                "units", f"unit_{k} duration_ms {duration} outside (0, {profile.units.unit_ms}]", i
            )
            continue
        if k < len(units) - 1 and not _near(duration, profile.units.unit_ms):
            c.add("units", f"unit_{k} lasts {duration} ms but is not the last unit", i)
        total += duration
        if sent[i] + MS_TOLERANCE < k * profile.units.unit_ms + duration:
            c.add("units", f"unit_{k} done when only {sent[i]:g} ms of its audio had been sent", i)
        if drained and i > drained[0]:
            c.add("units", f"unit_{k} done after sglang.input_audio.drained", i)
    if units and not _near(total, input_ms):
        c.add("units", f"unit durations sum to {total:g} ms, the input is {input_ms:g} ms")


def _sent_ms_before(c: _Checker, profile: Dialect) -> list[float]:
    """Per trace index: the input ms the client had sent before that event."""
    out, sent = [], 0.0
    for ev in c.events:
        out.append(sent)
        if ev.dir == "send" and ev.type == "input_audio_buffer.append":
            sent += int(ev.event.get("audio_bytes", 0)) / 2 / (profile.formats.input_rate / 1000.0)
    return out


def _empty_eos_unit(c: _Checker, index: int, input_ms: float, profile: Dialect) -> bool:
    """A 0 ms last unit at the input end, allowed only when the input fills whole units."""
    start, duration = _media_time(c.view(index, views.UnitDone))
    aligned = input_ms > 0 and _near(input_ms % profile.units.unit_ms, 0.0)
    return aligned and duration == 0 and _near(start, input_ms)


def _media_time(unit: views.UnitDone) -> tuple[Any, Any]:
    """A unit's sglang.media_time t_start_ms and duration_ms, as received."""
    media = unit.sglang.media_time if unit.sglang is not None else None
    if media is None:
        return None, None
    return media.shown("t_start_ms"), media.shown("duration_ms")


def _check_native(c: _Checker, profile: Dialect) -> None:
    """Output ends before the drain; responses start after session.updated; one audio item each."""
    drained = c.find("recv", "sglang.input_audio.drained")
    updated = c.find("recv", "session.updated")
    items: dict[str, Any] = {}
    for i, ev in enumerate(c.events):
        if ev.dir != "recv":
            continue
        after_drain = bool(drained) and i > drained[0]
        if ev.type == "response.created":
            if updated and i < updated[0]:
                c.add("responses", "response.created before session.updated", i)
            if after_drain:
                rid = c.view(i, views.ResponseEvent).body.shown("id")
                c.add("drain", f"response {rid!r} created after sglang.input_audio.drained", i)
        elif ev.type == "response.done" and after_drain and not profile.responses.single:
            response = c.view(i, views.ResponseEvent).body
            if response.shown("status") == "completed":
                c.add(
                    "drain",
                    f"response {response.shown('id')!r} completed after sglang.input_audio.drained",
                    i,
                )
        elif ev.type in profile.events.audio_delta:
            delta = c.view(i, views.AudioDelta)
            rid, item_id = delta.shown("response_id"), delta.shown("item_id")
            if after_drain:
                c.add("drain", f"audio for response {rid!r} after sglang.input_audio.drained", i)
            item = items.setdefault(views.as_key(rid), item_id)
            if item != item_id:
                c.add(
                    "responses",
                    f"response {rid!r} audio moved from item {item!r} to {item_id!r}",
                    i,
                )


def _check_single_response(c: _Checker) -> None:
    """One response per session; completed at the input end only after the client ended it."""
    created = c.find("recv", "response.created")
    if len(created) > 1:
        c.add(
            "responses",
            f"{len(created)} response.created events: the session is one response",
            created[1],
        )
    ends = c.find("send", "sglang.input_audio.end")
    for i in c.find("recv", "response.done"):
        response = c.view(i, views.ResponseEvent).body
        if _reason(response) == "input_audio_ended" and (not ends or i < ends[0]):
            c.add(
                "responses",
                f"response {response.shown('id')!r} ended input_audio_ended before "
                "sglang.input_audio.end",
                i,
            )


def _check_responses(c: _Checker, profile: Dialect) -> None:
    """Lifecycle of every response, with one speech_started consumed per cancellation."""
    state: dict[str, str] = {}  # response id -> "open" | "done"
    speech_during: set[str] = set()  # open responses that saw a speech_started
    unused_speech_starts = 0
    for i, ev in enumerate(c.events):
        if ev.dir == "send" and ev.type == "session.close":
            speech_during.add("<close>")
        if ev.dir != "recv":
            continue
        if ev.type == "input_audio_buffer.speech_started":
            unused_speech_starts += 1
            speech_during.update(rid for rid, st in state.items() if st == "open")
        elif ev.type == "response.created":
            _on_created(c, i, state)
        elif ev.type == "response.done":
            unused_speech_starts -= _on_done(
                c, profile, i, state, unused_speech_starts, speech_during
            )
        elif ev.type in profile.events.audio_delta:
            delta = c.view(i, views.AudioDelta)
            rate = delta.shown("sample_rate_hz")
            if rate is not None and rate != profile.formats.output_rate:
                c.add(
                    "handshake",
                    f"audio delta at {rate} Hz, expected {profile.formats.output_rate}",
                    i,
                )
            rid = delta.shown("response_id")
            key = views.as_key(rid)
            if key not in state:
                c.add("responses", f"audio for response {rid!r} before its response.created", i)
            elif state[key] == "done":
                c.add("responses", f"audio for response {rid!r} after its response.done", i)
    for rid, st in state.items():
        if st == "open":
            c.add("responses", f"response {rid!r} has no response.done")


def _reason(response: views.Response) -> Any:
    """status_details.reason, as received."""
    details = response.status_details
    return details.shown("reason") if details is not None else None


def _on_created(c: _Checker, i: int, state: dict[str, str]) -> None:
    response = c.view(i, views.ResponseEvent).body
    rid, status = response.shown("id"), response.shown("status")
    if not isinstance(rid, str) or not rid:
        c.add("responses", "response.created without a response id", i)
    elif rid in state:
        c.add("responses", f"response {rid!r} created twice", i)
    else:
        state[rid] = "open"
    if status is not None and status != "in_progress":
        c.add("responses", f"response.created with status {status!r}", i)


def _on_done(
    c: _Checker,
    profile: Dialect,
    i: int,
    state: dict[str, str],
    unused: int,
    speech_during: set[str],
) -> int:
    """Check one response.done; returns how many speech_started events it consumed (0 or 1)."""
    response = c.view(i, views.ResponseEvent).body
    rid, status, reason = response.shown("id"), response.shown("status"), _reason(response)
    key = views.as_key(rid)
    if key not in state:
        c.add("responses", f"response.done for {rid!r}, which was never created", i)
    elif state[key] == "done":
        c.add("responses", f"second response.done for {rid!r}", i)
    state[key] = "done"
    if status == "completed":
        if reason not in profile.responses.completed_reasons:
            c.add("responses", f"completed response {rid!r} with reason {reason!r}", i)
        return 0
    if status == "cancelled":
        if reason not in profile.responses.cancelled_reasons:
            c.add("responses", f"cancelled response {rid!r} with reason {reason!r}", i)
        if profile.responses.cancel_rule == "speech_during":
            if key not in speech_during:
                c.add("responses", f"cancelled response {rid!r} saw no speech_started during it", i)
            return 0
        if profile.responses.cancel_rule == "after_close":
            if "<close>" not in speech_during:
                c.add("responses", f"response {rid!r} cancelled before session.close", i)
            return 0
        if unused <= 0:
            c.add(
                "responses",
                f"cancelled response {rid!r} has no speech_started of its own before it",
                i,
            )
            return 0
        return 1
    c.add("responses", f"response {rid!r} ended with status {status!r}", i)
    return 0
