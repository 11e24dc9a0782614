"""The conformance battery's scenarios, each on a fresh connection, each one rule (or two).

- ``barge-in``: with ``interrupt_response: true`` the client speaks as soon as the reply's first
  audio arrives; the reply must end ``cancelled`` with the profile's barge-in reason
  (``turn_detected`` in GA/beta, ``interrupted`` in the turn-based dialect).
- ``barge-in-off``: the same with ``interrupt_response: false``: the reply must not be cancelled.
- ``cancel``: ``response.cancel`` at the reply's first audio: ``response.done`` cancelled
  (``client_cancelled`` in GA/beta, ``interrupted`` in the turn-based dialect).
- ``truncate``: ``conversation.item.truncate`` of the reply's item at the integer ms the client
  has played (never more than it received): ``conversation.item.truncated`` echoing
  ``item_id``, ``content_index`` and ``audio_end_ms``.
- ``commit`` / ``commit-response``: with ``turn_detection: null`` the question, then
  ``input_audio_buffer.commit`` -> ``input_audio_buffer.committed``, then ``response.create`` ->
  a response with audio (the turn-based dialect answers a commit by itself: no response.create).

A rule is ``not exercised`` when its scenario did not happen (no reply arrived to barge into or
cancel, the handshake failed, the reply ended before the client could act), never ``pass``.
A reply judged by the barge-in rules must still be in progress ``DETECT_S`` after the client's
speech began: a shorter one proves nothing either way.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel

from fdb.dialects import Dialect, views
from recorders.conformance_client import ScenarioClient, ScenarioError

Status = Literal["pass", "fail", "not exercised"]
DETECT_S = 0.8  # speech this long into a reply: any VAD has heard it
GRACE_S = 3.0  # after the barge-in speech (and the silence that ends it): the server has acted
ANSWER_TIMEOUT_S = 5.0  # for an answer to response.cancel, truncate, commit
TRUNCATE_AFTER_MS = 500  # the client truncates once it has played this much of the reply
SCENARIO_SLACK_S = (
    40.0  # a scenario's budget beyond its speech and reply wait (connect, answers, close)
)


class RuleResult(BaseModel):
    rule: str
    description: str
    status: Status
    detail: str = ""


@dataclass(frozen=True)
class ScenarioInput:
    """What every scenario needs: the server, the dialect, the session settings and the speech."""

    url: str
    profile: Dialect
    turn_detection: dict[str, Any] | None
    model: str | None
    speech: bytes  # the spoken question, PCM16 at the profile's input rate, trimmed to its speech
    reply_timeout_s: float  # from the end of the question to the reply's first audio

    @property
    def speech_s(self) -> float:
        return len(self.speech) / 2 / self.profile.formats.input_rate

    def body(self, turn_detection: dict[str, Any] | None, manual: bool = False) -> dict[str, Any]:
        """The session.update body; ``manual``: turn_detection null, where the profile puts it."""
        body = self.profile.session_update(turn_detection, self.model, None)
        if manual:
            self.profile.session.without_turn_detection(body)
        return body


DESCRIPTIONS = {
    "barge-in": "speech during a reply cancels it when interrupt_response is true (reason {barge})",
    "barge-in-off": "speech during a reply does not cancel it when interrupt_response is false",
    "cancel": "response.cancel during a reply: response.done cancelled (reason {cancel})",
    "truncate": "conversation.item.truncate of the reply's item is answered by "
    "conversation.item.truncated echoing item_id, content_index, audio_end_ms",
    "commit": "turn_detection null: input_audio_buffer.commit is answered by "
    "input_audio_buffer.committed",
    "commit-response": "after the commit, {how} gets a response with audio",
}


def describe(rule: str, dialect: Dialect) -> str:
    """The rule's description in the words of ``dialect``'s response rules."""
    answers = dialect.responses
    how = (
        "the server itself (no response.create)"
        if answers.commit_answers_itself
        else "response.create"
    )
    return DESCRIPTIONS[rule].format(
        barge="/".join(answers.cancelled_reasons),
        cancel="/".join(answers.client_cancel_reasons),
        how=how,
    )


def _row(rule: str, inp: ScenarioInput, status: Status, detail: str) -> RuleResult:
    return RuleResult(
        rule=rule, description=describe(rule, inp.profile), status=status, detail=detail
    )


# --- the reply: its first audio, its end --------------------------------------------------------


@dataclass
class Reply:
    index: int  # of its first audio delta in the client's log
    t: float  # when that delta arrived
    response_id: str | None
    item_id: str | None


def _is(kind: str) -> Any:
    return lambda e: e.type == kind


def _done_of(rid: str | None) -> Any:
    return lambda e: (
        isinstance(e, views.ResponseEvent) and e.type == views.RESPONSE_DONE and e.body.id == rid
    )


def _is_audio(e: views.Event) -> bool:
    """One of the dialect's events.audio_delta (the client reads those as AudioDelta)."""
    return isinstance(e, views.AudioDelta)


