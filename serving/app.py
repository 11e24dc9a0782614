"""The FastAPI app of one deployment.

Routes: ``GET /health`` (200 ``healthy`` once the models are loaded, 503 ``starting`` before,
503 ``failed`` when loading failed), ``GET /v1/models`` (one model, the deployment's id),
``GET /v1/realtime/capabilities`` (503 "instance is not ready" until loaded) and
``WS /v1/realtime`` (the turn-based session protocol, see ``serving.realtime``).

Models load in a background thread when the app starts, so the server answers /health while
it loads; pass ``hub`` to serve already-loaded models.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.responses import JSONResponse

from fdb.errors import FdbError
from serving.duplex.negotiation import native_capabilities
from serving.endpoint import realtime_endpoint
from serving.hub import ModelHub
from serving.realtime.negotiation import capabilities
from serving.runtime import ServerRuntime
from serving.speech import router as speech_router
from serving.systems import SystemConfig

log = logging.getLogger("fdb.serving")


def _describe(exc: BaseException) -> str:
    return exc.one_line() if isinstance(exc, FdbError) else f"{type(exc).__name__}: {exc}"


def _lifespan(
    runtime: ServerRuntime,
    on_ready: Callable[[], None] | None,
    on_failure: Callable[[BaseException], None] | None,
):
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        loop = asyncio.get_running_loop()

        def loaded(error: BaseException | None) -> None:
            if error is not None:
                log.error("loading system %s failed: %s", runtime.system.name, _describe(error))
                if on_failure is not None:
                    loop.call_soon_threadsafe(on_failure, error)
            elif on_ready is not None:
                loop.call_soon_threadsafe(on_ready)

        if runtime.hub is None:
            runtime.load_in_background(loaded)
        elif on_ready is not None:
            on_ready()
        try:
            yield
        finally:
            runtime.close()

    return lifespan


def create_app(
    system: SystemConfig,
    *,
    hub: ModelHub | None = None,
    on_ready: Callable[[], None] | None = None,
    on_failure: Callable[[BaseException], None] | None = None,
) -> FastAPI:
    """The app serving ``system``. ``on_ready`` / ``on_failure`` run on the event loop once
    loading finished (the launcher logs the ready line and stops on failure)."""
    runtime = ServerRuntime(system, hub)
    app = FastAPI(
        title=f"fdb serving: {system.name}", lifespan=_lifespan(runtime, on_ready, on_failure)
    )
    app.state.runtime = runtime
    created = int(time.time())

    @app.get("/health")
    async def health() -> JSONResponse:
        body: dict[str, object] = {
            "status": runtime.status,
            "system": system.name,
            "model": system.model,
            "sessions": runtime.sessions,
            "max_sessions": system.max_sessions,
        }
        if runtime.hub is not None:
            body["backends"] = runtime.hub.identities()
        if runtime.failure is not None:
            body["error"] = _describe(runtime.failure)
        return JSONResponse(body, status_code=200 if runtime.ready else 503)

    @app.get("/v1/models")
    async def models() -> dict[str, object]:
        return {
            "object": "list",
            "data": [
                {"id": system.model, "object": "model", "created": created, "owned_by": "fdb"}
            ],
        }

    @app.get("/v1/realtime/capabilities")
    async def realtime_capabilities() -> JSONResponse:
        if not runtime.ready:
            return JSONResponse(
                {
                    "error": {
                        "type": "server_error",
                        "code": "not_ready",
                        "message": "instance is not ready",
                    }
                },
                status_code=503,
            )
        native = runtime.hub.graph.protocol == "native"
        return JSONResponse(native_capabilities(system) if native else capabilities(system))

    app.add_api_websocket_route("/v1/realtime", realtime_endpoint)
    app.include_router(speech_router)  # POST /v1/audio/speech (serving/speech.py)
    return app
