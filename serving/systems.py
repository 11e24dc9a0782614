"""The systems the server hosts, and how a deployment is configured.

A *system* names one backend per role (VAD, ASR, LLM, TTS) plus the deployment's limits and
session defaults. The registry holds the bundled systems; a ``launch.yaml`` picks one with
``system:`` and overrides any field, for example::

    system: embedded-cascade
    max_sessions: 2
    vad: {silence_duration_ms: 800}
    instructions: Answer in one short English sentence.

A role's backend may also be a service node, an OpenAI-compatible endpoint (see
``serving.service_nodes``), and ``services`` lists processes to start, wait for and stop with
the server (see ``serving.services``)::

    services:
      - {name: tts, command: [python, -m, fdb, serve, --port, "8105"], port: 8105, env: {}}
    backends:
      tts: {kind: openai_speech, base_url: http://127.0.0.1:8105/v1, model: fdb/embedded-cascade}

A ``vars:`` mapping names values that ``${name}`` in the file's strings takes (``--vars.NAME``
sets one); the shipped launch profiles (``fdb serve --profile NAME``, ``serving/profiles/``) use
it for their models, ports, GPUs and memory shares (``serving.launch_profiles``).

Every system is a session graph (``session_nodes`` + ``session_publish``, see
``serving.graph``; none: the bundled embedded cascade): a graph of nodes chosen by kind from the
one registry (``serving.graph.registry``). The graph says which session protocol the system
speaks: a native system's graph is one node of a ``native`` kind (``duplex_baseline``,
``moshi_gpu``), which speaks the native session protocol with the units and policy of the
system's ``duplex`` settings; any other graph speaks the turn-based one.

Settings that a session cannot change (limits, timeouts, ``max_output_lead_ms``) need a restart;
instructions, sampling and turn detection are only defaults that each session may override.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializeAsAny,
    ValidationError,
    model_validator,
)

from fdb.errors import FdbError
from serving.conversation.chunker import FIRST_CHUNK
from serving.graph.declare import GraphDecl, cascade, load_graph
from serving.graph.kinds import GpuNode
from serving.graph.registry import parse_backend
from serving.launch_profiles import check_profile, check_services, profile_path, substitute_vars
from serving.overrides import apply_overrides as apply_flags
from serving.service_nodes import OpenAiChatNode
from serving.services import ServiceEntry

# A role's backend given as a mapping with ``kind``: parsed by the registry into that kind's
# options model (serving.graph.registry.parse_backend), dumped with all of its fields.
BackendNode = SerializeAsAny[BaseModel]

DEFAULT_INSTRUCTIONS = "You are a helpful voice assistant. Answer in one short sentence."


class VadDefaults(BaseModel):
    """server_vad defaults used when a session sends turn detection without these fields."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    threshold: float = Field(0.5, ge=0.0, le=1.0)
    prefix_padding_ms: int = Field(300, ge=0, le=5000)
    silence_duration_ms: int = Field(500, ge=32, le=10000)


