"""``gate.yaml``: the reward and the guards of a gate, typed and versioned (schema ``fdb-gate-1``).

Defaults ship per output kind (:data:`DEFAULTS`); a file overrides them. A guard names a metric
(``ttfa_p50_ms``), optionally the series keys it covers (``[c1, c8]``; default: every key the
outputs have), a rule and an allowed change:

- ``change`` (default): a statistical comparison (fdb/decide.py); ``allowed`` is the change
  tolerated in the bad direction, a fraction of the baseline with ``relative: true`` (0.10 =
  10% slower allowed), else in the metric's unit (seconds, share points as a fraction);
- ``ceiling``: the candidate's total must not exceed ``max`` (stop-condition violations: 0);
- ``no_increase``: the candidate's mean per repeat must not exceed the baseline's + ``allowed``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from fdb.decide import UnpairedTest
from fdb.errors import FdbError
from reports.baseline_run import LISTENING, V10_LABELS
from reports.baseline_sources import SWEEP_LEVEL, TTS_LEVEL, TTS_QUALITY
from reports.observations import Kind

GATE_SCHEMA = "fdb-gate-1"
Rule = Literal["change", "ceiling", "no_increase"]

METRICS: dict[str, set[str]] = {
    "tts": {m for m, *_ in TTS_LEVEL} | {m for m, *_ in TTS_QUALITY},
    "sweep": {m for m, *_ in SWEEP_LEVEL} | {"capacity_sessions"},
    "run": {f"v10.{m}" for m in V10_LABELS}
    | {f"listening.{m}" for m in LISTENING}
    | {"v15.stop_latency_s", "v15.response_latency_s", "v15.expected_behavior", "sessions_failed"},
}


class Guard(BaseModel):
    model_config = ConfigDict(extra="forbid")

    metric: str
    keys: list[str] | None = None
    rule: Rule = "change"
    allowed: float = Field(0.0, ge=0.0)
    relative: bool = True
    max: float | None = Field(None, ge=0.0)
    test: UnpairedTest | None = None

    @model_validator(mode="after")
    def _ceiling_has_max(self) -> Guard:
        if self.rule == "ceiling" and self.max is None:
            raise ValueError(f"guard {self.metric}: rule ceiling needs max")
        return self


class Reward(BaseModel):
    model_config = ConfigDict(extra="forbid")

    metric: str
    keys: list[str] | None = None


class GateConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    schema_: Literal["fdb-gate-1"] = Field(GATE_SCHEMA, alias="schema")
    kind: Kind
    alpha: float = Field(0.05, gt=0.0, lt=0.5)  # one-sided level of every test
    test: UnpairedTest = "welch"
    # bonferroni: each series is tested at alpha / m (m: the change-rule series of this gate), so
    # the chance that ANY guard regresses on noise stays about alpha; none: alpha per series
    family: Literal["bonferroni", "none"] = "bonferroni"
    reward: Reward | None = None
    guards: list[Guard]

    def dump(self) -> dict:
        return self.model_dump(mode="json", by_alias=True)


def _g(
    metric: str, allowed: float = 0.0, relative: bool = True, rule: Rule = "change", **extra
) -> Guard:
    return Guard(metric=metric, allowed=allowed, relative=relative, rule=rule, **extra)


DEFAULTS: dict[str, GateConfig] = {
    "tts": GateConfig(
        kind="tts",
        reward=Reward(metric="throughput_audio_s_per_s"),
        guards=[
            _g("throughput_audio_s_per_s", 0.05),
            _g("ttfa_p50_ms", 0.10),
            _g("ttfa_p95_ms", 0.20),
            _g("ttfa_mean_ms", 0.10),
            _g("rtf_mean", 0.10),
            _g("e2e_p50_ms", 0.10),
            _g("stop_violations", rule="ceiling", max=0),
            _g("failed", rule="no_increase"),
            _g("wer", 0.02, relative=False),
            _g("sim", 0.02, relative=False),
            _g("mos", 0.10, relative=False),
        ],
    ),
    "sweep": GateConfig(
        kind="sweep",
        reward=Reward(metric="capacity_sessions"),
        guards=[
            _g("capacity_sessions"),
            _g("first_audio_p50_ms", 0.10),
            _g("first_audio_p95_ms", 0.20),
            _g("rtf_p90", 0.10),
            _g("sessions_failed", rule="no_increase"),
        ],
    ),
    "run": GateConfig(
        kind="run",
        guards=[
            _g("v10.latency_s", 0.10, relative=False),
            _g("v10.response_2s", 0.10, relative=False),
            _g("v10.stop_s", 0.10, relative=False),
            _g("v10.pause_intrusion", 0.10, relative=False),
            _g("v15.stop_latency_s", 0.10, relative=False),
            _g("v15.response_latency_s", 0.10, relative=False),
            _g("v15.expected_behavior", 0.10, relative=False),
            _g("listening.omission_rate", 0.02, relative=False),
            _g("listening.wer", 0.05, relative=False),
            _g("listening.mos", 0.10, relative=False),
            _g("listening.voice_similarity", 2.0, relative=False),
            _g("sessions_failed", rule="no_increase"),
        ],
    ),
}


def load_config(path: Path | None, kind: str) -> GateConfig:
    """``path``'s gate (checked against ``kind``), or the default of ``kind``."""
    if path is None:
        return DEFAULTS[kind]

    fix = "see docs/gating.md, 'gate.yaml'; `python -m fdb gate-default KIND` prints a default"
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise FdbError(
            f"{path} cannot be read ({exc.strerror})", "pass an existing --config"
        ) from exc
    except yaml.YAMLError as exc:
        raise FdbError(f"{path} is not valid YAML ({str(exc).splitlines()[0]})", fix) from exc
    try:
        config = GateConfig.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "gate"
        raise FdbError(
            f"{path}: {where}: {first['msg'].removeprefix('Value error, ')}", fix
        ) from exc
    if config.kind != kind:
        raise FdbError(
            f"{path} is a gate for {config.kind} outputs, but the outputs are {kind}",
            f"pass a gate.yaml with kind: {kind}",
        )
    known = METRICS[kind]
    for name in [g.metric for g in config.guards] + (
        [config.reward.metric] if config.reward else []
    ):
        if name not in known:
            raise FdbError(
                f"{path}: unknown metric {name!r} for {kind} outputs",
                f"use one of {', '.join(sorted(known))}",
            )
    return config
