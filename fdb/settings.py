"""Machine settings from environment variables, mirroring the runbook's names."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from fdb.errors import FdbError

DEFAULT_SERVER_BASE_PORT = 8097
DEFAULT_JUDGE_BASE_PORT = 30000
MAX_SESSION_TIMEOUT_S = 230.0


def _float_env(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError as exc:
        raise FdbError(f"{name}={raw!r} is not a number", f"export {name} as seconds") from exc
    if value <= 0 or value > MAX_SESSION_TIMEOUT_S:
        raise FdbError(
            f"{name}={raw} is outside (0, {MAX_SESSION_TIMEOUT_S:g}] s",
            f"neither session deadline may exceed the recorder's {MAX_SESSION_TIMEOUT_S:g} s",
        )
    return value


def _port_env(name: str, default: int) -> int:
    raw = (os.environ.get(name) or "").strip()
    if not raw:
        return default
    if not raw.isdigit() or not 1 <= int(raw) <= 65535:
        raise FdbError(
            f"{name}={raw!r} is not a TCP port",
            f"export {name} as a number from 1 to 65535, or unset it",
        )
    return int(raw)


def job_gpu() -> int:
    """The job GPU: first index of CUDA_VISIBLE_DEVICES, else GPU, else 0."""
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    gpu = os.environ.get("GPU")
    if cvd:
        parts = [p.strip() for p in cvd.split(",") if p.strip()]
        if not parts or not all(p.isdigit() for p in parts) or len(set(parts)) != len(parts):
            raise FdbError(
                "CUDA_VISIBLE_DEVICES must list distinct numeric GPU indices",
                "export indices such as 0 or 0,1, not GPU UUIDs",
            )
        first = int(parts[0])
        if gpu not in (None, "") and int(gpu) != first:
            raise FdbError(
                "GPU and CUDA_VISIBLE_DEVICES disagree", "unset GPU, or set it to the first index"
            )
        return first
    if gpu not in (None, ""):
        if not gpu.isdigit():
            raise FdbError(f"GPU={gpu!r} is not a GPU index", "export GPU as a number such as 0")
        return int(gpu)
    return 0


@dataclass(frozen=True)
class Settings:
    work: Path
    judge: str
    gpu: int
    server_port: int
    judge_port: int
    session_timeout_s: float
    v10_session_timeout_s: float
    model_path: Path | None = (
        None  # MODEL_PATH: checkpoint of the model under test (a server you host)
    )
    model_revision: str | None = None  # MODEL_REVISION: recorded in the run manifest
    judge_model_path: Path | None = None  # JUDGE_MODEL_PATH: checkpoint of the Qwen judge you serve
    scoring_venv: Path | None = None  # SCORING_VENV: fdb scores in its own venv unless set

    def recorded(self) -> dict[str, str]:
        """The machine settings a run manifest records (only those set)."""
        pairs = (
            ("MODEL_PATH", self.model_path),
            ("MODEL_REVISION", self.model_revision),
            ("JUDGE_MODEL_PATH", self.judge_model_path),
        )
        return {name: str(value) for name, value in pairs if value}

    @property
    def judge_config(self) -> Path:
        return self.work / "judge" / f"port-{self.judge_port}" / "judge-config.json"

    @property
    def runs_dir(self) -> Path:
        return self.work / "runs"

    @property
    def dataset_dir(self) -> Path:
        return self.work / "dataset"

    @property
    def reference_checkout(self) -> Path:
        """$FDB_WORK/Full-Duplex-Bench: where the user's Full-Duplex-Bench checkout is looked
        for."""
        return self.work / "Full-Duplex-Bench"


def work_dir() -> Path:
    """$FDB_WORK (default ~/fdb), without checking any other setting (error paths use it)."""
    return Path(os.environ.get("FDB_WORK") or Path.home() / "fdb").expanduser()


def debug_log_path() -> Path:
    """Where `python -m fdb` appends the traceback of a failed command:
    $FDB_WORK/logs/fdb-debug.log."""
    return work_dir() / "logs" / "fdb-debug.log"


def load_settings() -> Settings:
    work = work_dir()
    gpu = job_gpu()
    server_port = _port_env("SERVER_PORT", DEFAULT_SERVER_BASE_PORT + 10 * gpu)
    judge_port = _port_env("JUDGE_PORT", DEFAULT_JUDGE_BASE_PORT + 10 * gpu)
    judge = os.environ.get("JUDGE") or "qwen"
    if judge not in ("qwen", "gpt"):
        raise FdbError(f"JUDGE={judge!r} is not a known judge", "export JUDGE=qwen or JUDGE=gpt")
    return Settings(
        work=work,
        judge=judge,
        gpu=gpu,
        server_port=server_port,
        judge_port=judge_port,
        session_timeout_s=_float_env("SESSION_TIMEOUT_S", 90.0),
        v10_session_timeout_s=_float_env("V10_SESSION_TIMEOUT_S", 230.0),
        model_path=_path_env("MODEL_PATH"),
        model_revision=os.environ.get("MODEL_REVISION") or None,
        judge_model_path=_path_env("JUDGE_MODEL_PATH"),
        scoring_venv=_path_env("SCORING_VENV"),
    )


def _path_env(name: str) -> Path | None:
    raw = os.environ.get(name)
    return Path(raw).expanduser() if raw else None
