"""The ``Dialect`` record: everything a recorder, the protocol oracle, export and the conformance
battery need to know about one /v1/realtime protocol dialect, in parts:

- ``formats``: the audio rates in and out, and whether session.update declares them;
- ``pacing``: the input packets and the lateness a packet may have;
- ``events``: which events carry reply audio, whether the server sends input receipts and units;
- ``units``: the server's unit length and tail policy, and whether the client asks for the unit;
- ``shape``: the session object's shape (``ga`` or ``beta``, :mod:`fdb.dialects.shapes`);
- ``end``: how a session ends (``drain``: sglang end/drained/close; ``tail``: a no-op update);
- ``cuts``: the playout cut rules, the trace events that drop queued reply audio;
- ``responses``: the reasons a response may end with and how a cancellation is justified;
- ``turn_detection``: what ``--turn-detection`` takes;
- ``client``: what the client sends besides the audio (seq, headers, extensions);
- ``oracle``: the oracle's extra rule sets (the native rules, the capabilities to be granted).

A dialect is data: code reads its parts and never branches on its name.
"""

from __future__ import annotations

import json
import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from fdb.dialects import shapes
from fdb.errors import FdbError

ALL = "*"  # a cut that drops every queued response


class _Part(BaseModel):
    model_config = ConfigDict(frozen=True)


class Formats(_Part):
    input_rate: int = 16000
    output_rate: int = 24000
    declared: bool = False  # session.update names the audio formats (OpenAI dialects)


class Pacing(_Part):
    packet_ms: int = 80
    tolerance_ms: float = 80.0


class Events(_Part):
    audio_delta: tuple[str, ...]  # the events that carry reply audio
    receipts: bool  # sglang.input_audio.accepted / ended / drained
    unit_done: bool  # sglang.unit.done per unit


class Units(_Part):
    unit_ms: int
    tail_policy: Literal["flush", "pad"]
    requested: bool = False  # session.update asks for unit_ms in sglang.timebase.native_unit_ms

    def padding_ms(self, input_ms: float) -> float:
        """Padding the drain reports: 0 for a flushed tail, up to a whole unit for ``pad``."""
        if self.tail_policy == "flush":
            return 0.0
        return math.ceil(input_ms / self.unit_ms) * self.unit_ms - input_ms


class End(_Part):
    mode: Literal["drain", "tail"] = "drain"  # sglang end/drained/close, or a no-op update
    tail_s: float = 1.0  # --legacy-tail: seconds after the input before the no-op update


class CutRule(_Part):
    """A received ``event`` that drops queued reply audio: the audio of the response it names
    (``target``: ``response.id`` of its response object, or its ``response_id`` field, where a
    missing one means every response) or of every response (``all``)."""

    event: str
    target: Literal["response.id", "response_id", "all"]
    status: str | None = None  # only when its response object has this status
    obeys_interrupt: bool = False  # not when the session set interrupt_response false

    def cut(self, event: dict[str, Any]) -> str | None | Literal[False]:
        """The response id the event drops (``ALL``: every one); False when it drops nothing."""
        if self.target == "all":
            return ALL
        if self.target == "response_id":
            return event.get("response_id") or ALL
        response = event.get("response") or {}
        if self.status is not None and response.get("status") != self.status:
            return False
        return response.get("id")


class Cuts(_Part):
    rules: tuple[CutRule, ...]
    description: str  # the rule in words, as the export manifest states it


class Responses(_Part):
    completed_reasons: tuple[str | None, ...]
    cancelled_reasons: tuple[str, ...]  # a barge-in's reason
    # how a cancellation is justified: a speech_started of its own before it, one during it, or
    # the client's session.close
    cancel_rule: Literal["own_speech_started", "speech_during", "after_close"] = (
        "own_speech_started"
    )
    single: bool = False  # the whole session is one response, done after the input end
    client_cancel_reasons: tuple[str, ...] = ("client_cancelled",)  # answer to response.cancel
    commit_answers_itself: bool = False  # a commit gets a response without response.create


class TurnDetection(_Part):
    required: bool
    types: tuple[str, ...] = ()
    keys: tuple[str, ...] = ()
    interrupt_default: bool = True  # interrupt_response when the request leaves it out


class Client(_Part):
    sends_seq: bool = True  # input_audio_buffer.append carries sglang.seq
    sends_t_start: bool = False  # ... and sglang.t_start_ms
    headers: tuple[tuple[str, str], ...] = ()  # extra headers of the WebSocket upgrade
    # session.update carries ``"sglang": {}``: it asks a GA server for the session protocol's
    # extension events (receipts, units, progress) and its 16 kHz input
    requests_extensions: bool = False
    session_settings: bool = True  # sglang.voice / sampling / reference_audio may be sent


class OracleRules(_Part):
    native: bool = False  # output ends at the drain, one audio item per response, empty EOS unit
    required_grant: tuple[tuple[str, Any], ...] = ()  # session.updated session.sglang.granted


