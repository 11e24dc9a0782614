"""Judge identity: the judge config file, the settings a judging phase runs with, and where they
come from (options, then the runbook's environment variables).

Two kinds of judge:

- ``custom``: a self-hosted OpenAI-compatible endpoint (SGLang, vLLM, ...) pinned by a judge config
  file (spec "Scoring CLI reference": model and tokenizer ids with full 40-hex revisions, served
  model name, precision, thinking flag, decoding, seeds, the server's launch receipt and its
  sha256). Its key comes from ``CUSTOM_JUDGE_API_KEY`` (``EMPTY`` when unset).
- ``openai``: a model named by ``--judge-model`` (the paper's ``gpt-4o-2024-08-06`` by default)
  on OpenAI or any compatible ``--base-url``; its key comes from ``OPENAI_API_KEY`` only.

Keys are read from the environment when a client is made and are never stored in a settings
object, a file or a log. The identity hash (sha256 of the canonical identity JSON) names the
output directories, so results of two judges are never mixed in one directory.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from fdb.errors import FdbError
from fdb.io import sha256_file

GPT_BEHAVIOR_MODEL = "gpt-4o-2024-08-06"  # the paper's v1.5 behavior judge
GPT_RELEVANCE_MODEL = "gpt-4-turbo"  # what the official v1.0 interruption scorer requests
OPENAI_KEY_ENV = "OPENAI_API_KEY"
CUSTOM_KEY_ENV = "CUSTOM_JUDGE_API_KEY"
DEFAULT_CONCURRENCY = 16
DEFAULT_TIMEOUT_S = 120.0
HEX40 = re.compile(r"^[0-9a-f]{40}$")
HEX64 = re.compile(r"^[0-9a-f]{64}$")


class Decoding(BaseModel):
    """Decoding of the judge config. temperature, top_p and max_tokens are required; the others
    are sent only when present (leave out any the endpoint does not support)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    temperature: float = Field(ge=0.0)
    top_p: float = Field(gt=0.0, le=1.0)
    max_tokens: int = Field(gt=0)
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None


class JudgeConfig(BaseModel):
    """``judge-config.json`` exactly as the spec shows it."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    model_id: str = Field(min_length=1)
    model_revision: str
    tokenizer_id: str = Field(min_length=1)
    tokenizer_revision: str
    served_model: str = Field(min_length=1)
    precision: str = Field(min_length=1)
    enable_thinking: bool | None = None
    decoding: Decoding
    seeds: list[int] = Field(min_length=1, max_length=3)
    server_launch_receipt: str = Field(min_length=1)
    server_launch_receipt_sha256: str

    @field_validator("model_revision", "tokenizer_revision")
    @classmethod
    def _full_revision(cls, value: str) -> str:
        if not HEX40.match(value):
            raise ValueError(f"{value!r} is not a full 40-hex commit hash")
        return value

    @field_validator("server_launch_receipt_sha256")
    @classmethod
    def _sha256(cls, value: str) -> str:
        if not HEX64.match(value):
            raise ValueError(f"{value!r} is not a 64-hex sha256")
        return value


def canonical_sha256(obj: Any) -> str:
    data = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(data.encode("utf-8")).hexdigest()


def load_judge_config(path: Path) -> JudgeConfig:
    """Read and validate a judge config, and check its launch receipt's sha256."""
    path = Path(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise FdbError(
            f"judge config {path} does not exist",
            "start the judge with `serve-judge`, or pass --judge-config PATH",
        ) from exc
    except json.JSONDecodeError as exc:
        raise FdbError(f"judge config {path} is not valid JSON: {exc}", "fix the file") from exc
    try:
        config = JudgeConfig.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'config'}: {e['msg']}" for e in exc.errors()
        )
        raise FdbError(
            f"judge config {path} is not valid: {problems}",
            "see the judge config format in the guide's Scoring CLI reference",
        ) from exc
    receipt = Path(config.server_launch_receipt)
    receipt = receipt if receipt.is_absolute() else path.parent / receipt
    if not receipt.is_file():
        raise FdbError(
            f"judge config {path}: launch receipt {receipt} does not exist",
            "the receipt records the judge server's command and checkpoint; restart the judge "
            "server",
        )
    actual = sha256_file(receipt)
    if actual != config.server_launch_receipt_sha256:
        raise FdbError(
            f"judge config {path}: launch receipt {receipt} has sha256 {actual}, "
            f"not the configured {config.server_launch_receipt_sha256}",
            "the judge server was relaunched differently; regenerate the judge config",
        )
    return config