class FirstChunkWords(BaseModel):
    """The rule for a reply's first speakable chunk (``SystemConfig.first_chunk``), which the
    speech node cuts and a reply model announces ahead (serving/conversation/chunker.py)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    clause_words: int = Field(FIRST_CHUNK[0], ge=1, le=100)
    max_words: int = Field(FIRST_CHUNK[1], ge=1, le=100)

    @property
    def rule(self) -> tuple[int, int]:
        return self.clause_words, self.max_words


class Backends(BaseModel):
    """The backend per role: an embedded backend's key (see ``serving.models``) or, for asr, llm
    and tts, a node of the backend registry (a mapping with ``kind``: a service node, see
    ``serving.service_nodes``, or a GPU node, see ``serving.graph.kinds.GpuNode``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    vad: str = "silero"
    asr: str | BackendNode = "faster-whisper"
    llm: str | BackendNode = "smollm2"
    tts: str | BackendNode = "piper"

    @model_validator(mode="before")
    @classmethod
    def _nodes(cls, data: Any) -> Any:
        """A mapping becomes the role's node, so an error names the node's own field."""
        if isinstance(data, dict):
            data = {
                role: parse_backend(role, value) if isinstance(value, dict) else value
                for role, value in data.items()
            }
        return data

    def nodes(self) -> dict[str, BaseModel]:
        """The roles served by service nodes."""
        return {
            role: value
            for role, value in (("asr", self.asr), ("llm", self.llm), ("tts", self.tts))
            if not isinstance(value, str | GpuNode)
        }

    def gpu_nodes(self) -> dict[str, GpuNode]:
        """The roles served by GPU model nodes (serving.gpu)."""
        return {
            role: value
            for role, value in (("asr", self.asr), ("llm", self.llm), ("tts", self.tts))
            if isinstance(value, GpuNode)
        }


class SpeechService(BaseModel):
    """An OpenAI-compatible speech service that ``/v1/audio/speech`` passes requests through to
    (``POST {base_url}/audio/speech``). The key is read from the environment variable named by
    ``api_key_env`` at request time; it never appears in a configuration file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    base_url: str
    model: str | None = None  # replaces the request's model when given
    api_key_env: str | None = None  # e.g. OPENAI_API_KEY; None: no Authorization header
    timeout_s: float = Field(300.0, gt=0)


# The duplex baseline's policy settings, once keys of ``duplex``: its node's options now.
POLICY_KEYS = (
    "vad_threshold",
    "end_of_turn_ms",
    "min_utterance_ms",
    "yield_after_ms",
    "backchannel_after_ms",
    "backchannel_text",
    "turn_detection",
    "eagerness",
)


class DuplexSettings(BaseModel):
    """The native session protocol's settings of a native system (its graph's one node is of a
    native kind): its units, the backchannel's session default and the context a session may
    send. The policy of a ``duplex_baseline`` node is that node's options
    (``serving.graph.kinds.DuplexBaselineOptions``, :mod:`serving.duplex.policy`).

    A native system speaks the native session protocol instead of the turn-based one: no turn
    detection, no commit, input units of ``unit_ms`` with a padded tail.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    unit_ms: int = 1000  # the default grant; a session may ask for another of unit_ms_choices
    unit_ms_choices: tuple[int, ...] = (80, 200, 1000)
    backchannel: bool = True  # the session default; session.update sglang.duplex.backchannel
    max_context_ms: int = Field(600_000, ge=1000)  # input a session may send: context_exhausted

    @model_validator(mode="before")
    @classmethod
    def _no_model(cls, data: Any) -> Any:
        if isinstance(data, dict) and "model" in data:
            raise ValueError(
                "model: a native model is the node of the system's graph, not a duplex setting: "
                "session_nodes: {moshi: {kind: moshi_gpu, ..., inputs: [input]}}, "
                "session_publish: {moshi: [pcm_f32le, session]}, as system gpu-native has it"
            )
        moved = [key for key in POLICY_KEYS if isinstance(data, dict) and key in data]
        if moved:
            raise ValueError(
                f"{moved[0]}: the duplex baseline's policy is its node's options, not a duplex "
                f"setting: session_nodes: {{duplex: {{{moved[0]}: ...}}}} "
                f"(--session_nodes.duplex.{moved[0]})"
            )
        return data

    @model_validator(mode="after")
    def _unit_is_a_choice(self) -> DuplexSettings:
        if any(ms < 20 for ms in self.unit_ms_choices) or self.unit_ms not in self.unit_ms_choices:
            raise ValueError(
                f"unit_ms {self.unit_ms} must be one of unit_ms_choices "
                f"{list(self.unit_ms_choices)}, each at least 20 ms"
            )
        return self


