"""session.update rules, the effective session configuration and the capability grant.

Rules (the Full-Duplex Guide, "Session settings" and "Rejected in a realtime session", with the
OpenAI Realtime GA session as the default, see :mod:`serving.realtime.wire`):

- ``session.type``, when sent, must be ``realtime``; ``session.model`` must be the deployment's
  model id (``model_mismatch``). Input audio is ``audio/pcm`` at 24 kHz (GA's only PCM rate, the
  default of a GA or beta session) or 16 kHz (the default of a session that sends ``sglang``),
  resampled to the models' 16 kHz; output is ``audio/pcm`` at 24 kHz. Other formats are
  ``unsupported_audio_format``; the input format is fixed once audio was appended.
- ``audio.input.turn_detection`` is ``{"type": "server_vad", threshold?, prefix_padding_ms?,
  silence_duration_ms?, interrupt_response?, create_response?}`` or ``null`` (utterances then
  end only at ``input_audio_buffer.commit``); ``{"type": "semantic_vad", eagerness?}`` (low,
  medium, high or auto, see :mod:`serving.conversation.end_of_turn`) where Smart Turn is installed;
  any other type is ``unsupported_turn_detection``. ``interrupt_response`` false lets a reply
  play on under new speech; ``create_response`` false (and, in a GA session, turn detection
  null) leaves a reply to the client's ``response.create``.
- ``max_output_tokens`` (1 to 4096 or ``"inf"``) is the reply token limit, as
  ``sglang.sampling.max_new_tokens_per_unit`` is. ``sglang.sampling`` takes ``temperature``
  (0 to 2) and ``max_new_tokens_per_unit`` (>= 1). A deployment whose ``openai_chat`` node
  leaves ``temperature`` null grants it as null: the chat request then has no temperature field
  (the service's own default) until a session sets one.
- GA fields this server cannot apply (``tools``, ``tool_choice``, ``tracing``, ``include``,
  ``truncation``, ``prompt``, ``reasoning``, ``parallel_tool_calls``, a voice other than the
  deployment's, a speed other than 1.0, noise reduction) are accepted: the update is granted and a
  ``warning`` error event (``not_applied``) names each one. A session that sends ``sglang``
  asks for the Guide's strict rules instead: voice, speed and noise reduction are then refused
  (``unsupported_voice`` ...), as they were before the GA default.
- After the first session.update only instructions, turn detection, output_modalities and
  sampling may change in a strict session; sending any other field with a different value is
  ``frozen_field`` ("session field is frozen"). Re-sending an unchanged value is allowed.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fdb.models.turn import smart_turn_installed
from serving.realtime.protocol import (
    GA_NOT_APPLIED,
    ProtocolError,
    SessionPatch,
    describe_validation_error,
    shown,
)
from serving.speech import speech_capabilities
from serving.systems import SystemConfig

INPUT_RATE = 16000  # what the models take; a 24 kHz input is resampled to it
INPUT_RATES = (16000, 24000)
GA_INPUT_RATE = 24000
OUTPUT_RATE = 24000
MAX_OUTPUT_TOKENS = 4096
UNIT_MS = 200
VOICE = "en_US-joe-medium"
SAMPLING_PARAMETERS = ("temperature", "max_new_tokens_per_unit")
MODALITIES = ({"audio"}, {"text"}, {"text", "audio"})


class ServerVad(BaseModel):
    """The granted server_vad settings, echoed in full in session.updated."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["server_vad"] = "server_vad"
    threshold: float = Field(ge=0.0, le=1.0)
    prefix_padding_ms: int = Field(ge=0, le=5000)
    silence_duration_ms: int = Field(ge=32, le=10000)
    interrupt_response: bool = True
    create_response: bool = True