class JudgeSettings(BaseModel):
    """What a judging phase runs with. Holds the name of the key's environment variable, never
    the key."""

    model_config = ConfigDict(frozen=True)
    kind: Literal["custom", "openai"]
    model: str  # model sent for behavior labels and semantic grades
    relevance_model: str  # model sent for the v1.0 interruption relevance rating
    base_url: str | None = None  # None: the SDK default (OpenAI's endpoint)
    api_key_env: str
    config: JudgeConfig | None = None
    config_path: str | None = None
    concurrency: int = Field(DEFAULT_CONCURRENCY, ge=1, le=1024)
    timeout_s: float = Field(DEFAULT_TIMEOUT_S, gt=0)
    reference_source: Path | None = None  # a Full-Duplex-Bench checkout (or its evaluation/ dir)
    accept_revision: str | None = (
        None  # a checkout revision the user accepted instead of the pinned one
    )

    @classmethod
    def custom(cls, config_path: Path, base_url: str, **kw: Any) -> JudgeSettings:
        config = load_judge_config(config_path)
        return cls(
            kind="custom",
            model=config.served_model,
            relevance_model=config.served_model,
            base_url=base_url,
            api_key_env=CUSTOM_KEY_ENV,
            config=config,
            config_path=str(config_path),
            **kw,
        )

    @classmethod
    def openai(
        cls, model: str = GPT_BEHAVIOR_MODEL, base_url: str | None = None, **kw: Any
    ) -> JudgeSettings:
        relevance = kw.pop("relevance_model", None) or (
            GPT_RELEVANCE_MODEL if model == GPT_BEHAVIOR_MODEL else model
        )
        return cls(
            kind="openai",
            model=model,
            relevance_model=relevance,
            base_url=base_url,
            api_key_env=OPENAI_KEY_ENV,
            **kw,
        )

    def identity(self) -> dict[str, Any]:
        """What makes two judges the same judge. Concurrency and timeouts are not part of it."""
        if self.kind == "custom":
            assert self.config is not None
            return {"kind": "custom", "config": self.config.model_dump(mode="json")}
        return {
            "kind": "openai",
            "model": self.model,
            "relevance_model": self.relevance_model,
            "base_url": self.base_url or "https://api.openai.com/v1",
        }

    @property
    def identity_sha256(self) -> str:
        return canonical_sha256(self.identity())

    @property
    def name(self) -> str:
        """Directory name: a readable slug plus the first 12 hex digits of the identity hash."""
        slug = re.sub(r"[^A-Za-z0-9._-]+", "-", self.model).strip("-.").lower()[:40] or "judge"
        return f"{slug}-{self.identity_sha256[:12]}"

    def api_key(self) -> str:
        """Read the key from the environment at client creation (a placeholder for custom)."""
        value = os.environ.get(self.api_key_env)
        if value:
            return value
        if self.kind == "custom":
            return "EMPTY"
        raise FdbError(
            f"{self.api_key_env} is not set", f"export {self.api_key_env} for the judge endpoint"
        )

    def public(self) -> dict[str, Any]:
        """The settings as recorded in outputs (no key)."""
        return {
            "kind": self.kind,
            "name": self.name,
            "model": self.model,
            "relevance_model": self.relevance_model,
            "base_url": self.base_url,
            "api_key_env": self.api_key_env,
            "identity_sha256": self.identity_sha256,
            "identity": self.identity(),
            "config_path": self.config_path,
            "concurrency": self.concurrency,
            "timeout_s": self.timeout_s,
        }


class JudgeChoice(BaseModel):
    """The outcome of resolving options and environment: settings, or why there is no judge."""

    settings: JudgeSettings | None
    reason: str | None = None


NO_JUDGE = (
    "no judge is configured: for a self-hosted judge pass --judge-config PATH (or export "
    "JUDGE_CONFIG) and --base-url URL (or JUDGE_URL); for the paper's GPT judge export "
    "JUDGE=gpt and OPENAI_API_KEY (--judge-model and --base-url pick another OpenAI-compatible "
    "model). Labels and ratings stay pending until then"
)


def resolve_judge(
    *,
    judge_config: Path | None = None,
    base_url: str | None = None,
    judge_model: str | None = None,
    env: Mapping[str, str] | None = None,
    work: Path | None = None,
    **kw: Any,
) -> JudgeChoice:
    """Pick the judge: a judge config makes a custom judge; --judge-model or JUDGE=gpt an OpenAI
    one (pending without OPENAI_API_KEY); nothing configured leaves the judge pending."""
    env = os.environ if env is None else env
    judge = env.get("JUDGE") or "qwen"
    config = judge_config or (Path(env["JUDGE_CONFIG"]) if env.get("JUDGE_CONFIG") else None)
    if config is None and judge == "qwen" and judge_model is None and work is not None:
        port = env.get("JUDGE_PORT") or "30000"
        default = Path(work) / "judge" / f"port-{port}" / "judge-config.json"
        config = default if default.is_file() else None
    if config is not None:
        if not Path(config).is_file():  # a typo says so, before the URL it would also need
            raise FdbError(
                f"judge config {config} does not exist",
                "start the judge with `serve-judge`, or pass --judge-config PATH",
            )
        url = base_url or env.get("JUDGE_URL")
        if not url:
            raise FdbError(
                f"the judge config {config} needs the judge server's URL",
                "pass --base-url http://HOST:PORT/v1 (or export JUDGE_URL)",
            )
        settings = JudgeSettings.custom(Path(config), url, **kw)
        if judge_model and judge_model != settings.model:
            raise FdbError(
                f"--judge-model {judge_model} differs from the config's served_model "
                f"{settings.model}",
                "leave --judge-model out for a custom judge, or fix the config",
            )
        return JudgeChoice(settings=settings)
    if judge_model is None and judge != "gpt":
        return JudgeChoice(settings=None, reason=NO_JUDGE)
    if not env.get(OPENAI_KEY_ENV):
        return JudgeChoice(
            settings=None,
            reason=f"{OPENAI_KEY_ENV} is not set, so the "
            f"{judge_model or GPT_BEHAVIOR_MODEL} judge cannot run; labels stay pending",
        )
    url = base_url or env.get("OPENAI_BASE_URL") or None
    return JudgeChoice(settings=JudgeSettings.openai(judge_model or GPT_BEHAVIOR_MODEL, url, **kw))
