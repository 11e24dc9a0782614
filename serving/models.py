"""Loading a system's backends once per server into its :class:`~serving.hub.ModelHub`: the
dependency check before anything loads, the service nodes' probes, the GPU nodes, the embedded
models, the compute gate, the warm-up and the session graph's shared models.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np
from threadpoolctl import threadpool_limits

from fdb.audio import resample
from fdb.errors import FdbError, MissingExtraError
from fdb.models import turn as turn_models
from fdb.models.asr import FasterWhisperAsr
from fdb.models.llm import SmolLm2
from fdb.models.packages import PIPECAT, BackendPackage
from fdb.models.tts import PiperTts
from fdb.models.turn import SmartTurn
from fdb.models.vad import SileroVad
from serving.graph import registry
from serving.graph.declare import NodeDecl
from serving.graph.gate import ComputeGate
from serving.graph.nodes import preload
from serving.hub import LOAD, ModelHub
from serving.service_nodes import probe
from serving.systems import SystemConfig

log = logging.getLogger("fdb.serving")
T = TypeVar("T")

ROLE_NAMES = {"vad": "the VAD", "asr": "the ASR", "llm": "the reply LLM", "tts": "the TTS"}
NO_MODEL = ("asr", "llm", "tts")  # roles a system may leave without a model: backend none


def embedded_backends(role: str) -> dict[str, tuple[BackendPackage, ...]]:
    """The embedded backends a launch file's ``backends.<role>`` may name, each with the packages
    it needs (the registry's entries with a ``key``); ``none``: no model for the role (a
    speech-only system: /v1/audio/speech, realtime refused)."""
    found = {
        b.key: b.packages
        for b in registry.BACKENDS
        if b.key is not None and b.role == registry.SYSTEM_ROLES.get(role, role)
    }
    return {**found, "none": ()} if role in NO_MODEL else found


def check_dependencies(system: SystemConfig) -> None:
    """Raise :class:`MissingExtraError` for the first backend package that is not installed
    (without importing anything heavy), or FdbError for an unknown backend key."""
    for role, key in system.backends:
        if not isinstance(key, str):  # a service node: httpx only, a core dependency
            continue
        options = embedded_backends(role)
        if key not in options:
            raise FdbError(
                f"unknown {role} backend {key!r} in system {system.name!r}",
                f"choose one of {sorted(options)}",
            )
        for package in options[key]:
            if importlib.util.find_spec(package.module) is None:
                raise MissingExtraError(
                    package.requirement, package.extra, f"{ROLE_NAMES[role]} of {system.name}"
                )
    native = system.graph().native_node
    if native is not None and getattr(native.options, "turn_detection", None) == "semantic":
        if not turn_models.smart_turn_installed():
            raise MissingExtraError(
                PIPECAT.requirement,
                PIPECAT.extra,
                f"Smart Turn, the semantic turn detection of {system.name}",
            )


def limit_blas_threads() -> None:
    """Pin numpy's BLAS pool (OpenBLAS) to one thread in this process. Whisper's log-mel
    features are a BLAS product: with a pool of one thread per core, its second thread spun a
    second core through every transcription for no gain in wall time (measured:
    docs/benchmarks.md#embedded-asr), taking that core from the sessions'
    other model calls. Every model call already runs on the threads it is given
    (asr_threads, tts_threads, llm_threads)."""
    threadpool_limits(limits=1, user_api="blas")


def compute_gate(system: SystemConfig) -> ComputeGate | None:
    """The gate of ``system.compute_slots`` (null: one slot per core; 0: none); with more than
    one slot, one is kept for first chunks and transcriptions (``ComputeGate.reserved``)."""
    slots = system.compute_slots if system.compute_slots is not None else (os.cpu_count() or 1)
    return ComputeGate(slots, reserved=1 if slots > 1 else 0) if slots else None


def _timed(label: str, fn: Callable[[], T]) -> T:
    start = time.monotonic()
    value = fn()
    log.info("loaded %s in %.1f s", label, time.monotonic() - start)
    return value


def load_models(system: SystemConfig) -> ModelHub:
    """Load (and warm up) every backend of ``system``; blocking, takes a few seconds on CPU."""
    check_dependencies(system)
    nodes = probe_nodes(system)  # a service that does not answer fails the start before any load
    nodes.update(load_gpu_nodes(system))
    graph = system.graph()
    native = load_native(graph.native_node)
    limit_blas_threads()
    vad = _timed("silero-vad", SileroVad)  # imports torch, pins it to one thread
    asr, llm = nodes.get("asr"), nodes.get("llm")
    if asr is None and system.backends.asr != "none":
        asr = _timed(
            "faster-whisper tiny.en", lambda: FasterWhisperAsr(cpu_threads=system.asr_threads)
        )
    if llm is None and system.backends.llm != "none":
        llm = _timed(
            "SmolLM2", lambda: SmolLm2(n_threads=system.llm_threads, instances=system.llm_contexts)
        )
    tts = nodes.get("tts")
    if tts is None and system.backends.tts != "none":
        tts = _timed("Piper", lambda: PiperTts(threads=system.tts_threads))
    # without Smart Turn the hub's turn stays unloaded: asking for it raises FdbError
    turn = _timed("Smart Turn v3.2", SmartTurn) if turn_models.smart_turn_installed() else LOAD
    hub = ModelHub(
        system,
        asr=asr,
        llm=llm,
        tts=tts,
        turn=turn,
        native=native,
        vad_identity=vad.identity,
        executor=ThreadPoolExecutor(system.model_workers, thread_name_prefix="fdb-model"),
        vad_executor=ThreadPoolExecutor(min(system.max_sessions, 8), thread_name_prefix="fdb-vad"),
        gate=compute_gate(system),
    )
    if system.warmup:
        _timed("warm-up", lambda: warm_up(hub))
    if system.session_nodes is not None and graph.protocol == "turn-based":
        _timed("the graph's shared models", lambda: preload(hub))  # its GPU kinds' models
    return hub


def load_native(node: NodeDecl | None) -> Any:
    """The model the sessions of a native graph's ``node`` share (a GPU model: serving.gpu),
    loaded; None for a turn-based graph or a native kind without one (duplex_baseline). The
    kind's node (its unit loop) is imported here too, so a broken one fails the start, not a
    session."""
    if node is None:
        return None
    registry.node_class(node.kind, ())
    if registry.KINDS[node.kind].client is None:
        return None
    return _timed(
        f"native model {node.kind}", lambda: registry.load_native(node.kind, node.options)
    )


def load_gpu_nodes(system: SystemConfig) -> dict[str, Any]:
    """The backends of the system's GPU model nodes (serving.gpu), loaded."""
    return {
        role: _timed(
            f"{role} GPU node {node.kind}",
            lambda role=role, node=node: registry.build_backend(role, node),
        )
        for role, node in system.backends.gpu_nodes().items()
    }


def probe_nodes(system: SystemConfig) -> dict[str, Any]:
    """The clients of the system's service nodes, each probed once (raises FdbError naming the
    node and URL of the first that fails, see :func:`serving.service_nodes.probe`)."""
    clients = {}
    for role, node in system.backends.nodes().items():
        clients[role] = registry.build_backend(role, node)
        start = time.monotonic()
        probe(role, node, clients[role])
        log.info(
            "%s node %s answered at %s in %.1f s",
            role,
            node.kind,
            node.base_url,
            time.monotonic() - start,
        )
    return clients


def warm_up(hub: ModelHub) -> None:
    """One small call per embedded backend, so the first real turn does not pay the first-call
    costs (a service node's probe was its warm-up)."""
    if hub.tts is not None and not getattr(hub.tts, "remote", False):
        spoken = hub.tts.synthesize("Hello there.")
        if hub.asr is not None and not getattr(hub.asr, "remote", False):
            samples = resample(spoken, hub.tts.rate, 16000)
            hub.asr.transcribe(samples)
            if hasattr(hub.asr, "transcribe_utterance"):
                hub.asr.transcribe_utterance(samples)
    if hub.llm is not None and not getattr(hub.llm, "remote", False):
        hub.llm.reply([{"role": "user", "content": "Hi"}], max_tokens=4)
    hub.new_vad(threshold=0.5, silence_duration_ms=500, prefix_padding_ms=300).feed(
        np.zeros(1024, dtype=np.float32)
    )
    if hub.loaded("turn") is not None:
        hub.turn.complete_probability(np.zeros(1600, dtype=np.float32))