class SemanticVad(BaseModel):
    """The granted semantic_vad settings (see :mod:`serving.conversation.end_of_turn`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["semantic_vad"] = "semantic_vad"
    eagerness: Literal["low", "medium", "high", "auto"] = "auto"
    interrupt_response: bool = True
    create_response: bool = True


class Sampling(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    temperature: float | None = Field(ge=0.0, le=2.0)  # None: not sent, the model's own default
    max_new_tokens_per_unit: int = Field(ge=1, le=4096)


class SessionConfig(BaseModel):
    """The effective settings of one session."""

    model_config = ConfigDict(frozen=True)

    instructions: str
    output_modalities: tuple[str, ...] = ("text", "audio")
    turn_detection: ServerVad | SemanticVad | None
    sampling: Sampling
    input_rate: int = INPUT_RATE  # the client's input audio (resampled to INPUT_RATE)


def initial_config(system: SystemConfig, input_rate: int = INPUT_RATE) -> SessionConfig:
    vad = system.vad
    return SessionConfig(
        instructions=system.instructions,
        input_rate=input_rate,
        turn_detection=ServerVad(
            threshold=vad.threshold,
            prefix_padding_ms=vad.prefix_padding_ms,
            silence_duration_ms=vad.silence_duration_ms,
        ),
        sampling=Sampling(
            temperature=system.temperature, max_new_tokens_per_unit=system.max_tokens
        ),
    )


def capabilities(system: SystemConfig) -> dict[str, Any]:
    """What this deployment grants; served at /v1/realtime/capabilities and in the grant."""
    return {
        "model": system.model,
        "system": system.name,
        "interaction": "turn_based",
        "native_full_duplex": False,
        "turn_control": ["server_vad", *(["semantic_vad"] if smart_turn_installed() else []), None],
        "client_commit": True,
        "input_audio_format": {"type": "audio/pcm", "rate": INPUT_RATE},
        "output_audio_format": {"type": "audio/pcm", "rate": OUTPUT_RATE},
        "output_modalities": ["text", "audio"],
        "native_unit_ms": UNIT_MS,
        "tail_policy": "flush",
        "microturn_ms": None,
        "proactive_output": False,
        "supports_cancel": True,
        "supports_truncate": True,
        "supports_resume": False,
        "sampling_parameters": list(SAMPLING_PARAMETERS),
        "supports_instruction_updates": True,
        "supports_sampling_updates": True,
        "voices": deployment_voices(system),
        "service_nodes": {
            role: {"kind": node.kind, "model": node.model}
            for role, node in system.backends.nodes().items()
        },
        "gpu_nodes": {
            role: {"kind": node.kind, "weights": node.source().label()}
            for role, node in system.backends.gpu_nodes().items()
        },
        "max_output_lead_ms": system.max_output_lead_ms,
        "max_sessions": system.max_sessions,
        "limits": {
            "max_input_bytes": system.max_input_bytes,
            "max_output_bytes": system.max_output_bytes,
            "max_instructions_chars": system.max_instructions_chars,
            "session_update_timeout_s": system.session_update_timeout_s,
            "idle_timeout_s": system.idle_timeout_s,
        },
        "speech": speech_capabilities(system),
    }


def deployment_voices(system: SystemConfig) -> list[str]:
    """The voices a session may name: the deployment's TTS voice."""
    tts = system.backends.tts
    return [VOICE] if isinstance(tts, str) else [getattr(tts, "voice", "default")]


def _fail(code: str, message: str, param: str, event_id: str | None) -> ProtocolError:
    return ProtocolError(code, message, param=param, event_id=event_id)


def _turn_detection(
    raw: dict[str, Any] | None, system: SystemConfig, event_id: str | None
) -> ServerVad | SemanticVad | None:
    param = "session.audio.input.turn_detection"
    if raw is None:
        return None
    kind = raw.get("type")
    granted = [k for k in capabilities(system)["turn_control"] if k]
    if kind not in granted:
        raise _fail(
            "unsupported_turn_detection",
            f"turn detection type {shown(kind)} is unavailable; use {' or '.join(granted)} or null",
            param,
            event_id,
        )
    model, defaults = (
        (ServerVad, system.vad.model_dump()) if kind == "server_vad" else (SemanticVad, {})
    )
    try:
        return model.model_validate({**defaults, **{k: v for k, v in raw.items() if v is not None}})
    except ValidationError as exc:
        where, message = describe_validation_error(exc)
        raise _fail("invalid_turn_detection", f"turn_detection.{message}", param, event_id) from exc


