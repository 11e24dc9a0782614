"""The one holder of a server's models, :class:`ModelHub`: shared by every session, by its
graph nodes (``serving.graph``) and by the duplex engine (``serving.duplex``).

The ASR, LLM and TTS backends are shared (each holds an internal lock); the VAD keeps per-stream
state, so every session gets its own :class:`fdb.models.vad.StreamingVad`. All model calls run
in the hub's thread pools (a reply's LLM token stream outside them: see
``serving.graph.nodes.stream_in_thread`` and, for the duplex engine,
:mod:`serving.duplex.reply_stream`) so that no session's event loop ever waits on a model.
A server's hub is loaded by ``serving.models.load_models``.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import Executor
from functools import cached_property
from typing import Any, TypeVar

from fdb.models import BackendIdentity
from fdb.models.asr import load_asr
from fdb.models.llm import SmolLm2
from fdb.models.tts import PiperTts
from fdb.models.turn import load_turn_backend
from fdb.models.vad import StreamingVad
from serving import batching
from serving.graph.declare import GraphDecl, cascade
from serving.graph.gate import REST, ComputeGate
from serving.graph.kinds import PiperSpeechOptions
from serving.systems import SystemConfig

T = TypeVar("T")
DEFAULT_VOICE = (False, None)  # PiperTts()'s (deterministic, length_scale)
LOAD: Any = object()  # a role's model not given: loaded on first use


class ModelHub:
    """The one holder of a server's models, shared by every session: the ASR, LLM, TTS,
    end-of-turn and native backends, the pools their calls run in and the compute gate.

    ``serving.models.load_models`` loads every backend of a system before its first session (a
    role given as None has no model: backend ``none``). A role not given (``ModelHub()``, as the
    tests' graphs have it) loads its embedded model on first use (faster-whisper tiny.en,
    SmolLM2, Piper, Smart Turn) and, without pools, its calls run in asyncio's default pool. With a
    compute gate (``serving.graph.gate``) the calls of the models that compute on this host
    (``local_compute``) take its slots by priority.
    """

    def __init__(
        self,
        system: SystemConfig | None = None,
        *,
        asr: Any = LOAD,
        llm: Any = LOAD,
        tts: Any = LOAD,
        turn: Any = LOAD,
        native: Any = None,
        vad_identity: BackendIdentity | None = None,
        executor: Executor | None = None,
        vad_executor: Executor | None = None,
        gate: ComputeGate | None = None,
    ) -> None:
        self.system = system
        for role, model in (("asr", asr), ("llm", llm), ("tts", tts), ("turn", turn)):
            if model is not LOAD:
                self.__dict__[role] = model  # the cached_property never loads it
        # the model the sessions of a native graph's node share (serving.gpu.nodes.MoshiNative)
        self.native = native
        self.vad_identity = vad_identity
        self.executor = executor  # where model calls run (None: asyncio's default pool)
        self.vad_executor = vad_executor  # where VAD and end-of-turn calls run
        self.gate = gate  # None: every call computes at once

    @cached_property
    def asr(self) -> Any:
        return load_asr("faster-whisper")

    @cached_property
    def llm(self) -> Any:
        return SmolLm2()

    @cached_property
    def tts(self) -> Any:
        """The default voice (Piper's, unless the system names another speech backend)."""
        return PiperTts()

    @cached_property
    def turn(self) -> Any:
        """The end-of-turn model (semantic_vad): FdbError where Smart Turn is not installed."""
        return load_turn_backend()

    @cached_property
    def graph(self) -> GraphDecl:
        """The system's session graph (its session_nodes), else the bundled embedded cascade."""
        return cascade() if self.system is None else self.system.graph()

    def loaded(self, role: str) -> Any:
        """``role``'s model if it is loaded (or given), else None; never loads it."""
        return self.__dict__.get(role)

    def voice(self, options: PiperSpeechOptions) -> Any:
        """The Piper voice of a speech node's options (the default one is :attr:`tts`)."""
        key = (options.deterministic, options.length_scale)
        voices = self.__dict__.setdefault("_voices", {})
        if key not in voices:
            voices[key] = (
                self.tts
                if key == DEFAULT_VOICE
                else PiperTts(
                    deterministic=options.deterministic, length_scale=options.length_scale
                )
            )
        return voices[key]

    def new_vad(self, **settings: Any) -> StreamingVad:
        """A fresh per-session streaming VAD (blocking: call it through :meth:`run_vad`)."""
        return StreamingVad(**settings)

    def gated(self, backend: Any) -> ComputeGate | None:
        """The gate for ``backend``'s calls: None for a service on another host."""
        return self.gate if getattr(backend, "local_compute", False) else None

    async def run(
        self,
        fn: Callable[..., T],
        *args: Any,
        backend: Any = None,
        priority: int = REST,
        resource: str | None = None,
    ) -> T:
        """A blocking ASR / LLM / TTS call (or a model load) in the model pool; a call of a local
        ``backend`` through the gate at ``priority`` (``resource``: one call at a time)."""
        gate = self.gated(backend)
        call = (
            functools.partial(gate.call, priority, fn, *args, resource=resource)
            if gate
            else functools.partial(fn, *args)
        )
        return await asyncio.get_running_loop().run_in_executor(self.executor, call)

    async def run_vad(self, fn: Callable[..., T], *args: Any) -> T:
        """A VAD or end-of-turn call in its own pool, so turn detection never waits behind a
        reply."""
        return await asyncio.get_running_loop().run_in_executor(self.vad_executor, fn, *args)

    @property
    def speech_only(self) -> bool:
        """No ASR or no LLM (backend ``none``) and no session graph of its own that brings them:
        /v1/audio/speech only, no realtime sessions."""
        return (
            (self.asr is None or self.llm is None)
            and self.system.session_nodes is None
            and self.native is None
        )

    def identities(self) -> dict[str, dict[str, Any]]:
        """role -> identity (JSON) of every model loaded, the session graphs' GPU engines last
        (they replace asr and llm)."""
        models = {role: self.loaded(role) for role in ("asr", "llm", "tts", "turn")}
        models["native"] = self.native
        vad = (
            {} if self.vad_identity is None else {"vad": self.vad_identity.model_dump(mode="json")}
        )
        return {
            **vad,
            **{
                role: model.identity.model_dump(mode="json")
                for role, model in models.items()
                if model is not None
            },
            **batching.identities(self),
        }

    def close(self) -> None:
        batching.close_shared(self)  # a GPU decode loop's thread would keep the process alive
        for model in (self.loaded("tts"), self.native):  # the GPU engines' threads (serving.gpu)
            if model is not None and hasattr(model, "close"):
                model.close()
        for pool in (self.executor, self.vad_executor):
            if pool is not None:
                pool.shutdown(wait=False, cancel_futures=True)
