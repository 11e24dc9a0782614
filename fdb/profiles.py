"""Protocol profiles: what a recorder sends and expects, what the oracle checks, how export cuts.

- ``turn-based`` (``realtime-turn-based-pcm16-v1``): the session protocol with server-side turn
  detection under ``session.audio.input``, 200 ms units, a flushed tail, ``sglang.input_audio.*``
  receipts and ``sglang.unit.done``, ``response.output_audio.delta`` at 24 kHz; playout is cut
  when a ``response.done`` with status ``cancelled`` arrives.
- ``minicpmo-native-pr2377`` (``realtime-pcm16-v1``): the native session protocol, 1 s units,
  tail policy ``pad``, the same receipts; ``--turn-detection`` is rejected; one response per
  session ending completed/stop (or cancelled/client_closed after session.close).
- ``personaplex-native-80ms`` (``realtime-native80-pcm16-v1``): the native session protocol of
  PersonaPlex / VoiceChat-style models: 24 kHz in and out (declared in session.update), 80 ms
  units asked for with ``sglang.timebase.native_unit_ms``, tail policy ``pad``, the same
  receipts; the whole session is one response, completed with reason ``input_audio_ended`` after
  the input ends (or ``stop``), which may arrive after the drain; the client never cancels or
  truncates (the model answers both with ``not_supported``).
- ``qwen3-omni-half-duplex`` (``realtime-legacy-pcm16-v1``): the legacy conversation protocol:
  flat (beta) ``turn_detection`` in session.update, ``response.audio.delta``, no receipts; the
  session ends ``tail_s`` after the input with a no-op session.update whose session.updated
  proves liveness; playout is cut at ``output_audio_buffer.cleared`` or at
  ``input_audio_buffer.speech_started`` unless ``interrupt_response`` is false.
- ``openai-ga`` / ``openai-beta``: plain OpenAI Realtime (24 kHz in and out; GA names and the
  ``session.audio`` shape, or beta names and the flat session), ended like the legacy profile.
"""

from __future__ import annotations

import json
import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from fdb.errors import FdbError

PlayoutCut = Literal["cancelled_response", "cleared_or_speech_started"]
CancelRule = Literal["own_speech_started", "speech_during", "after_close"]


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
    completed_reasons: tuple[str | None, ...]
    cancelled_reasons: tuple[str, ...]
    cancel_rule: CancelRule = "own_speech_started"
    session_shape: Literal["ga", "beta"] = "ga"  # turn_detection under audio.input, or flat
    end_mode: Literal["drain", "tail"] = "drain"  # sglang end/drained/close, or a no-op update
    tail_s: float = 1.0  # --legacy-tail: seconds after the input before the no-op update
    sends_seq: bool = True  # input_audio_buffer.append carries sglang.seq
    sends_t_start: bool = False  # ... and sglang.t_start_ms
    required_grant: tuple[tuple[str, Any], ...] = ()  # session.updated session.sglang.granted
    extra_headers: tuple[tuple[str, str], ...] = ()
    declares_formats: bool = False  # session.update names the audio formats (OpenAI profiles)
    # session.update carries ``"sglang": {}``: it asks a GA server for the session protocol's
    # extension events (receipts, units, progress) and its 16 kHz input
    requests_extensions: bool = False
    interrupt_default: bool = True  # interrupt_response when the request leaves it out
    native_rules: bool = False  # the oracle's native rules: output ends at the drain, empty EOS unit
    single_response: bool = False  # the whole session is one response, done after the input end
    requests_unit_ms: bool = False  # session.update asks for unit_ms in sglang.timebase.native_unit_ms
    takes_session_settings: bool = True  # sglang.voice / sampling / reference_audio may be sent

    @property
    def packet_samples(self) -> int:
        return self.input_rate * self.packet_ms // 1000

    def padding_ms(self, input_ms: float) -> float:
        """Padding the drain reports: 0 for a flushed tail, up to a whole unit for ``pad``."""
        if self.tail_policy == "flush":
            return 0.0
        return math.ceil(input_ms / self.unit_ms) * self.unit_ms - input_ms

    def interrupts(self, turn_detection: dict[str, Any] | None) -> bool:
        """Whether speech_started cuts playout (``cleared_or_speech_started`` profiles)."""
        if turn_detection is None:
            return self.interrupt_default
        return bool(turn_detection.get("interrupt_response", self.interrupt_default))

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
_RANGES = ("threshold is in [0, 1], prefix_padding_ms >= 0, silence_duration_ms > 0, eagerness one of "
           "low/medium/high/auto, interrupt_response and create_response booleans")


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
    turn_detection_types=("server_vad", "semantic_vad"),
    turn_detection_keys=(
        "type", "threshold", "prefix_padding_ms", "silence_duration_ms", "interrupt_response", "eagerness",
    ),
    completed_reasons=("stop", "empty_turn"),
    cancelled_reasons=("interrupted",),
    requests_extensions=True,
)