def _sampling(raw: dict[str, Any], current: Sampling, event_id: str | None) -> Sampling:
    unknown = sorted(set(raw) - set(SAMPLING_PARAMETERS))
    if unknown:
        raise _fail(
            "unsupported_sampling",
            "unsupported sampling parameters: " + ", ".join(unknown),
            "session.sglang.sampling",
            event_id,
        )
    merged = {**current.model_dump(), **{k: v for k, v in raw.items() if v is not None}}
    try:
        return Sampling.model_validate(merged)
    except ValidationError as exc:
        _where, message = describe_validation_error(exc)
        raise _fail(
            "invalid_sampling", f"sampling.{message}", "session.sglang.sampling", event_id
        ) from exc


def _frozen_changes(patch: SessionPatch, system: SystemConfig, current: SessionConfig) -> list[str]:
    """The non-hot fields ``patch`` sends with a value other than the granted one."""
    changed: list[str] = []
    if patch.type is not None and patch.type != "realtime":
        changed.append("session.type")
    if patch.model is not None and patch.model != system.model:
        changed.append("session.model")
    audio = patch.audio
    for side, rate in (("input", current.input_rate), ("output", OUTPUT_RATE)):
        part = getattr(audio, side) if audio else None
        fmt = part.format if part else None
        if fmt is not None and (fmt.type, fmt.rate or rate) != ("audio/pcm", rate):
            changed.append(f"session.audio.{side}.format")
    out = audio.output if audio else None
    if out is not None and out.voice is not None and out.voice != VOICE:
        changed.append("session.audio.output.voice")
    if out is not None and out.speed is not None and out.speed != 1.0:
        changed.append("session.audio.output.speed")
    if audio and audio.input and audio.input.noise_reduction is not None:
        changed.append("session.audio.input.noise_reduction")
    return changed


def _input_rate(patch: SessionPatch, default: int, event_id: str | None) -> int | None:
    """The input rate ``patch`` names (None: it names none); 16 or 24 kHz PCM, else refused."""
    fmt = patch.audio.input.format if patch.audio and patch.audio.input else None
    if fmt is None:
        return None
    rate = fmt.rate if fmt.rate is not None else default
    if fmt.type != "audio/pcm" or rate not in INPUT_RATES:
        raise _fail(
            "unsupported_audio_format",
            f"unsupported PCM format or sample rate for input: "
            f"{shown(fmt.type)} at {fmt.rate} Hz (use audio/pcm at 24000 or 16000 Hz)",
            "session.audio.input.format",
            event_id,
        )
    return rate


def not_applied(patch: SessionPatch, strict: bool) -> list[tuple[str, str]]:
    """(param, message) for each GA field ``patch`` sets that this server takes without
    applying it (a lenient session's warnings; :func:`apply_update` refuses what a strict one
    cannot have)."""
    found: list[tuple[str, str]] = []
    unset = {"tools": [], "tool_choice": "auto", "truncation": "auto", "include": []}
    for name in GA_NOT_APPLIED:
        if name in patch.model_fields_set and getattr(patch, name) not in (
            None,
            unset.get(name, None),
        ):
            found.append(
                (
                    f"session.{name}",
                    f"session.{name} is accepted but not applied: this server "
                    "has no tool calling, tracing, prompt templates or reasoning settings",
                )
            )
    if strict:
        return found
    out = patch.audio.output if patch.audio else None
    if out is not None and out.voice is not None and out.voice != VOICE:
        found.append(
            (
                "session.audio.output.voice",
                f"voice {shown(out.voice)} is not available: the reply speaks with {VOICE!r}",
            )
        )
    if out is not None and out.speed is not None and out.speed != 1.0:
        found.append(
            (
                "session.audio.output.speed",
                f"speed {out.speed} is not applied: the reply speaks at 1.0",
            )
        )
    audio_in = patch.audio.input if patch.audio else None
    if audio_in is not None and audio_in.noise_reduction is not None:
        found.append(
            (
                "session.audio.input.noise_reduction",
                "noise_reduction is not applied: the input is used as sent",
            )
        )
    if (
        audio_in is not None
        and "transcription" in audio_in.model_fields_set
        and audio_in.transcription is None
    ):
        found.append(
            (
                "session.audio.input.transcription",
                "input transcription cannot be turned off "
                "here: the cascade transcribes every utterance",
            )
        )
    return found