async def _first_audio(c: ScenarioClient, timeout_s: float, start: int = 0) -> Reply | None:
    found = await c.wait_for(_is_audio, timeout_s, start)
    if found is None or not isinstance(found[1], views.AudioDelta):
        return None
    index, event = found
    return Reply(index, c.events[index][0], event.response_id, event.item_id)


def _done_before(c: ScenarioClient, rid: str | None, t: float) -> tuple[int, views.Event] | None:
    """The reply's response.done if it arrived before loop time ``t``."""
    for index, (when, event) in enumerate(c.events):
        if when < t and _done_of(rid)(event):
            return index, event
    return None


def _status(event: views.Event) -> tuple[str | None, str | None]:
    if not isinstance(event, views.ResponseEvent):
        return None, None
    response = event.body
    details = response.status_details
    return response.status, details.reason if details is not None else None


def _received_ms(c: ScenarioClient, item_id: str | None, rid: str | None) -> float:
    """Ms of reply audio received so far for ``item_id`` (or the response, without one)."""
    total = 0
    for _, event in c.events:
        if not isinstance(event, views.AudioDelta):
            continue
        if (event.item_id if item_id is not None else event.response_id) != (item_id or rid):
            continue
        delta = event.delta
        if delta is not None:
            total += len(delta) // 4 * 3 - (
                2 if delta.endswith("==") else 1 if delta.endswith("=") else 0
            )
    return total / 2 / (c.profile.formats.output_rate / 1000.0)


async def _reply_to_question(c: ScenarioClient, inp: ScenarioInput) -> Reply | None:
    assert c.mic is not None
    c.mic.say(inp.speech)
    return await _first_audio(c, inp.speech_s + inp.reply_timeout_s)


def _no_reply(inp: ScenarioInput, c: ScenarioClient) -> str:
    errors = c.errors()
    why = f"no reply audio within {inp.reply_timeout_s:g} s of the question"
    return (
        why
        + (f" (errors: {'; '.join(errors[:2])})" if errors else "")
        + (f"; {c.closed}" if c.closed else "")
    )


# --- scenarios ----------------------------------------------------------------------------------


async def barge_in(inp: ScenarioInput, interrupt: bool) -> RuleResult:
    rule = "barge-in" if interrupt else "barge-in-off"
    td = {**(inp.turn_detection or {}), "interrupt_response": interrupt}
    async with ScenarioClient(inp.url, inp.profile) as c:
        await c.handshake(inp.body(td), silence_between=True)
        reply = await _reply_to_question(c, inp)
        if reply is None:
            return _row(rule, inp, "not exercised", _no_reply(inp, c))
        assert c.mic is not None
        speech = c.mic.say(inp.speech)
        try:
            began = await c.mic.said(speech)
        except ScenarioError:
            if not c.closed:
                raise
            return _row(
                rule,
                inp,
                "fail",
                f"{c.closed} while the client spoke into the reply, before its "
                "response.done: a hang-up is neither a cancelled reply nor one that plays on",
            )
        silence_s = float(td.get("silence_duration_ms", 500)) / 1000.0
        deadline = began + inp.speech_s + silence_s + GRACE_S
        found = await c.wait_for(_done_of(reply.response_id), deadline - c.now(), reply.index)
        heard = any(e.type == views.SPEECH_STARTED and t >= began for t, e in c.events)
        return _judge_barge_in(rule, inp, c, found, began, deadline, interrupt, heard)


def _judge_barge_in(
    rule: str,
    inp: ScenarioInput,
    c: ScenarioClient,
    found: tuple[int, views.Event] | None,
    began: float,
    deadline: float,
    interrupt: bool,
    heard: bool,
) -> RuleResult:
    vad = "speech_started seen" if heard else "no speech_started during the reply"
    if found is None and c.closed:  # a hang-up is neither a cancelled reply nor one that plays on
        return _row(
            rule,
            inp,
            "fail",
            f"{c.closed} {c.now() - began:.2f} s into the speech, before the "
            f"reply's response.done ({vad})",
        )
    if found is None:
        waited = f"the reply was still in progress {deadline - began:.1f} s after the speech began"
        return _row(rule, inp, "fail" if interrupt else "pass", f"{waited} ({vad})")
    index, event = found
    at = c.events[index][0] - began
    status, reason = _status(event)
    if at < 0:
        return _row(
            rule, inp, "not exercised", f"the reply ended ({status}) before the client spoke"
        )
    if status == "cancelled":
        if not interrupt:
            return _row(
                rule,
                inp,
                "fail",
                f"cancelled (reason {reason!r}) {at:.2f} s into the speech ({vad})",
            )
        ok = reason in inp.profile.responses.cancelled_reasons
        detail = f"cancelled {at:.2f} s into the speech, reason {reason!r}"
        return _row(
            rule,
            inp,
            "pass" if ok else "fail",
            detail
            + ("" if ok else f", expected {'/'.join(inp.profile.responses.cancelled_reasons)}"),
        )
    if at < DETECT_S:
        return _row(
            rule,
            inp,
            "not exercised",
            f"the reply ended ({status}) {at:.2f} s into the speech, "
            f"before a VAD could hear it (needs {DETECT_S:g} s)",
        )
    return _row(
        rule,
        inp,
        "pass" if not interrupt else "fail",
        f"the reply ended {status} (reason {reason!r}) {at:.2f} s into the speech ({vad})",
    )


