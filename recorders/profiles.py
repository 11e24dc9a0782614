"""Protocol profiles: what a recorder sends and expects, what the oracle checks, how export cuts.

Only the ``turn-based`` profile is registered: a turn-based endpoint speaking the session
protocol. It takes ``turn_detection`` under ``session.audio.input`` in ``session.update``,
grants 200 ms units with a flushed input tail (no padding), sends the ``sglang.input_audio.*``
receipts and ``sglang.unit.done``, detects turns itself and streams
``response.output_audio.delta`` at 24 kHz. Its playout is cut when a ``response.done`` with
status ``cancelled`` arrives (it sends no ``output_audio_buffer.cleared``).
"""

from __future__ import annotations

import json
import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from fdb.errors import FdbError

PlayoutCut = Literal["cancelled_response"]


class Profile(BaseModel):
    """A protocol dialect. Fixed for a session; stored by name in session.json."""

    model_config = ConfigDict(frozen=True)

    name: str
    trace_format: str
    input_rate: int = 16000
    output_rate: int = 24000
    packet_ms: int = 80
    pacing_tolerance_ms: float = 80.0
    unit_ms: int
    tail_policy: Literal["flush", "pad"]
    expects_receipts: bool  # sglang.input_audio.accepted / ended / drained
    expects_unit_done: bool  # sglang.unit.done per unit
    audio_delta_events: tuple[str, ...]
    playout_cut: PlayoutCut
    turn_detection_required: bool
    turn_detection_types: tuple[str, ...]
    turn_detection_keys: tuple[str, ...]
    completed_reasons: tuple[str, ...]
    cancelled_reasons: tuple[str, ...]

    @property
    def packet_samples(self) -> int:
        return self.input_rate * self.packet_ms // 1000

    def padding_ms(self, input_ms: float) -> float:
        """Padding the drain reports: 0 for a flushed tail, up to a whole unit for ``pad``."""
        if self.tail_policy == "flush":
            return 0.0
        return math.ceil(input_ms / self.unit_ms) * self.unit_ms - input_ms

    def validate_turn_detection(self, value: str | dict[str, Any] | None) -> dict[str, Any] | None:
        """Parse and check ``--turn-detection``; raises FdbError naming the problem."""
        if value is None or value == "":
            if self.turn_detection_required:
                raise FdbError(
                    f"profile {self.name} requires --turn-detection",
                    'pass e.g. --turn-detection \'{"type": "server_vad", "silence_duration_ms": 500}\'',
                )
            return None
        if not self.turn_detection_required:
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


def _check_turn_detection(data: dict[str, Any], profile: Profile) -> None:
    """server_vad takes threshold in [0, 1], prefix_padding_ms >= 0, silence_duration_ms > 0
    and the boolean interrupt_response; anything else is rejected, not ignored."""
    kind = data.get("type")
    if kind not in profile.turn_detection_types:
        raise FdbError(
            f"--turn-detection type {kind!r} is not accepted by profile {profile.name}",
            f"use one of: {', '.join(profile.turn_detection_types)}",
        )
    unknown = sorted(set(data) - set(profile.turn_detection_keys))
    if unknown:
        raise FdbError(
            f"--turn-detection has unknown keys: {', '.join(unknown)}",
            f"allowed: {', '.join(profile.turn_detection_keys)}",
        )
    checks = {
        "threshold": lambda v: _is_number(v) and 0.0 <= v <= 1.0,
        "prefix_padding_ms": lambda v: _is_number(v) and v >= 0,
        "silence_duration_ms": lambda v: _is_number(v) and v > 0,
        "interrupt_response": lambda v: isinstance(v, bool),
    }
    for key, ok in checks.items():
        if key in data and not ok(data[key]):
            raise FdbError(f"--turn-detection {key}={data[key]!r} is out of range", _RANGES)


_RANGES = "threshold is in [0, 1], prefix_padding_ms >= 0, silence_duration_ms > 0, interrupt_response a boolean"


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


TURN_BASED = Profile(
    name="turn-based",
    trace_format="realtime-turn-based-pcm16-v1",
    unit_ms=200,
    tail_policy="flush",
    expects_receipts=True,
    expects_unit_done=True,
    audio_delta_events=("response.output_audio.delta",),
    playout_cut="cancelled_response",
    turn_detection_required=True,
    turn_detection_types=("server_vad",),
    turn_detection_keys=(
        "type", "threshold", "prefix_padding_ms", "silence_duration_ms", "interrupt_response",
    ),
    completed_reasons=("stop", "empty_turn"),
    cancelled_reasons=("interrupted",),
)

PROFILES: dict[str, Profile] = {TURN_BASED.name: TURN_BASED}
BY_TRACE_FORMAT: dict[str, Profile] = {p.trace_format: p for p in PROFILES.values()}


def get_profile(name: str | Profile) -> Profile:
    """The registered profile ``name``; an unknown name raises FdbError listing the known ones."""
    if isinstance(name, Profile):
        return name
    try:
        return PROFILES[name]
    except KeyError:
        raise FdbError(
            f"unknown recorder profile {name!r}", f"known profiles: {', '.join(sorted(PROFILES))}"
        ) from None


def profile_for_trace_format(trace_format: str) -> Profile:
    try:
        return BY_TRACE_FORMAT[trace_format]
    except KeyError:
        raise FdbError(
            f"unknown trace format {trace_format!r}",
            f"known trace formats: {', '.join(sorted(BY_TRACE_FORMAT))}",
        ) from None