def _check_fixed(
    patch: SessionPatch, system: SystemConfig, event_id: str | None, strict: bool = True
) -> None:
    """Fields that can never take another value: type, model, formats (and, in a strict
    session, voice, speed and noise reduction)."""
    if patch.type is not None and patch.type != "realtime":
        raise _fail(
            "invalid_session_type",
            f"session type {shown(patch.type)} is not served; use 'realtime'",
            "session.type",
            event_id,
        )
    if patch.model is not None and patch.model != system.model:
        raise _fail(
            "model_mismatch",
            f"model differs from deployment: {shown(patch.model)} is not {system.model!r}",
            "session.model",
            event_id,
        )
    audio = patch.audio
    fmt = audio.output.format if audio and audio.output else None
    if fmt is not None and (fmt.type != "audio/pcm" or fmt.rate not in (None, OUTPUT_RATE)):
        raise _fail(
            "unsupported_audio_format",
            f"unsupported PCM format or sample rate for output: "
            f"{shown(fmt.type)} at {fmt.rate} Hz (use audio/pcm at {OUTPUT_RATE} Hz)",
            "session.audio.output.format",
            event_id,
        )
    if not strict:
        return
    voice = audio.output.voice if audio and audio.output else None
    if voice is not None and voice != VOICE:
        raise _fail(
            "unsupported_voice",
            f"voice {shown(voice)} is not available; use {VOICE!r}",
            "session.audio.output.voice",
            event_id,
        )
    speed = audio.output.speed if audio and audio.output else None
    if speed is not None and speed != 1.0:
        raise _fail(
            "unsupported_speed",
            f"speed {speed} is not available; use 1.0",
            "session.audio.output.speed",
            event_id,
        )
    if audio and audio.input and audio.input.noise_reduction is not None:
        raise _fail(
            "unsupported_noise_reduction",
            "noise_reduction is not available; send null",
            "session.audio.input.noise_reduction",
            event_id,
        )


