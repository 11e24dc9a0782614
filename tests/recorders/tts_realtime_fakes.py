"""A scripted /v1/realtime TTS peer (a real WebSocket server on a free loopback port): after
response.create it sends audio deltas at known times, response.done, and optionally audio after
it; it can leave the output rate undeclared."""

from __future__ import annotations

import asyncio
import base64
import json
import time

from websockets.asyncio.server import ServerConnection

from tests.recorders.recorder_fakes import LoopbackPeer


class RealtimeTtsPeer(LoopbackPeer):
    def __init__(
        self,
        rate: int | None = 24000,
        deltas=((0.10, 4800), (0.20, 4800)),
        done_at: float = 0.25,
        late=((0.30, 3840),),
    ):
        self.rate, self.deltas, self.done_at, self.late = rate, list(deltas), done_at, list(late)
        self.received: list[dict] = []

    def _process_request(self, connection, request):
        return None

    async def _handler(self, ws: ServerConnection) -> None:
        await ws.send(json.dumps({"type": "session.created", "session": {}}))
        async for message in ws:
            event = json.loads(message)
            self.received.append(event)
            if event["type"] == "session.update":
                audio = {"input": {"format": {"type": "audio/pcm", "rate": 24000}}}
                if self.rate:
                    audio["output"] = {"format": {"type": "audio/pcm", "rate": self.rate}}
                await ws.send(json.dumps({"type": "session.updated", "session": {"audio": audio}}))
            elif event["type"] == "response.create":
                await self._respond(ws)

    async def _respond(self, ws: ServerConnection) -> None:
        start = time.perf_counter()
        script = (
            [(t, n) for t, n in self.deltas]
            + [(self.done_at, None)]
            + [(t, n) for t, n in self.late]
        )
        for t, size in sorted(script, key=lambda pair: pair[0]):
            await asyncio.sleep(max(0.0, start + t - time.perf_counter()))
            if size is None:
                await ws.send(
                    json.dumps({"type": "response.done", "response": {"status": "completed"}})
                )
            else:
                delta = base64.b64encode(b"\x10\x00" * (size // 2)).decode()
                await ws.send(json.dumps({"type": "response.output_audio.delta", "delta": delta}))
