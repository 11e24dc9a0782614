"""session.update rules and the capability grant of a native (full-duplex) session.

The turn-based rules of :mod:`serving.realtime.negotiation` apply (model, formats, voice,
instructions, sampling, frozen fields), with these differences, as on MiniCPM-o:

- ``audio.input.turn_detection`` other than ``null`` is refused with ``not_applicable`` ("VAD is
  only available for turn-based sessions"): the model decides by itself when to speak.
- ``input_audio_buffer.commit`` and ``response.create`` are not granted (``client_commit`` false).
- ``output_modalities`` must include ``audio`` (the reply is emitted unit by unit as audio).
- ``sglang.timebase.native_unit_ms`` picks the input unit among the deployment's
  ``unit_ms_choices`` (``unsupported_unit``); ``sglang.duplex.backchannel`` (bool) turns the
  backchannel on or off. Both are fixed once the session is open (``frozen_field``).
- ``sglang.voice`` must be one of the capabilities' ``voices`` (``unsupported_voice``) and
  ``sglang.reference_audio`` a PCM16 WAV of at most 30 s and 1 MiB (``invalid_reference_audio``),
  see :mod:`serving.duplex.reference`; both are echoed in session.updated and fixed once the
  session is open. The input may be 16 or 24 kHz PCM (resampled to the models' 16 kHz).
- The tail policy is ``pad``: the partial last unit is filled with silence for the model, and
  ``sglang.input_audio.drained`` reports that padding.
"""

from __future__ import annotations

from typing import Any

from serving.duplex.reference import check_reference_audio, check_voice
from serving.realtime.negotiation import (
    INPUT_RATE,
    INPUT_RATES,
    OUTPUT_RATE,
    SAMPLING_PARAMETERS,
    VOICE,
    Sampling,
    SessionConfig,
    apply_update,
    capabilities,
    deployment_voices,
)
from serving.realtime.protocol import ProtocolError, SessionPatch, shown
from serving.systems import DuplexSettings, SystemConfig


class NativeConfig(SessionConfig):
    """The effective settings of one native session."""

    unit_ms: int
    backchannel: bool
    voice: str = VOICE
    reference_audio: dict[str, Any] | None = None  # the acknowledgement of sglang.reference_audio


def duplex_settings(system: SystemConfig) -> DuplexSettings:
    if system.duplex is None:
        raise ValueError(f"system {system.name} is not a native duplex system")
    return system.duplex


def initial_config(system: SystemConfig) -> NativeConfig:
    duplex = duplex_settings(system)
    return NativeConfig(
        instructions=system.instructions,
        output_modalities=("text", "audio"),
        turn_detection=None,
        sampling=Sampling(
            temperature=system.temperature, max_new_tokens_per_unit=system.max_tokens
        ),
        unit_ms=duplex.unit_ms,
        backchannel=duplex.backchannel,
        voice=deployment_voices(system)[0],
    )


def native_capabilities(system: SystemConfig, config: NativeConfig | None = None) -> dict[str, Any]:
    """The grant: the deployment's defaults, or a session's effective unit and backchannel."""
    duplex = duplex_settings(system)
    unit_ms = config.unit_ms if config else duplex.unit_ms
    base = capabilities(system)
    return {
        "model": system.model,
        "system": system.name,
        "interaction": "native",
        "native_full_duplex": True,
        "proactive_output": False,
        "turn_control": [None],
        "client_commit": False,
        "input_modalities": ["audio"],
        "output_modalities": ["audio", "text"],
        "input_audio_format": {
            "type": "audio/pcm",
            "rate": config.input_rate if config else INPUT_RATE,
        },
        "input_audio_rates": list(INPUT_RATES),
        "output_audio_format": {"type": "audio/pcm", "rate": OUTPUT_RATE},
        "native_unit_ms": unit_ms,
        "first_unit_ms": unit_ms,
        "native_unit_ms_choices": list(duplex.unit_ms_choices),
        "microturn_ms": None,
        "tail_policy": "pad",
        "supports_server_interrupt": False,
        "supports_truncate": False,
        "supports_cancel": True,
        "supports_resume": False,
        "partial_style": "append_only",
        "pressure_policy": "reject",
        "strict_order": True,
        "sampling_parameters": list(SAMPLING_PARAMETERS),
        "supports_reference_audio": False,
        "supports_instruction_updates": True,
        "supports_sampling_updates": True,
        "voices": deployment_voices(system),
        "backchannel": config.backchannel if config else duplex.backchannel,
        "max_sessions": system.max_sessions,
        "limits": {**base["limits"], "max_context_ms": duplex.max_context_ms},
    }


def _fail(code: str, message: str, param: str, event_id: str | None) -> ProtocolError:
    return ProtocolError(code, message, param=param, event_id=event_id)