class SystemConfig(BaseModel):
    """One deployment: which backends run, its model id, limits and session defaults."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = "embedded-cascade"
    model: str = "fdb/embedded-cascade"
    description: str = "Silero VAD + faster-whisper tiny.en + SmolLM2-135M + Piper (offline CPU)"
    backends: Backends = Backends()
    max_sessions: int = Field(4, ge=1, le=256)
    vad: VadDefaults = VadDefaults()
    instructions: str = DEFAULT_INSTRUCTIONS
    max_tokens: int = Field(48, ge=1, le=1024)
    temperature: float | None = Field(0.0, ge=0.0, le=2.0)  # None: left out of chat requests
    max_history_messages: int = Field(12, ge=0, le=200)
    # A pause this long after speech (under the session's silence_duration_ms; with semantic_vad,
    # any pause Smart Turn holds open) starts the turn's transcription and reply at once: they
    # are kept only if the turn ends at that pause, and nothing reaches the client before the
    # turn ends (serving/graph/nodes.py, "prefetch"). null: the work starts when the turn ends.
    # With service nodes each prefetch is a request to the service, and a dropped one (speech
    # resumed) was made for nothing: set null where such requests cost.
    prefetch_ms: int | None = Field(200, ge=32, le=10000)
    # A reply's first speakable chunk ends at a clause boundary once it has clause_words words,
    # else after max_words (serving/conversation/chunker.py): the first audio waits for its
    # words. Fewer words: an earlier first audio, a shorter first phrase.
    first_chunk: FirstChunkWords = FirstChunkWords()
    max_output_lead_ms: int = Field(1000, ge=100, le=60000)
    # A handicap: wait this long before the first audio of every reply (turn-based realtime
    # sessions) and of every /v1/audio/speech answer; 0 = off. A documented way to make a
    # measurably slower candidate, e.g. to check that a regression gate fails:
    # `python -m fdb serve --reply_delay_ms 400`. The wait is interruptible (a barge-in or
    # response.cancel during it cancels the reply as usual) and blocks nothing else.
    reply_delay_ms: int = Field(0, ge=0, le=60000)
    session_update_timeout_s: float = Field(60.0, gt=0)
    idle_timeout_s: float = Field(300.0, gt=0)
    max_input_bytes: int = Field(1_920_000, ge=3200)
    max_output_bytes: int = Field(33_554_432, ge=48000)
    # output events (and their bytes) that may wait for a client that stopped reading
    max_pending_output_chunks: int = Field(1024, ge=1)
    max_pending_output_bytes: int = Field(33_554_432, ge=1024)
    max_instructions_chars: int = Field(65536, ge=1)
    # Threads per model call. One each: with the compute gate (compute_slots) every call then
    # computes on a core of its own, and thread pools never wait on a descheduled thread.
    asr_threads: int = Field(1, ge=1, le=64)
    tts_threads: int | None = Field(1, ge=1, le=64)  # Piper's ONNX Runtime; null: its default
    # SmolLM2: replies of different sessions decode at once on llm_contexts contexts of
    # llm_threads threads each (fdb.models.llm); each context adds its KV cache and maps the GGUF
    # again. The compute gate, not the number of contexts, bounds how many decode at once, so
    # a context per session (max_sessions 4) leaves no reply waiting for one behind another's
    # later tokens, for some more server RSS per context (docs/benchmarks.md#embedded-llm).
    llm_threads: int = Field(1, ge=1, le=64)
    llm_contexts: int = Field(4, ge=1, le=16)
    model_workers: int = Field(8, ge=1, le=64)
    # The compute gate of the embedded models (serving/graph/gate.py): at most this many model
    # calls compute at once, a reply's first chunk first, one slot kept from the rest of the
    # replies. null: one per core; 0: no gate.
    compute_slots: int | None = Field(None, ge=0, le=256)
    warmup: bool = True
    speech_service: SpeechService | None = None  # /v1/audio/speech passes through to it when set
    # the native session protocol's units and policy: set exactly when the graph is native
    duplex: DuplexSettings | None = None
    services: list[ServiceEntry] = []  # started in order before the models load (serving.services)
    # The system's session graph (docs/formats.md, "Session graph"): the nodes and what reaches
    # the client, as in the guide's profile file; null: the bundled embedded cascade
    # (serving/graph/embedded-cascade.yaml). serving/gpu/gpu-cascade.yaml declares the GPU nodes;
    # a native system's graph is one node of a native kind (duplex-baseline, gpu-native below).
    session_nodes: dict[str, Any] | None = None
    session_publish: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _graph(self) -> SystemConfig:
        if (self.session_nodes is None) != (self.session_publish is None):
            raise ValueError(
                "session_nodes and session_publish go together: set both, or neither for "
                "the bundled embedded-cascade graph"
            )
        try:
            graph = self.graph()
        except FdbError as err:
            raise ValueError(err.message) from None
        node = graph.native_node
        if node is None and self.duplex is not None:
            raise ValueError(
                "duplex settings belong to a native system: its graph is one node of a native "
                "kind (session_nodes: {duplex: {kind: duplex_baseline, inputs: [input]}}, "
                "session_publish: {duplex: [pcm_f32le, session]}), as system duplex-baseline has it"
            )
        if node is not None and self.duplex is None:
            raise ValueError(
                f"node '{node.name}' of the native kind '{node.kind}' speaks the native session "
                "protocol: set duplex (its units and policy), as system duplex-baseline has it"
            )
        frame_ms = getattr(node.options, "frame_ms", None) if node is not None else None
        if frame_ms is not None and self.duplex.unit_ms_choices != (frame_ms,):
            raise ValueError(
                f"a native model speaks in {frame_ms} ms frames: set unit_ms {frame_ms} and "
                f"unit_ms_choices [{frame_ms}]"
            )
        return self

    def graph(self) -> GraphDecl:
        """The system's session graph (its session_nodes), else the bundled embedded cascade."""
        if self.session_nodes is None:
            return cascade()
        return load_graph(
            {"session_nodes": self.session_nodes, "session_publish": self.session_publish}
        )

    @model_validator(mode="after")
    def _services_and_nodes(self) -> SystemConfig:
        if len({s.name for s in self.services}) < len(self.services) or len(
            {s.port for s in self.services}
        ) < len(self.services):
            raise ValueError("services must have distinct names and ports")
        llm = self.backends.llm
        if isinstance(
            llm, OpenAiChatNode
        ):  # the node's sampling settings are the sessions' defaults
            # A null temperature is kept: the node then
            # sends none and the service's default applies.
            updates = {"max_tokens": llm.max_tokens, "temperature": llm.temperature}
            updates = {
                k: v
                for k, v in updates.items()
                if (v is not None or k == "temperature") and v != getattr(self, k)
            }
            if updates:
                return self.model_copy(update=updates)
        return self