async def cancel(inp: ScenarioInput) -> RuleResult:
    async with ScenarioClient(inp.url, inp.profile) as c:
        await c.handshake(inp.body(inp.turn_detection), silence_between=True)
        reply = await _reply_to_question(c, inp)
        if reply is None:
            return _row("cancel", inp, "not exercised", _no_reply(inp, c))
        start, sent_at = len(c.events), c.now()
        if _done_before(c, reply.response_id, sent_at) is not None:
            return _row(
                "cancel",
                inp,
                "not exercised",
                "the reply was over before its first audio was handled",
            )
        event: dict[str, Any] = {"type": "response.cancel"}
        if reply.response_id:
            event["response_id"] = reply.response_id
        await c.send(event)
        found = await c.wait_for(_done_of(reply.response_id), ANSWER_TIMEOUT_S, reply.index)
        errors = c.errors(start)
        if found is None:
            return _row(
                "cancel",
                inp,
                "fail",
                f"no response.done within {ANSWER_TIMEOUT_S:g} s of response.cancel"
                + (f" (errors: {'; '.join(errors[:2])})" if errors else ""),
            )
        index, done = found
        status, reason = _status(done)
        at = c.events[index][0] - sent_at
        if at < 0:
            return _row(
                "cancel",
                inp,
                "not exercised",
                f"the reply ended {status} before response.cancel was sent",
            )
        ok = status == "cancelled" and reason in inp.profile.responses.client_cancel_reasons
        expected = (
            ""
            if ok
            else f"; expected cancelled/{'/'.join(inp.profile.responses.client_cancel_reasons)}"
        )
        return _row(
            "cancel",
            inp,
            "pass" if ok else "fail",
            f"response.done {status} (reason {reason!r}) {at:.2f} s after response.cancel{expected}"
            + (f" (errors: {'; '.join(errors[:2])})" if errors else ""),
        )


async def truncate(inp: ScenarioInput) -> RuleResult:
    async with ScenarioClient(inp.url, inp.profile) as c:
        await c.handshake(inp.body(inp.turn_detection), silence_between=True)
        reply = await _reply_to_question(c, inp)
        if reply is None:
            return _row("truncate", inp, "not exercised", _no_reply(inp, c))
        if not reply.item_id:
            return _row(
                "truncate", inp, "fail", "the reply's audio deltas name no item_id to truncate"
            )
        await _played(c, reply)
        received = _received_ms(c, reply.item_id, reply.response_id)
        played = (c.now() - reply.t) * 1000.0
        audio_end_ms = int(min(received, played))
        if audio_end_ms < 1:
            return _row("truncate", inp, "not exercised", "no reply audio received to truncate")
        start = len(c.events)
        want = {"item_id": reply.item_id, "content_index": 0, "audio_end_ms": audio_end_ms}
        await c.send({"type": "conversation.item.truncate", **want})
        found = await c.wait_for(
            lambda e: e.type in (views.ITEM_TRUNCATED, views.ERROR),
            ANSWER_TIMEOUT_S,
            start,
        )
        if found is None:
            return _row(
                "truncate",
                inp,
                "fail",
                f"no conversation.item.truncated within {ANSWER_TIMEOUT_S:g} s "
                f"of truncating {reply.item_id} at {audio_end_ms} ms",
            )
        if found[1].type == views.ERROR:
            return _row(
                "truncate",
                inp,
                "fail",
                f"truncate at {audio_end_ms} ms of {received:.0f} ms received "
                f"was refused: {c.errors(start)[0]}",
            )
        # the echo as received (``shown``): a malformed value is quoted, not read as None
        got = {key: found[1].shown(key) for key in want}
        wrong = [
            f"{key} {got[key]!r} (sent {want[key]!r})" for key in want if got[key] != want[key]
        ]
        return _row(
            "truncate",
            inp,
            "fail" if wrong else "pass",
            "echoes " + ", ".join(wrong)
            if wrong
            else f"truncated {reply.item_id} at {audio_end_ms} ms of {received:.0f} ms received",
        )