def _native_fields(
    patch: SessionPatch,
    current: NativeConfig,
    system: SystemConfig,
    event_id: str | None,
    opened: bool,
) -> dict[str, Any]:
    """unit_ms, backchannel, voice and reference audio from ``sglang``."""
    duplex, sglang = duplex_settings(system), patch.sglang
    changes: dict[str, Any] = {}
    timebase = (sglang.timebase if sglang else None) or {}
    extra = sorted(set(timebase) - {"native_unit_ms"})
    if extra:
        raise _fail(
            "invalid_session",
            f"unknown sglang.timebase fields: {', '.join(extra)}",
            "session.sglang.timebase",
            event_id,
        )
    if "native_unit_ms" in timebase:
        unit = timebase["native_unit_ms"]
        if unit not in duplex.unit_ms_choices or isinstance(unit, bool):
            raise _fail(
                "unsupported_unit",
                f"native_unit_ms {unit!r} is not served; use one of {list(duplex.unit_ms_choices)}",
                "session.sglang.timebase.native_unit_ms",
                event_id,
            )
        changes["unit_ms"] = unit
    options = (sglang.duplex if sglang else None) or {}
    extra = sorted(set(options) - {"backchannel"})
    if extra or not isinstance(options.get("backchannel", True), bool):
        raise _fail(
            "invalid_session",
            "sglang.duplex takes only backchannel (a boolean)",
            "session.sglang.duplex",
            event_id,
        )
    if "backchannel" in options:
        changes["backchannel"] = options["backchannel"]
    if sglang is not None and sglang.voice is not None:
        changes["voice"] = check_voice(sglang.voice, deployment_voices(system), event_id)
    if sglang is not None and sglang.reference_audio is not None:
        changes["reference_audio"] = check_reference_audio(sglang.reference_audio, event_id)
    if opened:
        for key, value in changes.items():
            if value != getattr(current, key):
                field = FROZEN_NAMES[key]
                raise _fail(
                    "frozen_field",
                    f"session field is frozen: session.sglang.{field}",
                    f"session.sglang.{field}",
                    event_id,
                )
    return changes


FROZEN_NAMES = {
    "unit_ms": "timebase.native_unit_ms",
    "backchannel": "duplex.backchannel",
    "voice": "voice",
    "reference_audio": "reference_audio",
}


def apply_native_update(
    current: NativeConfig,
    patch: SessionPatch,
    system: SystemConfig,
    event_id: str | None,
    opened: bool,
) -> NativeConfig:
    """The configuration after ``patch``; ProtocolError when refused (nothing changes then)."""
    audio_in = patch.audio.input if patch.audio else None
    if audio_in is not None and audio_in.turn_detection is not None:
        raise _fail(
            "not_applicable",
            "VAD is only available for turn-based sessions: a native session "
            "takes turn_detection null",
            "session.audio.input.turn_detection",
            event_id,
        )
    if patch.output_modalities is not None and "audio" not in patch.output_modalities:
        raise _fail(
            "unsupported_modalities",
            "a native session speaks: output_modalities must be ['audio'] or ['text', 'audio']",
            "session.output_modalities",
            event_id,
        )
    fmt = audio_in.format if audio_in is not None else None
    if fmt is not None and (fmt.type != "audio/pcm" or fmt.rate not in (None, *INPUT_RATES)):
        raise _fail(
            "unsupported_audio_format",
            f"unsupported PCM format or sample rate for input: {shown(fmt.type)} at {fmt.rate} Hz "
            "(a native session takes audio/pcm at 16000 or 24000 Hz)",
            "session.audio.input.format",
            event_id,
        )
    native = _native_fields(patch, current, system, event_id, opened)
    cleared = {"timebase": None, "duplex": None, "voice": None, "reference_audio": None}
    plain = patch.model_copy(
        update={"sglang": patch.sglang.model_copy(update=cleared) if patch.sglang else None}
    )
    updated = apply_update(current, plain, system, event_id, opened)
    return updated.model_copy(update={**native, "turn_detection": None})


def native_session_object(
    session_id: str, system: SystemConfig, config: NativeConfig | None
) -> dict[str, Any]:
    """session.created (``config`` None) and session.updated bodies of a native session."""
    body: dict[str, Any] = {
        "id": session_id,
        "object": "realtime.session",
        "type": "realtime",
        "model": system.model,
    }
    if config is None:
        body["sglang"] = {"granted": None}
        return body
    body.update(
        {
            "instructions": config.instructions,
            "output_modalities": list(config.output_modalities),
            "audio": {
                "input": {
                    "format": {"type": "audio/pcm", "rate": config.input_rate},
                    "turn_detection": None,
                },
                "output": {
                    "format": {"type": "audio/pcm", "rate": OUTPUT_RATE},
                    "voice": config.voice,
                },
            },
            "sglang": {
                "granted": native_capabilities(system, config),
                "sampling": config.sampling.model_dump(),
                "timebase": {"native_unit_ms": config.unit_ms, "tail_policy": "pad"},
                "duplex": {"backchannel": config.backchannel},
                "voice": config.voice,
                "reference_audio": config.reference_audio,
            },
        }
    )
    return body