SYSTEMS: dict[str, SystemConfig] = {
    "embedded-cascade": SystemConfig(),
    "duplex-baseline": SystemConfig(
        name="duplex-baseline",
        model="fdb/duplex-baseline",
        description="Native full-duplex baseline on 1 s units: Silero VAD decides per unit, "
        "faster-whisper tiny.en + SmolLM2-135M + Piper answer (offline CPU)",
        duplex=DuplexSettings(),
        session_nodes={"duplex": {"kind": "duplex_baseline", "inputs": ["input"]}},
        session_publish={"duplex": ["pcm_f32le", "session"]},
    ),
    # serving/gpu: Moshi (moshi-7b configuration, dummy weights) on one CUDA GPU, native sessions
    "gpu-native": SystemConfig(
        name="gpu-native",
        model="fdb/gpu-native",
        description="Moshi (7B configuration) on one CUDA GPU: native full-duplex sessions on 80 "
        "ms units, every live session's frame in one batched step (dummy weights)",
        backends=Backends(asr="none", llm="none", tts="none"),
        max_sessions=32,
        model_workers=8,
        duplex=DuplexSettings(unit_ms=80, unit_ms_choices=(80,)),
        session_nodes={
            "moshi": {
                "kind": "moshi_gpu",
                "weights": {"load_format": "dummy", "preset": "moshi-7b"},
                "inputs": ["input"],
            }
        },
        session_publish={"moshi": ["pcm_f32le", "session"]},
    ),
    # serving/gpu: CSM on one CUDA GPU behind /v1/audio/speech (fdb tts-bench); dummy weights
    # unless a launch file points weights at a checkpoint (docs/gpu.md)
    "gpu-tts": SystemConfig(
        name="gpu-tts",
        model="fdb/gpu-tts",
        description="CSM-1B voice-cloning TTS on one CUDA GPU, /v1/audio/speech only (dummy "
        "weights)",
        backends=Backends(
            asr="none",
            llm="none",
            tts={"kind": "csm_gpu", "weights": {"load_format": "dummy", "preset": "csm-1b"}},
        ),
        max_sessions=1,
        model_workers=64,
    ),  # a pool thread per request streaming at once
}


# Systems declared by a bundled launch file (read when asked for: its graph names optional kinds).
PROFILES: dict[str, Path] = {
    "gpu-cascade": Path(__file__).resolve().parent / "gpu" / "gpu-cascade.yaml",
}