NATIVE = Profile(
    name="minicpmo-native-pr2377",
    trace_format="realtime-pcm16-v1",
    unit_ms=1000,
    tail_policy="pad",
    expects_receipts=True,
    expects_unit_done=True,
    audio_delta_events=("response.output_audio.delta",),
    playout_cut="cancelled_response",
    turn_detection_required=False,
    turn_detection_types=(),
    turn_detection_keys=(),
    completed_reasons=("stop",),
    cancelled_reasons=("client_closed",),
    cancel_rule="after_close",
    sends_t_start=True,
    required_grant=(("interaction", "native"), ("tail_policy", "pad"), ("native_unit_ms", 1000)),
    native_rules=True,
)

NATIVE_80 = NATIVE.model_copy(update=dict(
    name="personaplex-native-80ms", trace_format="realtime-native80-pcm16-v1", input_rate=24000,
    unit_ms=80, completed_reasons=("input_audio_ended", "stop"), declares_formats=True,
    required_grant=(("interaction", "native"), ("tail_policy", "pad"), ("native_unit_ms", 80)),
    single_response=True, requests_unit_ms=True,
))

_VAD_KEYS = (
    "type", "threshold", "prefix_padding_ms", "silence_duration_ms", "interrupt_response",
    "create_response", "eagerness",
)
_CONVERSATION = dict(
    unit_ms=80, tail_policy="flush", expects_receipts=False, expects_unit_done=False,
    playout_cut="cleared_or_speech_started", turn_detection_required=True,
    turn_detection_types=("server_vad", "semantic_vad"), turn_detection_keys=_VAD_KEYS,
    completed_reasons=(None, "stop", "max_output_tokens"), cancelled_reasons=("turn_detected",),
    cancel_rule="speech_during", end_mode="tail", sends_seq=False, takes_session_settings=False,
)

LEGACY = Profile(
    name="qwen3-omni-half-duplex", trace_format="realtime-legacy-pcm16-v1",
    audio_delta_events=("response.audio.delta",), session_shape="beta", **_CONVERSATION,
)
OPENAI_GA = Profile(
    name="openai-ga", trace_format="openai-ga-pcm16-v1", input_rate=24000,
    audio_delta_events=("response.output_audio.delta",), session_shape="ga", declares_formats=True,
    **_CONVERSATION,
)
OPENAI_BETA = Profile(
    name="openai-beta", trace_format="openai-beta-pcm16-v1", input_rate=24000,
    audio_delta_events=("response.audio.delta",), session_shape="beta",
    extra_headers=(("OpenAI-Beta", "realtime=v1"),), declares_formats=True, **_CONVERSATION,
)

PROFILES: dict[str, Profile] = {p.name: p for p in (TURN_BASED, NATIVE, NATIVE_80, LEGACY, OPENAI_GA, OPENAI_BETA)}
BY_TRACE_FORMAT: dict[str, Profile] = {p.trace_format: p for p in PROFILES.values()}


# The dialect each bundled system of serving/systems.py speaks (a system not named here: turn-based).
BUNDLED_SYSTEM_PROFILES = {"embedded-cascade": TURN_BASED.name, "duplex-baseline": NATIVE.name,
                           "gpu-native": NATIVE_80.name}
# Further dialects a bundled system also speaks (duplex-baseline grants 80 ms units and 24 kHz input).
BUNDLED_ALSO_SPEAKS = {"duplex-baseline": (NATIVE_80.name,)}


def check_bundled_profile(system: str, profile: str) -> None:
    """FdbError unless the bundled ``system`` speaks ``profile``."""
    speaks = BUNDLED_SYSTEM_PROFILES.get(system, TURN_BASED.name)
    if profile != speaks and profile not in BUNDLED_ALSO_SPEAKS.get(system, ()):
        raise FdbError(f"the bundled system {system} speaks {speaks}, not {profile}",
                       f"pass --profile {speaks}, another --system, or --url of a server that speaks {profile}")


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


def echoed_turn_detection(profile: Profile, session: dict[str, Any] | None) -> dict[str, Any] | None:
    """The turn_detection a session.updated's ``session`` reports, where the profile puts it."""
    if not isinstance(session, dict):
        return None
    if profile.session_shape == "beta":
        found = session.get("turn_detection")
    else:
        found = ((session.get("audio") or {}).get("input") or {}).get("turn_detection")
    return found if isinstance(found, dict) else None


def declared_output_rate(profile: Profile, session: dict[str, Any] | None) -> int | str | None:
    """The output rate a session.updated declares (GA: audio.output.format.rate; beta: the
    ``output_audio_format`` name, where ``pcm16`` means 24 kHz); None when it declares none."""
    if not isinstance(session, dict):
        return None
    if profile.session_shape == "beta":
        fmt = session.get("output_audio_format")
        return None if fmt is None else 24000 if fmt == "pcm16" else str(fmt)
    return (((session.get("audio") or {}).get("output") or {}).get("format") or {}).get("rate")