def apply_update(
    current: SessionConfig,
    patch: SessionPatch,
    system: SystemConfig,
    event_id: str | None,
    opened: bool,
    *,
    strict: bool = True,
    input_flowed: bool = False,
) -> SessionConfig:
    """The configuration after ``patch``; ProtocolError when the update is refused (the
    session then keeps ``current``). In a ``strict`` session, once ``opened``, a non-hot field
    sent with another value is ``frozen_field``; before that it gets the specific reason it
    cannot be granted. Once ``input_flowed`` the input format is fixed in every session."""
    frozen = _frozen_changes(patch, system, current) if opened and strict else []
    if frozen:
        raise _fail("frozen_field", f"session field is frozen: {frozen[0]}", frozen[0], event_id)
    _check_fixed(patch, system, event_id, strict)
    changes: dict[str, Any] = {}
    default_rate = INPUT_RATE if strict else GA_INPUT_RATE
    rate = _input_rate(patch, default_rate, event_id)
    if rate is None and strict and not opened and not input_flowed:
        rate = INPUT_RATE  # the Guide's session: 16 kHz unless it names a format
    if rate is not None and rate != current.input_rate:
        if input_flowed:
            raise _fail(
                "frozen_field",
                "session field is frozen: session.audio.input.format (audio "
                "was already appended at "
                f"{current.input_rate} Hz)",
                "session.audio.input.format",
                event_id,
            )
        changes["input_rate"] = rate
    if patch.temperature is not None:  # beta's session.temperature
        changes["sampling"] = _sampling(
            {"temperature": patch.temperature}, current.sampling, event_id
        )
    if patch.max_output_tokens is not None:
        tokens = MAX_OUTPUT_TOKENS if patch.max_output_tokens == "inf" else patch.max_output_tokens
        if isinstance(tokens, bool) or not 1 <= tokens <= MAX_OUTPUT_TOKENS:
            raise _fail(
                "invalid_value",
                f"max_output_tokens must be 1 to {MAX_OUTPUT_TOKENS} or 'inf'",
                "session.max_output_tokens",
                event_id,
            )
        changes["sampling"] = changes.get("sampling", current.sampling).model_copy(
            update={"max_new_tokens_per_unit": tokens}
        )
    if patch.instructions is not None:
        if len(patch.instructions) > system.max_instructions_chars:
            raise _fail(
                "instructions_too_long",
                "instructions exceed context or have invalid type "
                f"({len(patch.instructions)} > {system.max_instructions_chars} characters)",
                "session.instructions",
                event_id,
            )
        changes["instructions"] = patch.instructions
    if patch.output_modalities is not None:
        if set(patch.output_modalities) not in MODALITIES:
            raise _fail(
                "unsupported_modalities",
                "output_modalities must be ['audio'], ['text'] or ['text', 'audio']",
                "session.output_modalities",
                event_id,
            )
        changes["output_modalities"] = tuple(patch.output_modalities)
    audio_in = patch.audio.input if patch.audio else None
    if audio_in is not None and "turn_detection" in audio_in.model_fields_set:
        changes["turn_detection"] = _turn_detection(audio_in.turn_detection, system, event_id)
    if patch.sglang is not None and patch.sglang.sampling is not None:
        changes["sampling"] = _sampling(
            patch.sglang.sampling, changes.get("sampling", current.sampling), event_id
        )
    native_only = ("timebase", "duplex", "voice", "reference_audio")
    if patch.sglang is not None and any(
        getattr(patch.sglang, name) is not None for name in native_only
    ):
        raise _fail(
            "not_applicable",
            "sglang.timebase, sglang.duplex, sglang.voice and sglang.reference_audio "
            "are only available for native sessions",
            "session.sglang",
            event_id,
        )
    return current.model_copy(update=changes)


def session_object(
    session_id: str, system: SystemConfig, config: SessionConfig, extensions: bool = True
) -> dict[str, Any]:
    """The ``session`` of session.created (the default session, active from the start) and of
    session.updated: the full effective configuration in the GA shape, with the grant under
    ``sglang`` when the session takes the extensions."""
    turn = config.turn_detection.model_dump() if config.turn_detection else None
    body: dict[str, Any] = {
        "id": session_id,
        "object": "realtime.session",
        "type": "realtime",
        "model": system.model,
        "instructions": config.instructions,
        "output_modalities": list(config.output_modalities),
        "audio": {
            "input": {
                "format": {"type": "audio/pcm", "rate": config.input_rate},
                "turn_detection": turn,
                "transcription": {"model": "faster-whisper/whisper-tiny.en"},
                "noise_reduction": None,
            },
            "output": {
                "format": {"type": "audio/pcm", "rate": OUTPUT_RATE},
                "voice": VOICE,
                "speed": 1.0,
            },
        },
        "max_output_tokens": config.sampling.max_new_tokens_per_unit,
        "tools": [],
        "tool_choice": "auto",
        "tracing": None,
    }
    if extensions:
        body["sglang"] = {"granted": capabilities(system), "sampling": config.sampling.model_dump()}
    return body
