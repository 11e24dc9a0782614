"""The dialects fdb speaks, and their registry (by name and by trace format).

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
  ``session.audio`` shape, or beta names and the flat session), ended like the legacy dialect.

A new dialect is one ``Dialect`` here, added to ``DIALECTS``.
"""

from __future__ import annotations

from fdb.dialects.events import (
    BETA_NAMES,
    OutputAudioCleared,
    OutputAudioDelta,
    ResponseDone,
    SpeechStarted,
    event_type,
)
from fdb.dialects.model import (
    Client,
    CutRule,
    Cuts,
    Dialect,
    End,
    Events,
    Formats,
    OracleRules,
    Responses,
    TurnDetection,
    Units,
)
from fdb.errors import FdbError
from fdb.registry import Registry, known

# Event names come from the server's event records (fdb.dialects.events): one vocabulary.
GA_AUDIO = (event_type(OutputAudioDelta),)
BETA_AUDIO = (BETA_NAMES[event_type(OutputAudioDelta)],)

CANCELLED_RESPONSE = Cuts(
    rules=(CutRule(event=event_type(ResponseDone), target="response.id", status="cancelled"),),
    description="a cancelled response.done drops that response's queued audio",
)
CLEARED_OR_SPEECH_STARTED = Cuts(
    rules=(
        CutRule(event=event_type(OutputAudioCleared), target="response_id"),
        CutRule(event=event_type(SpeechStarted), target="all", obeys_interrupt=True),
    ),
    description="output_audio_buffer.cleared or speech_started drops queued audio",
)
SERVER_VAD = ("server_vad", "semantic_vad")

TURN_BASED = Dialect(
    name="turn-based",
    trace_format="realtime-turn-based-pcm16-v1",
    summary="the bundled server",
    events=Events(audio_delta=GA_AUDIO, receipts=True, unit_done=True),
    units=Units(unit_ms=200, tail_policy="flush"),
    cuts=CANCELLED_RESPONSE,
    responses=Responses(
        completed_reasons=("stop", "empty_turn"),
        cancelled_reasons=("interrupted",),
        client_cancel_reasons=("interrupted",),
        commit_answers_itself=True,
    ),
    turn_detection=TurnDetection(
        required=True,
        types=SERVER_VAD,
        keys=(
            "type",
            "threshold",
            "prefix_padding_ms",
            "silence_duration_ms",
            "interrupt_response",
            "eagerness",
        ),
    ),
    client=Client(requests_extensions=True),
)

NATIVE = Dialect(
    name="minicpmo-native-pr2377",
    trace_format="realtime-pcm16-v1",
    summary="native full duplex, 1 s units",
    events=Events(audio_delta=GA_AUDIO, receipts=True, unit_done=True),
    units=Units(unit_ms=1000, tail_policy="pad"),
    cuts=CANCELLED_RESPONSE,
    responses=Responses(
        completed_reasons=("stop",), cancelled_reasons=("client_closed",), cancel_rule="after_close"
    ),
    turn_detection=TurnDetection(required=False),
    client=Client(sends_t_start=True),
    oracle=OracleRules(
        native=True,
        required_grant=(
            ("interaction", "native"),
            ("tail_policy", "pad"),
            ("native_unit_ms", 1000),
        ),
    ),
)

NATIVE_80 = NATIVE.model_copy(
    update=dict(
        name="personaplex-native-80ms",
        trace_format="realtime-native80-pcm16-v1",
        summary="24 kHz in, 80 ms units, one response per session",
        formats=Formats(input_rate=24000, declared=True),
        units=Units(unit_ms=80, tail_policy="pad", requested=True),
        responses=NATIVE.responses.model_copy(
            update=dict(completed_reasons=("input_audio_ended", "stop"), single=True)
        ),
        oracle=OracleRules(
            native=True,
            required_grant=(
                ("interaction", "native"),
                ("tail_policy", "pad"),
                ("native_unit_ms", 80),
            ),
        ),
    )
)