class Dialect(BaseModel):
    """One protocol dialect. Fixed for a session; stored by name (``profile``) in session.json."""

    model_config = ConfigDict(frozen=True)

    name: str
    trace_format: str
    summary: str  # one line for the CLI's help
    formats: Formats = Formats()
    pacing: Pacing = Pacing()
    events: Events
    units: Units
    shape: Literal["ga", "beta"] = "ga"
    end: End = End()
    cuts: Cuts
    responses: Responses
    turn_detection: TurnDetection
    client: Client = Client()
    oracle: OracleRules = OracleRules()

    @property
    def packet_samples(self) -> int:
        return self.formats.input_rate * self.pacing.packet_ms // 1000

    @property
    def session(self) -> shapes.Shape:
        """The session object's shape: session.update bodies, what session.updated echoes."""
        return shapes.SHAPES[self.shape]

    def with_tail(self, tail_s: float) -> Dialect:
        return self.model_copy(update={"end": self.end.model_copy(update={"tail_s": tail_s})})

    def interrupts(self, turn_detection: dict[str, Any] | None) -> bool:
        """Whether a cut rule that obeys interrupt_response cuts in a session that requested
        ``turn_detection``."""
        default = self.turn_detection.interrupt_default
        if turn_detection is None:
            return default
        return bool(turn_detection.get("interrupt_response", default))

    def session_update(
        self,
        turn_detection: dict[str, Any] | None,
        model: str | None,
        instructions: str | None,
        sglang: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The ``session`` object of session.update (:meth:`shapes.Shape.update_body`)."""
        return self.session.update_body(self, turn_detection, model, instructions, sglang)

    def validate_turn_detection(self, value: str | dict[str, Any] | None) -> dict[str, Any] | None:
        """Parse and check ``--turn-detection``; raises FdbError naming the problem."""
        if value is None or value == "":
            if self.turn_detection.required:
                raise FdbError(
                    f"profile {self.name} requires --turn-detection",
                    "pass e.g. --turn-detection "
                    '\'{"type": "server_vad", "silence_duration_ms": 500}\'',
                )
            return None
        if not self.turn_detection.required:
            raise FdbError(f"profile {self.name} does not take --turn-detection", "leave it out")
        data = _parse_json_object(value)
        _check_turn_detection(data, self)
        return data


def _parse_json_object(value: str | dict[str, Any]) -> dict[str, Any]:
    if isinstance(value, dict):
        return dict(value)
    try:
        data = json.loads(value)
    except json.JSONDecodeError as exc:
        raise FdbError(f"--turn-detection is not valid JSON ({exc})", "pass a JSON object") from exc
    if not isinstance(data, dict):
        raise FdbError("--turn-detection must be a JSON object", 'e.g. {"type": "server_vad"}')
    return data


def _check_turn_detection(data: dict[str, Any], dialect: Dialect) -> None:
    """server_vad takes threshold in [0, 1], prefix_padding_ms >= 0, silence_duration_ms > 0
    and the boolean interrupt_response; anything else is rejected, not ignored."""
    kind = data.get("type")
    rules = dialect.turn_detection
    if kind not in rules.types:
        raise FdbError(
            f"--turn-detection type {kind!r} is not accepted by profile {dialect.name}",
            f"use one of: {', '.join(rules.types)}",
        )
    unknown = sorted(set(data) - set(rules.keys))
    if unknown:
        raise FdbError(
            f"--turn-detection has unknown keys: {', '.join(unknown)}",
            f"allowed: {', '.join(rules.keys)}",
        )
    wrong = sorted(set(data) & set(_TYPE_ONLY_KEYS.get(kind, ())))
    if wrong:
        raise FdbError(f"--turn-detection {kind} does not take {', '.join(wrong)}", _RANGES)
    checks = {
        "eagerness": lambda v: v in ("low", "medium", "high", "auto"),
        "create_response": lambda v: isinstance(v, bool),
        "threshold": lambda v: _is_number(v) and 0.0 <= v <= 1.0,
        "prefix_padding_ms": lambda v: _is_number(v) and v >= 0,
        "silence_duration_ms": lambda v: _is_number(v) and v > 0,
        "interrupt_response": lambda v: isinstance(v, bool),
    }
    for key, ok in checks.items():
        if key in data and not ok(data[key]):
            raise FdbError(f"--turn-detection {key}={data[key]!r} is out of range", _RANGES)


_TYPE_ONLY_KEYS = {
    "server_vad": ("eagerness",),
    "semantic_vad": ("threshold", "prefix_padding_ms", "silence_duration_ms"),
}
_RANGES = (
    "threshold is in [0, 1], prefix_padding_ms >= 0, silence_duration_ms > 0, eagerness one of "
    "low/medium/high/auto, interrupt_response and create_response booleans"
)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
