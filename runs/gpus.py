"""Planning of model servers and shards: which GPU serves which shard on which port.

Pure functions of the options and the environment, so the refusals of the runbook's
Troubleshooting table are testable on a machine without GPUs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import httpx

from fdb.errors import FdbError
from fdb.settings import DEFAULT_SERVER_BASE_PORT, job_gpu


@dataclass(frozen=True)
class ServerPlan:
    gpu: int
    port: int

    @property
    def name(self) -> str:
        return f"model-server-gpu{self.gpu}"


def visible_gpus() -> list[int] | None:
    """The indices CUDA_VISIBLE_DEVICES names (None when it is unset)."""
    raw = os.environ.get("CUDA_VISIBLE_DEVICES")
    if not raw:
        return None
    parts = [p.strip() for p in raw.split(",") if p.strip()]
    if not parts or not all(p.isdigit() for p in parts) or len(set(parts)) != len(parts):
        raise FdbError(
            "CUDA_VISIBLE_DEVICES must list distinct numeric GPU indices",
            "export indices such as 0 or 0,1, not GPU UUIDs",
        )
    return [int(p) for p in parts]


def parse_gpus(option: str | None) -> list[int]:
    """--gpus 0,1 as a list; without it the job GPU alone. Refuses GPUs outside
    CUDA_VISIBLE_DEVICES."""
    visible = visible_gpus()
    job = job_gpu()  # also checks GPU against CUDA_VISIBLE_DEVICES
    if not option:
        return [job]
    parts = [p.strip() for p in option.split(",") if p.strip()]
    if not parts or not all(p.isdigit() for p in parts) or len(set(parts)) != len(parts):
        raise FdbError(
            f"--gpus {option} must list distinct numeric GPU indices", "pass e.g. --gpus 0,1"
        )
    gpus = [int(p) for p in parts]
    outside = [g for g in gpus if visible is not None and g not in visible]
    if outside:
        raise FdbError(
            f"--gpus {option} reaches outside "
            f"CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']} "
            f"(GPU {', '.join(map(str, outside))})",
            "list only GPUs that CUDA_VISIBLE_DEVICES names, or widen it",
        )
    return gpus


def plan_servers(gpus: list[int], num_shards: int) -> list[ServerPlan]:
    """One model server per GPU on port 8097 + 10 x GPU (SERVER_PORT only with one GPU)."""
    if num_shards < 1:
        raise FdbError(f"--num-shards {num_shards} is not allowed", "use 1 or more shards")
    if num_shards < len(gpus):
        raise FdbError(
            f"--num-shards {num_shards} leaves model servers idle ({len(gpus)} GPUs in --gpus)",
            "use at least as many shards as GPUs in --gpus",
        )
    fixed = os.environ.get("SERVER_PORT")
    if fixed and len(gpus) > 1:
        raise FdbError(
            f"SERVER_PORT gives every model server the same port ({fixed})",
            "unset SERVER_PORT when --gpus lists several GPUs; "
            "each server then derives its port from its GPU",
        )
    return [
        ServerPlan(gpu, int(fixed) if fixed else DEFAULT_SERVER_BASE_PORT + 10 * gpu)
        for gpu in gpus
    ]


def shard_server(shard: int, servers: int) -> int:
    """Shard i records against server i mod n."""
    return shard % servers


def check_capacity(num_shards: int, servers: int, max_sessions: int | None) -> None:
    """Refuse more shards per server than the server admits (before recording)."""
    if max_sessions is None:
        return
    busiest = -(-num_shards // servers)
    if busiest > max_sessions:
        raise FdbError(
            f"--num-shards {num_shards} over {servers} GPU(s) exceeds the model server's "
            f"max_sessions {max_sessions} ({busiest} sessions on one server)",
            "lower --num-shards or add GPUs with --gpus",
        )


def max_sessions_of(capabilities: dict) -> int | None:
    """max_sessions from a /v1/realtime/capabilities body (top level or under limits)."""
    for holder in (capabilities, capabilities.get("limits") or {}):
        value = holder.get("max_sessions") if isinstance(holder, dict) else None
        if isinstance(value, int) and value > 0:
            return value
    return None


def read_max_sessions(ws_url: str, timeout_s: float = 5.0) -> int | None:
    """Ask a server's /v1/realtime/capabilities; None when it does not say."""
    http = ws_url.replace("wss://", "https://", 1).replace("ws://", "http://", 1)
    base = http.split("/v1/realtime")[0]
    try:
        reply = httpx.get(f"{base}/v1/realtime/capabilities", timeout=timeout_s)
        return max_sessions_of(reply.json()) if reply.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