_CONVERSATION = dict(
    events=Events(audio_delta=GA_AUDIO, receipts=False, unit_done=False),
    units=Units(unit_ms=80, tail_policy="flush"),
    end=End(mode="tail"),
    cuts=CLEARED_OR_SPEECH_STARTED,
    responses=Responses(
        completed_reasons=(None, "stop", "max_output_tokens"),
        cancelled_reasons=("turn_detected",),
        cancel_rule="speech_during",
    ),
    turn_detection=TurnDetection(
        required=True,
        types=SERVER_VAD,
        keys=(
            "type",
            "threshold",
            "prefix_padding_ms",
            "silence_duration_ms",
            "interrupt_response",
            "create_response",
            "eagerness",
        ),
    ),
    client=Client(sends_seq=False, session_settings=False),
)
_BETA_EVENTS = Events(audio_delta=BETA_AUDIO, receipts=False, unit_done=False)

LEGACY = Dialect(
    name="qwen3-omni-half-duplex",
    trace_format="realtime-legacy-pcm16-v1",
    summary="legacy response.audio.delta, barge-in cuts",
    shape="beta",
    **{**_CONVERSATION, "events": _BETA_EVENTS},
)
OPENAI_GA = Dialect(
    name="openai-ga",
    trace_format="openai-ga-pcm16-v1",
    summary="OpenAI Realtime GA",
    formats=Formats(input_rate=24000, declared=True),
    shape="ga",
    **_CONVERSATION,
)
OPENAI_BETA = Dialect(
    name="openai-beta",
    trace_format="openai-beta-pcm16-v1",
    summary="OpenAI Realtime beta",
    formats=Formats(input_rate=24000, declared=True),
    shape="beta",
    **{
        **_CONVERSATION,
        "events": _BETA_EVENTS,
        "client": _CONVERSATION["client"].model_copy(
            update={"headers": (("OpenAI-Beta", "realtime=v1"),)}
        ),
    },
)

DIALECTS = Registry[Dialect](
    "recorder profile",
    {d.name: d for d in (TURN_BASED, NATIVE, NATIVE_80, LEGACY, OPENAI_GA, OPENAI_BETA)},
    hint=known("profiles"),
)
BY_TRACE_FORMAT = Registry[Dialect](
    "trace format",
    {d.trace_format: d for d in DIALECTS.values()},
    hint=known("trace formats"),
)


def dialects_help() -> str:
    """Every dialect's name with its summary, for the CLI's ``--profile`` help."""
    return ", ".join(f"{d.name} ({d.summary})" if d.summary else d.name for d in DIALECTS.values())


# The dialect each bundled system of serving/systems.py speaks (any other system: turn-based).
BUNDLED_SYSTEM_DIALECTS = {
    "embedded-cascade": TURN_BASED.name,
    "duplex-baseline": NATIVE.name,
    "gpu-native": NATIVE_80.name,
}
# Further dialects a bundled system speaks (duplex-baseline grants 80 ms units, 24 kHz input).
BUNDLED_ALSO_SPEAKS = {"duplex-baseline": (NATIVE_80.name,)}


def check_bundled_dialect(system: str, profile: str) -> None:
    """FdbError unless the bundled ``system`` speaks the dialect ``profile``."""
    speaks = BUNDLED_SYSTEM_DIALECTS.get(system, TURN_BASED.name)
    if profile != speaks and profile not in BUNDLED_ALSO_SPEAKS.get(system, ()):
        raise FdbError(
            f"the bundled system {system} speaks {speaks}, not {profile}",
            f"pass --profile {speaks}, another --system, "
            f"or --url of a server that speaks {profile}",
        )


def get_dialect(name: str | Dialect) -> Dialect:
    """The registered dialect ``name``; an unknown name raises FdbError listing the known ones."""
    return name if isinstance(name, Dialect) else DIALECTS[name]


def dialect_for_trace_format(trace_format: str) -> Dialect:
    return BY_TRACE_FORMAT[trace_format]
