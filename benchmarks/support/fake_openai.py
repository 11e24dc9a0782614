"""A small OpenAI-compatible judge server for the tests (FastAPI + uvicorn in a thread, on a free
loopback port). Replies are scripted from markers in the request's user message:

- behavior (system prompt holds "behaviour"): ``#label=C_X`` picks the label (C_RESPOND by
  default); ``#malformed`` never gives a label object, ``#malformed-once`` only for seed 1;
  ``#badlabel`` an unknown label; ``#wrongmodel`` another model name; ``#timeout`` sleeps past
  the client's timeout; ``#500`` an HTTP 500; ``#length`` finish_reason length.
- relevance: ``#unparsable`` a reply without the official two lines; ``#rating=N`` the rating
  (4 by default); ``#wrongmodel``, ``#500``, ``#timeout`` as above.
- semantic: a control pair (recognised by its user_clean text) gets its expected statuses, with
  real quotes; ``control_mismatch = True`` flips one control axis. A pair marked ``#badquote``
  gets a quote that is not in its transcripts; other pairs are accepted on every axis.

Every request is recorded (body, whether the Authorization header carried the expected key).
A wrong key gets a 401 whose message echoes the key it received, as OpenAI's does.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from judges.semantic.gate import load_controls
from judges.semantic.rubric import SEMANTIC_PROMPT


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class FakeJudge:
    model: str = "judge-model"
    delay_s: float = 0.0
    api_key: str | None = None
    control_mismatch: bool = False
    timeout_sleep_s: float = 3.0
    requests: list[dict[str, Any]] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0

    def __post_init__(self) -> None:
        self.port = free_port()
        self._controls = self._control_answers()
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def reset(self, **changes: Any) -> None:
        self.requests.clear()
        self.max_in_flight = 0
        for name, value in {
            "model": "judge-model",
            "delay_s": 0.0,
            "control_mismatch": False,
            **changes,
        }.items():
            setattr(self, name, value)

    # ----------------------------------------------------------------- server
    def app(self) -> FastAPI:
        app = FastAPI()

        @app.get("/v1/models")
        async def models() -> dict:
            return {"object": "list", "data": [{"id": self.model, "object": "model"}]}

        @app.post("/v1/chat/completions")
        async def complete(request: Request) -> JSONResponse:
            body = await request.json()
            auth = request.headers.get("authorization", "")
            self.requests.append({"body": body, "auth_ok": auth == f"Bearer {self.api_key}"})
            if self.api_key is not None and auth != f"Bearer {self.api_key}":
                return JSONResponse(
                    {"error": {"message": f"Incorrect API key provided: {auth[7:]}"}}, 401
                )
            if (
                "#timeout" in body["messages"][1]["content"]
            ):  # outlives the client; not counted in flight
                await asyncio.sleep(self.timeout_sleep_s)
                return await self._answer(body)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            try:
                if self.delay_s:
                    await asyncio.sleep(self.delay_s)
                return await self._answer(body)
            finally:
                self.in_flight -= 1

        return app

    def __enter__(self) -> FakeJudge:
        config = uvicorn.Config(
            self.app(),
            host="127.0.0.1",
            port=self.port,
            log_level="error",
            timeout_graceful_shutdown=1,
            lifespan="off",
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("fake judge did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None and self._thread is not None
        self._server.should_exit = True
        self._thread.join(timeout=10)

    # ----------------------------------------------------------------- replies
    def _completion(
        self, content: str, model: str | None = None, finish: str = "stop"
    ) -> JSONResponse:
        return JSONResponse(
            {
                "id": "chatcmpl-fake",
                "object": "chat.completion",
                "created": 0,
                "model": model or self.model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": content},
                        "finish_reason": finish,
                    }
                ],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }
        )

    async def _answer(self, body: dict[str, Any]) -> JSONResponse:
        system, user = body["messages"][0]["content"], body["messages"][1]["content"]
        if "#500" in user:
            return JSONResponse({"error": {"message": "internal error"}}, 500)
        model = "some-other-model" if "#wrongmodel" in user else None
        if system == SEMANTIC_PROMPT:
            return self._completion(self._semantic(json.loads(user)), model)
        if "behaviour" in system:
            content, finish = self._behavior(user, body.get("seed"))
            return self._completion(content, model, finish)
        return self._completion(self._relevance(user), model)

    def _behavior(self, user: str, seed: int | None) -> tuple[str, str]:
        if (
            "#malformed-once" in user
            and seed == 1
            or "#malformed" in user
            and "#malformed-once" not in user
        ):
            return "I think the model responded to the overlap.", "stop"
        if "#badlabel" in user:
            return '{ "behaviour": ["C_MAYBE"] }', "stop"
        label = re.search(r"#label=(C_[A-Z_]+)", user)
        content = "Reasoning first. " + json.dumps(
            {"behaviour": [label.group(1) if label else "C_RESPOND"]}
        )
        return content, "length" if "#length" in user else "stop"

    @staticmethod
    def _relevance(user: str) -> str:
        if "#unparsable" in user:
            return "Analysis: **fine**. I would rate the AI's response as 4"
        rating = re.search(r"#rating=(\d+)", user)
        return (
            "Analysis: it answers the interruption.\n"
            f"I would rate the AI's response as {rating.group(1) if rating else 4}"
        )

    def _control_answers(self) -> dict[str, dict[str, str]]:
        pairs, expected = load_controls()
        return {
            p.transcripts["clean_input"].text: expected[p.sample_id.split("/")[1]] for p in pairs
        }

    def _semantic(self, shown: dict[str, Any]) -> str:
        statuses = self._controls.get(shown["user_clean"])
        if (
            statuses is not None
            and self.control_mismatch
            and shown["category"] == "background_speech"
        ):
            statuses = {**statuses, "grounding": "accept"}
        statuses = statuses or dict.fromkeys(
            ("interaction_handling", "relevance", "grounding"), "accept"
        )
        words = (shown["reply_with_overlap"] or shown["user_with_overlap"]).split()
        quote = " ".join(words[:3])
        if "#badquote" in shown["reply_with_overlap"]:
            quote = "words that nobody said"
        verdict = {
            axis: {"status": s, "quote": quote, "reason": "scripted"}
            for axis, s in statuses.items()
        }
        return "<think>scripted</think>" + json.dumps(verdict)
