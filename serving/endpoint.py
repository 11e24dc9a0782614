"""``WS /v1/realtime``: admission, then one :class:`RealtimeSession` per connection, of the
session protocol the system's graph speaks (``GraphDecl.protocol``): the native session
(``serving.duplex``, which runs the graph's one native node) or the turn-based one on the session
graph (``serving.realtime.graph_session``).

The upgrade is refused with HTTP 503 while the models are still loading ("instance is not
ready") and when ``max_sessions`` sessions are already open; a client may retry. A session's
slot is free again the moment the session ends: before its last event (``session.closed``, a
fatal error) and close frame are sent, and as soon as the server reads the client's close frame
or sees the connection drop, so a client that reconnects at once is never refused for it.
"""

from __future__ import annotations

import logging

from fastapi import WebSocket
from fastapi.responses import JSONResponse

from serving.duplex.session import NativeSession
from serving.realtime.graph_session import GraphRealtimeSession
from serving.realtime.session import RealtimeSession
from serving.runtime import ServerRuntime

log = logging.getLogger("fdb.serving")


async def deny(websocket: WebSocket, status: int, code: str, message: str) -> None:
    """Refuse the upgrade with an HTTP response (or close 1013 where the server cannot)."""
    body = {"error": {"type": "server_error", "code": code, "message": message}}
    try:
        await websocket.send_denial_response(JSONResponse(body, status_code=status))
    except RuntimeError:  # no websocket.http.response extension
        await websocket.close(code=1013, reason=code)


# The session of each protocol a graph may speak (serving.graph.registry.PROTOCOLS).
SESSIONS: dict[str, type[RealtimeSession]] = {
    "native": NativeSession,
    "turn-based": GraphRealtimeSession,
}


async def realtime_endpoint(websocket: WebSocket) -> None:
    runtime: ServerRuntime = websocket.app.state.runtime
    if runtime.hub is None:
        await deny(websocket, 503, "not_ready", "instance is not ready")
        return
    if runtime.hub.speech_only:
        await deny(
            websocket,
            503,
            "realtime_unavailable",
            f"system {runtime.system.name} has no ASR or no LLM (backend none): it serves "
            "/v1/audio/speech only",
        )
        return
    slot = runtime.admit()
    if slot is None:
        await deny(
            websocket,
            503,
            "admission_rejected",
            f"all {runtime.system.max_sessions} sessions are in use (max_sessions); retry later",
        )
        return
    try:
        await websocket.accept()
        session = SESSIONS[runtime.hub.graph.protocol](websocket, runtime.hub)
        session.on_end = slot.release
        log.info(
            "session %s opened (%d/%d)", session.id, runtime.sessions, runtime.system.max_sessions
        )
        await session.run()
        log.info("session %s closed", session.id)
    finally:
        slot.release()  # already released when the session ended; this covers a failed start
