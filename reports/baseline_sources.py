"""Observations (reports/observations.py) of a tts-bench (tts.json) and of a sweep (serving.json),
read through the outputs' own records; a run's phase outputs are read by reports/baseline_run.py."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from fdb.errors import FdbError
from fdb.io import read_jsonl
from fdb.records.serving import SweepReport
from fdb.records.tts import QualitySummary, TtsReport, UtteranceQuality
from reports.observations import Observations, Series

# (metric, label, unit, better) of a TTS level; every measured round is one value
TTS_LEVEL = [
    ("throughput_audio_s_per_s", "throughput", "audio-s/s", "higher"),
    ("throughput_frames_per_s", "throughput", "frames/s", "higher"),
    ("requests_per_s", "request rate", "req/s", "higher"),
    ("ttfa_p50_ms", "TTFA p50", "ms", "lower"),
    ("ttfa_p95_ms", "TTFA p95", "ms", "lower"),
    ("ttfa_mean_ms", "TTFA mean", "ms", "lower"),
    ("e2e_p50_ms", "E2E p50", "ms", "lower"),
    ("e2e_p95_ms", "E2E p95", "ms", "lower"),
    ("rtf_mean", "RTF mean", "", "lower"),
    ("failed", "failed requests", "requests", "lower"),
    ("stop_violations", "stop-condition violations", "requests", "lower"),
]
TTS_QUALITY = [
    ("wer", "Seed-TTS WER", "", "lower"),
    ("sim", "SIM", "", "higher"),
    ("mos", "MOS", "", "higher"),
]
SWEEP_LEVEL = [
    ("first_audio_p50_ms", "first audio p50", "ms", "lower"),
    ("first_audio_p95_ms", "first audio p95", "ms", "lower"),
    ("rtf_p90", "reply RTF p90", "", "lower"),
    ("unit_lag_p95_ms", "unit lag p95", "ms", "lower"),
    ("buffer_needed_p90_ms", "buffer needed p90", "ms", "lower"),
    ("unit_miss_rate", "late units", "share", "lower"),
    ("sessions_failed", "failed sessions", "sessions", "lower"),
]


def _load(path: Path, what: str, fix: str) -> Any:
    if not path.is_file():
        raise FdbError(f"{path} is missing: {what}", fix)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise FdbError(
            f"{path} is not valid JSON ({str(exc).splitlines()[0]}): a half-written {what}", fix
        ) from exc


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _ident(identity: Any) -> str | None:
    """A backend identity as one comparable string: name, version and checkpoint hash."""
    if not identity:
        return None
    if not isinstance(identity, dict):
        return str(identity)
    keys = ("name", "label", "model", "version", "model_sha256", "checkpoint_sha256", "sha256")
    parts = [f"{k}={identity[k]}" for k in keys if identity.get(k) is not None]
    return ";".join(parts) or _digest(identity)


# --- tts-bench ---------------------------------------------------------------------------------


def observe_tts(directory: Path) -> Observations:
    report = TtsReport.load(directory / "tts.json")
    opts, dataset = report.run.options, report.run.dataset
    out = Observations(kind="tts", source=str(directory))
    for row in report.measured_rows():  # a report of one round per level: its rows
        for metric, label, unit, better in TTS_LEVEL:
            name = f"{metric}@c{row.concurrency}"
            series = out.series.get(name) or Series(
                metric=metric,
                key=f"c{row.concurrency}",
                label=label,
                unit=unit,
                better=better,
                shape="unpaired",
            )
            series.values.append(getattr(row, metric))
            out.add(series)
    cold = len(report.cold_rounds())
    if cold:
        out.notes.append(f"{cold} cold round(s) left out")
    _tts_quality(directory, out)
    out.comparability = {
        "dataset.list": dataset.list_name,
        "dataset.list_sha256": dataset.list_sha256,
        "dataset.prompts": str(opts.num_prompts),
        "options.max_audio_s": str(opts.max_audio_s),
        "options.playback_reserve_ms": str(opts.playback_reserve_ms),
        "options.frame_rate": str(opts.frame_rate),
        "options.ref_audio": str(opts.ref_audio),
        **_quality_backends(report.quality),
        "definitions.tts": report.schema_,
    }
    return out


def _quality_backends(quality: QualitySummary | None) -> dict[str, str | None]:
    """The backends that scored a tts-bench's quality, each as one comparable string (None: not
    scored)."""
    if quality is None:
        return {"backend.asr": None, "backend.speaker": None, "backend.mos": None}
    return {
        "backend.asr": _ident(quality.asr) or quality.asr_label,
        "backend.speaker": _ident(quality.speaker) or quality.sim_label,
        "backend.mos": _ident(quality.mos_backend) or quality.mos_label,
    }


def _tts_quality(directory: Path, out: Observations) -> None:
    path = directory / "quality" / "quality.jsonl"
    if not path.is_file():
        return
    rows = read_jsonl(path, UtteranceQuality)
    for metric, label, unit, better in TTS_QUALITY:
        series = Series(
            metric=metric, key="all", label=label, unit=unit, better=better, shape="paired"
        )
        series.samples = {row.id: [getattr(row, metric)] for row in rows}
        if any(v[0] is not None for v in series.samples.values()):
            out.add(series)


# --- sweep -------------------------------------------------------------------------------------


def observe_sweep(directory: Path) -> Observations:
    path = directory / "serving.json"
    fix = f"let the sweep finish (or rerun it into a new --output); its report is {path}"
    report = SweepReport.load(path, fix)
    if report is None:
        raise FdbError(f"{path} is missing: the sweep report (the sweep did not finish)", fix)
    out = Observations(kind="sweep", source=str(directory))
    cap = Series(
        metric="capacity_sessions",
        key="all",
        label="sessions meeting the targets",
        unit="sessions",
        better="higher",
        shape="exact",
        values=[report.capacity.sessions],
    )
    out.add(cap)
    if report.capacity.at_least:
        out.notes.append("capacity is a floor: every level met the targets")
    per_repeat = report.repeat_rows or {str(r.concurrency): [r] for r in report.rows}
    for level in sorted(per_repeat, key=int):
        for row in per_repeat[level]:
            for metric, label, unit, better in SWEEP_LEVEL:
                name = f"{metric}@c{row.concurrency}"
                series = out.series.get(name) or Series(
                    metric=metric,
                    key=f"c{row.concurrency}",
                    label=label,
                    unit=unit,
                    better=better,
                    shape="unpaired",
                )
                series.values.append(getattr(row, metric))
                out.add(series)
    out.comparability = _sweep_comparability(directory, report)
    return out


def _sweep_comparability(directory: Path, report: SweepReport) -> dict[str, str | None]:
    specs = []
    for level in sorted(directory.glob("concurrency-*/level.json")) + sorted(
        directory.glob("concurrency-*/repeat-*/level.json")
    ):
        spec = json.loads(level.read_text(encoding="utf-8"))
        specs.append(spec)
    first = specs[0] if specs else {}
    jobs = sorted(
        {f"{j.get('sample_id')}/{j.get('variant')}" for s in specs for j in s.get("jobs", [])}
    )
    return {
        "dataset.name": first.get("dataset"),
        "dataset.selection": _digest(jobs) if jobs else None,
        "protocol.profile": first.get("profile"),
        "protocol.turn_detection": _digest(first.get("turn_detection")) if specs else None,
        "options.playback_reserve_ms": str(report.playback_reserve_ms),
        "definitions.serving": report.schema_,
    }
