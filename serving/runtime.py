"""Server-wide state: the system, its loaded models (once ready) and session admission."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from serving.hub import ModelHub
from serving.models import load_models
from serving.systems import SystemConfig

log = logging.getLogger("fdb.serving")


class SessionSlot:
    """One admitted session's place in ``max_sessions``. The session releases it the moment
    it ends (before its last event and close frame are sent, so a client that reconnects on
    seeing them finds it free); the endpoint releases it again when the connection is done,
    which then does nothing."""

    def __init__(self, runtime: ServerRuntime) -> None:
        self._runtime: ServerRuntime | None = runtime

    @property
    def held(self) -> bool:
        return self._runtime is not None

    def release(self) -> None:
        if self._runtime is not None:
            self._runtime.sessions -= 1
            self._runtime = None


class ServerRuntime:
    """Readiness and admission for one server. Everything but model loading runs on the
    event loop, so the session counter needs no lock."""

    def __init__(self, system: SystemConfig, hub: ModelHub | None = None) -> None:
        self.system = system
        self.hub = hub
        self.failure: BaseException | None = None
        self.sessions = 0

    @property
    def ready(self) -> bool:
        return self.hub is not None

    @property
    def status(self) -> str:
        if self.hub is not None:
            return "healthy"
        return "failed" if self.failure is not None else "starting"

    def admit(self) -> SessionSlot | None:
        """Take a session slot; None when ``max_sessions`` sessions are open."""
        if self.sessions >= self.system.max_sessions:
            return None
        self.sessions += 1
        return SessionSlot(self)

    def load_in_background(self, done: Callable[[BaseException | None], None]) -> threading.Thread:
        """Load the models in a daemon thread; ``done(error)`` is called from that thread."""

        def work() -> None:
            try:
                self.hub = load_models(self.system)
            except BaseException as exc:  # reported through /health and done()
                self.failure = exc
                done(exc)
                return
            done(None)

        thread = threading.Thread(target=work, name="fdb-model-load", daemon=True)
        thread.start()
        return thread

    def close(self) -> None:
        if self.hub is not None:
            self.hub.close()