def get_system(name: str) -> SystemConfig:
    """The registered system ``name``; an unknown name lists the known ones."""
    if name in PROFILES and name not in SYSTEMS:
        return load_config_file(PROFILES[name])
    try:
        return SYSTEMS[name]
    except KeyError as exc:
        raise FdbError(
            f"unknown system {name!r}", f"choose one of {sorted([*SYSTEMS, *PROFILES])}"
        ) from exc


def apply_overrides(base: SystemConfig, overrides: dict[str, Any], source: str) -> SystemConfig:
    """``base`` with ``overrides`` merged in (nested tables merge field by field)."""
    merged = base.model_dump()
    for key, value in overrides.items():
        if key == "session_nodes" and isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge_nodes(merged[key], value)
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    try:
        return SystemConfig.model_validate(merged)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "settings"
        message = first["msg"].removeprefix("Value error, ")
        raise FdbError(f"{source}: {where}: {message}", "fix the launch configuration") from exc


def _merge_nodes(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """``session_nodes`` overridden node by node: an entry without a kind, or with the node's
    kind, changes the options it lists (down to one leaf, e.g. weights.overrides.num_hidden_layers);
    one with another kind (or a new node) replaces it."""
    merged = dict(base)
    for name, node in overrides.items():
        old = merged.get(name)
        same = (
            isinstance(node, dict)
            and isinstance(old, dict)
            and node.get("kind", old.get("kind")) == old.get("kind")
        )
        merged[name] = _deep_merge(old, node) if same else node
    return merged


def _deep_merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``update``'s leaves set (mappings merge, lists and values replace)."""
    return {
        **base,
        **{
            k: _deep_merge(base[k], v)
            if isinstance(v, dict) and isinstance(base.get(k), dict)
            else v
            for k, v in update.items()
        },
    }


def load_config_file(
    path: str | Path,
    default_system: str = "embedded-cascade",
    overrides: Sequence[tuple[str, Any]] = (),
) -> SystemConfig:
    """A YAML launch file: ``system:`` picks the base (default ``default_system``), every
    other key overrides a field of :class:`SystemConfig`; then the command line's ``overrides``
    (``serving.overrides``) set single values of it."""

    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except FileNotFoundError as exc:
        raise FdbError(
            f"launch configuration {path} does not exist", "pass an existing --config"
        ) from exc
    except yaml.YAMLError as exc:
        raise FdbError(f"{path} is not valid YAML ({exc})", "fix the launch configuration") from exc
    if not isinstance(raw, dict):
        raise FdbError(f"{path} must hold a mapping of settings", "see serving/systems.py")
    return _from_mapping(dict(raw), default_system, overrides, str(path))


def _from_mapping(
    raw: dict[str, Any], default_system: str, overrides: Sequence[tuple[str, Any]], source: str
) -> SystemConfig:
    if overrides:
        groups = [
            key for key, value in SystemConfig().model_dump().items() if isinstance(value, dict)
        ]
        raw = apply_flags(raw, overrides, [*groups, "vars"])
        source = f"{source} with the command-line overrides"
    raw = substitute_vars(raw, source)  # vars: and ${name} (serving.launch_profiles)
    base = get_system(str(raw.pop("system", default_system)))
    config = apply_overrides(base, raw, source)
    check_services(config.services, source)
    return config


def resolve_system(
    name: str = "embedded-cascade",
    config: str | Path | None = None,
    overrides: Sequence[tuple[str, Any]] = (),
    profile: str | None = None,
) -> SystemConfig:
    """The system to serve: the registered ``name``, the launch file's (which may name it), or
    the shipped launch profile's (``serving/profiles/``, checked as a profile), with the command
    line's ``overrides`` applied."""
    if profile is not None:
        if config is not None:
            raise FdbError("--profile and --config both name a launch file", "pass one of them")
        path = profile_path(profile)
        resolved = load_config_file(path, default_system=name, overrides=overrides)
        check_profile(resolved, f"profile {profile} ({path})")
        return resolved
    if config is not None:
        return load_config_file(config, default_system=name, overrides=overrides)
    if overrides:
        return _from_mapping({}, name, overrides, f"system {name}")
    return get_system(name)
