"""The launch receipt of a self-hosted judge server and the judge config that pins it.

``serve-judge -- COMMAND`` writes both into ``$FDB_WORK/judge/port-<port>/`` before it starts
COMMAND: ``launch-receipt.json`` (``fdb-judge-launch-1``: the server command with secrets
redacted, runtime, checkpoint and tokenizer ids and revisions, precision, port) and
``judge-config.json`` (the spec's format, ``judges.config.JudgeConfig``), which holds the
receipt's sha256. Both are written atomically, receipt first; neither holds a key (the endpoint
key is read from ``CUSTOM_JUDGE_API_KEY`` at request time). The receipt has no timestamp, so the
same launch gives the same bytes and the same judge identity.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from fdb.io import (
    atomic_write_bytes,
    atomic_write_json,
    dumps_json,
    load_record,
    redact_secrets,
    sha256_bytes,
)
from fdb.provenance import redact_command
from judges.config import Decoding, JudgeConfig

LAUNCH_SCHEMA = "fdb-judge-launch-1"
RECEIPT_NAME = "launch-receipt.json"
# The runbook's Qwen judge: non-thinking, greedy, seeds
# 1-3, 512 tokens (spec "Scoring CLI reference").
DEFAULT_DECODING = Decoding(
    temperature=0.0, top_p=1.0, top_k=-1, min_p=0.0, repetition_penalty=1.0, max_tokens=512
)
DEFAULT_SEEDS = (1, 2, 3)


class LaunchReceipt(BaseModel):
    """What the judge server was started with (the judge config pins this file's sha256)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    schema_: str = Field(LAUNCH_SCHEMA, alias="schema")
    command: list[str]  # secrets redacted
    runtime: (
        str | None
    )  # the serving runtime and its version, as the user gave it (e.g. "sglang 0.5.2")
    model_id: str
    model_revision: str
    model_path: str
    tokenizer_id: str
    tokenizer_revision: str
    precision: str
    port: int

    def dump(self) -> dict:
        return self.model_dump(mode="json", by_alias=True)


def load_launch_receipt(path: Path) -> LaunchReceipt:
    return load_record(
        path,
        LaunchReceipt,
        "judge launch receipt",
        "restart the judge with `serve-judge -- COMMAND`",
    )


def launch_receipt(command: list[str], **fields) -> LaunchReceipt:
    """The receipt of ``command``, its secrets (option values named like keys, URL credentials,
    secret environment values) redacted."""
    return LaunchReceipt(command=[redact_secrets(arg) for arg in redact_command(command)], **fields)


def write_launch(
    config_path: Path,
    receipt: LaunchReceipt,
    served_model: str,
    enable_thinking: bool | None = False,
    decoding: Decoding = DEFAULT_DECODING,
    seeds: tuple[int, ...] = DEFAULT_SEEDS,
) -> JudgeConfig:
    """Write the receipt beside ``config_path``, then the judge config that pins its sha256. The
    config is validated first: an invalid value writes nothing."""
    config_path = Path(config_path)
    data = dumps_json(receipt.dump()).encode("utf-8")
    config = JudgeConfig(
        model_id=receipt.model_id,
        model_revision=receipt.model_revision,
        tokenizer_id=receipt.tokenizer_id,
        tokenizer_revision=receipt.tokenizer_revision,
        served_model=served_model,
        precision=receipt.precision,
        enable_thinking=enable_thinking,
        decoding=decoding,
        seeds=list(seeds),
        server_launch_receipt=RECEIPT_NAME,
        server_launch_receipt_sha256=sha256_bytes(data),
    )
    atomic_write_bytes(config_path.parent / RECEIPT_NAME, data)
    atomic_write_json(config_path, config.model_dump(mode="json", exclude_none=True))
    return config