async def _played(c: ScenarioClient, reply: Reply) -> None:
    """Until the client has played TRUNCATE_AFTER_MS of the reply, or all of a shorter reply."""
    deadline = reply.t + 10.0
    while c.now() < deadline and not c.closed:
        played = (c.now() - reply.t) * 1000.0
        received = _received_ms(c, reply.item_id, reply.response_id)
        over = _done_before(c, reply.response_id, c.now() + 1) is not None
        if min(played, received) >= TRUNCATE_AFTER_MS or (over and played >= received):
            return
        await asyncio.sleep(0.04)


async def commit(inp: ScenarioInput) -> list[RuleResult]:
    async with ScenarioClient(inp.url, inp.profile) as c:
        await c.handshake(inp.body(None, manual=True), silence_between=False)
        assert c.mic is not None
        await c.mic.said(c.mic.say(inp.speech))
        start = len(c.events)
        await c.send({"type": "input_audio_buffer.commit"})
        found = await c.wait_for(
            lambda e: e.type in (views.COMMITTED, views.ERROR),
            ANSWER_TIMEOUT_S,
            start,
        )
        if found is None or found[1].type == views.ERROR:
            why = (
                f"refused: {c.errors(start)[0]}"
                if found
                else f"no input_audio_buffer.committed within {ANSWER_TIMEOUT_S:g} s"
            ) + (f"; {c.closed}" if c.closed else "")
            return [
                _row("commit", inp, "fail", why),
                _row("commit-response", inp, "not exercised", "the commit was not committed"),
            ]
        item = found[1].shown("item_id")
        first = _row(
            "commit",
            inp,
            "pass" if isinstance(item, str) and item else "fail",
            f"committed item {item!r}" if item else "input_audio_buffer.committed names no item_id",
        )
        return [first, await _manual_response(c, inp, found[0])]


async def _manual_response(c: ScenarioClient, inp: ScenarioInput, after: int) -> RuleResult:
    start, sent_at = len(c.events), c.now()
    how = "the commit"
    if not inp.profile.responses.commit_answers_itself:
        await c.send({"type": "response.create"})
        how = "response.create"
    created = await c.wait_for(_is(views.RESPONSE_CREATED), inp.reply_timeout_s, after)
    if created is None:
        errors = c.errors(start)
        return _row(
            "commit-response",
            inp,
            "fail",
            f"no response.created within {inp.reply_timeout_s:g} s of {how}"
            + (f" (errors: {'; '.join(errors[:2])})" if errors else ""),
        )
    rid = created[1].body.id if isinstance(created[1], views.ResponseEvent) else None
    audio = await c.wait_for(
        lambda e: isinstance(e, views.AudioDelta) and e.response_id == rid,
        inp.reply_timeout_s,
        created[0],
    )
    if audio is None:
        done = next((e for _, e in c.events[created[0] :] if _done_of(rid)(e)), None)
        end = f"; it ended {_status(done)[0]}" if done else ""
        return _row(
            "commit-response",
            inp,
            "fail",
            f"response {rid!r} sent no audio within {inp.reply_timeout_s:g} s{end}",
        )
    latency = c.events[audio[0]][0] - sent_at
    return _row(
        "commit-response",
        inp,
        "pass",
        f"response {rid!r} after {how}: first audio {latency:.2f} s later",
    )


async def run_scenarios(inp: ScenarioInput, only: set[str] | None = None) -> list[RuleResult]:
    """Every scenario the profile has (those in ``only``, when given), one after another; a
    scenario that cannot get going makes its rules ``not exercised`` with the reason."""
    plan: list[tuple[tuple[str, ...], Any]] = [
        (("barge-in",), lambda: barge_in(inp, True)),
        (("barge-in-off",), lambda: barge_in(inp, False)),
        (("cancel",), lambda: cancel(inp)),
        (("truncate",), lambda: truncate(inp)),
        (("commit", "commit-response"), lambda: commit(inp)),
    ]
    rows: list[RuleResult] = []
    for rules, scenario in plan:
        if only is not None and not set(rules) & only:
            continue
        budget = 2 * inp.speech_s + inp.reply_timeout_s + SCENARIO_SLACK_S
        try:
            async with asyncio.timeout(budget):
                got = await scenario()
            rows.extend(got if isinstance(got, list) else [got])
        except ScenarioError as exc:
            rows.extend(
                _row(rule, inp, "not exercised", f"the scenario could not run: {exc}")
                for rule in rules
            )
        except TimeoutError:
            rows.extend(
                _row(
                    rule, inp, "not exercised", f"the scenario did not finish within {budget:.0f} s"
                )
                for rule in rules
            )
    return rows
