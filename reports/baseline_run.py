"""Observations of a run's repeats: the per-sample values of its phase outputs.

- v1.0 (``v10/reference/unified-samples.jsonl``): per subset, ``v10.latency_s`` (response
  latency, paired), ``v10.response_2s`` (took the turn / responded within 2 s, yes/no),
  ``v10.stop_s`` (interruption stop time, paired; a stop that is never reached is left out),
  ``v10.pause_intrusion`` (spoke into a pause, yes/no);
- v1.5 (``scores/intervals.jsonl``, overlap sessions): per category and ``all``,
  ``v15.stop_latency_s`` and ``v15.response_latency_s``, each session's mean interval;
- v1.5 behavior (``judge.json``): ``v15.expected_behavior`` (the label the category asks for:
  C_RESPOND when the user interrupts, C_RESUME otherwise), yes/no per judged pair;
- listening (``listening/scores.json``): per dataset, each sample's mean over its replies of
  ``listening.omission_rate``, ``listening.wer``, ``listening.mos``, ``listening.voice_similarity``;
- ``sessions_failed@all``: sessions whose protocol verdict is not ``pass``, one value per repeat.
"""

from __future__ import annotations

from pathlib import Path

from fdb.errors import FdbError
from fdb.layout import RepeatPaths, RunPaths
from fdb.records import ExportManifest, asr_backend, load_rows
from fdb.records.judge import JudgeSummary
from fdb.records.listening import ListeningScores, ListeningSummary
from fdb.records.v10 import InterruptRow, PauseRow, SampleRow, UnifiedStamp, read_sample_rows
from fdb.records.v15 import SessionIntervals, TimingSummary
from reports.baseline_sources import _digest, _ident, _load
from reports.observations import Observations, Series

EXPECTED_LABEL = {"user_interruption": "C_RESPOND"}  # every other category: C_RESUME
V10_LABELS = {
    "latency_s": ("response latency", "s", "lower", "paired"),
    "response_2s": ("responds within 2 s", "", "higher", "binary"),
    "stop_s": ("stop time", "s", "lower", "paired"),
    "pause_intrusion": ("speaks into a pause", "", "lower", "binary"),
}
LISTENING = {
    "omission_rate": ("omission rate", "lower"),
    "wer": ("reply WER", "lower"),
    "mos": ("MOS", "higher"),
    "voice_similarity": ("voice consistency", "higher"),
}


DAMAGED_HINT = (
    "the file is damaged (cut short?): rerun the phase that writes it "
    "(python -m fdb asr / aggregate)"
)
EXPORT_HINT = (
    "the export is damaged: cut the windows again from the recording "
    "(python -m fdb generate --run-name RUN --repeat N --export-only)"
)


def _sample_rows(path: Path) -> list[SampleRow]:
    return read_sample_rows(path, DAMAGED_HINT) if path.is_file() else []


def check_scored(rep: RepeatPaths, run: str, manifest: dict) -> None:
    """Refuse a repeat that is still recording or was never scored: its values would be partial."""
    datasets = manifest.get("datasets") or {}
    fix = f"finish the repeat: python -m fdb asr --run-name {run} --repeat {rep.number}"
    if "v1.0" in datasets and not (rep.v10_reference / "unified-samples.jsonl").is_file():
        if rep.holds_recording() and not (rep.v10_reference / "manifest.json").is_file():
            raise FdbError(
                f"{rep.root} is still recording or was not exported "
                "(no v10/reference/manifest.json)",
                "wait for generate to finish, or recover it: python -m fdb generate --run-name "
                f"{run} --repeat {rep.number} --export-only",
            )
        raise FdbError(
            f"{rep.v10_reference / 'unified-samples.jsonl'} is missing: repeat-{rep.number} has no "
            "v1.0 scores",
            fix,
        )
    if "v1.5" in datasets and not (rep.scores / "intervals.jsonl").is_file():
        raise FdbError(
            f"{rep.scores / 'intervals.jsonl'} is missing: repeat-{rep.number} has no v1.5 timing",
            fix,
        )


def _put(
    out: Observations,
    metric: str,
    key: str,
    sample: str,
    value: float | None,
    index: int,
    total: int,
    label: str,
    unit: str,
    better: str,
    shape: str,
) -> None:
    name = f"{metric}@{key}"
    series = out.series.get(name)
    if series is None:
        series = Series(metric=metric, key=key, label=label, unit=unit, better=better, shape=shape)
        out.add(series)
    values = series.samples.setdefault(sample, [None] * total)
    values[index] = value


def _v10(out: Observations, rep: RepeatPaths, index: int, total: int) -> None:
    for row in _sample_rows(rep.v10_reference / "unified-samples.jsonl"):
        if not row.eligible:
            continue
        values: dict[str, float | None] = {}
        if isinstance(row, PauseRow):
            values["pause_intrusion"] = float(row.pause_intrusion)
        else:
            latency = row.latency_s
            values["latency_s"] = latency
            values["response_2s"] = float(
                row.outcome == "response" and latency is not None and latency <= 2.0
            )
        if isinstance(row, InterruptRow) and row.outcome != "not_exercised":
            values["stop_s"] = row.stop_s if isinstance(row.stop_s, int | float) else None
        for metric, value in values.items():
            label, unit, better, shape = V10_LABELS[metric]
            _put(
                out,
                f"v10.{metric}",
                row.subset,
                row.sample_id,
                value,
                index,
                total,
                label,
                unit,
                better,
                shape,
            )


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _v15(out: Observations, rep: RepeatPaths, index: int, total: int) -> None:
    for row in load_rows(SessionIntervals, rep.scores / "intervals.jsonl", DAMAGED_HINT):
        if row.variant != "overlap" or row.status != "ok":
            continue
        for metric, latencies, label in (
            ("v15.stop_latency_s", row.stop_latencies_s, "stop latency"),
            ("v15.response_latency_s", row.response_latencies_s, "response latency"),
        ):
            value = _mean(latencies)
            for key in (row.category, "all"):
                _put(
                    out,
                    metric,
                    key,
                    row.sample_id,
                    value,
                    index,
                    total,
                    label,
                    "s",
                    "lower",
                    "paired",
                )
    judge = JudgeSummary.load(rep.root / "judge.json")
    behavior = judge.behavior if judge else None
    if behavior is not None and behavior.status in ("complete", "has_failures"):
        for sample in behavior.samples:
            if sample.outcome != "valid":
                continue
            expected = EXPECTED_LABEL.get(sample.category, "C_RESUME")
            value = float(sample.label == expected)
            for key in (sample.category, "all"):
                _put(
                    out,
                    "v15.expected_behavior",
                    key,
                    sample.sample_id,
                    value,
                    index,
                    total,
                    "expected behavior (judge label)",
                    "",
                    "higher",
                    "binary",
                )


def _listening(out: Observations, rep: RepeatPaths, index: int, total: int) -> None:
    scores = ListeningScores.load(rep.root / "listening" / "scores.json")
    if scores is None:
        return
    per_sample: dict[tuple[str, str, str], list[float]] = {}
    for reply in scores.replies:
        sample = reply.reply_id.rsplit("/", 1)[0]  # dataset/category/id/variant
        for metric in LISTENING:
            value = getattr(reply, metric)
            if value is not None:
                per_sample.setdefault((metric, reply.dataset, sample), []).append(float(value))
    for (metric, dataset, sample), values in sorted(per_sample.items()):
        label, better = LISTENING[metric]
        _put(
            out,
            f"listening.{metric}",
            dataset,
            sample,
            _mean(values),
            index,
            total,
            label,
            "",
            better,
            "paired",
        )


def _failed_sessions(rep: RepeatPaths) -> int | None:
    found = None
    for path in (
        rep.reference_audio / "reference-manifest.json",
        rep.v10_reference / "manifest.json",
    ):
        manifest = ExportManifest.load(path, EXPORT_HINT) if path.is_file() else None
        if manifest is not None:
            found = (found or 0) + sum(1 for s in manifest.samples if s.verdict != "pass")
    return found


def add_repeat(out: Observations, rep: RepeatPaths, index: int, total: int) -> None:
    _v10(out, rep, index, total)
    _v15(out, rep, index, total)
    _listening(out, rep, index, total)
    name = "sessions_failed@all"
    series = out.series.get(name) or Series(
        metric="sessions_failed",
        key="all",
        label="failed sessions",
        unit="sessions",
        better="lower",
        shape="unpaired",
    )
    series.values.append(_failed_sessions(rep))
    out.add(series)


def comparability(manifest: dict, repeats: list[RepeatPaths]) -> dict[str, str | None]:
    keys: dict[str, str | None] = {}
    for name, use in sorted((manifest.get("datasets") or {}).items()):
        keys[f"dataset.{name}.revision"] = use.get("revision")
        keys[f"dataset.{name}.selection"] = _digest(sorted(use.get("sample_ids") or []))
    rep = repeats[0]
    # Only unified.json's stamp: a repeat scored under an older unified schema (which
    # UnifiedResult does not read) is still compared by the definitions it names.
    unified = UnifiedStamp.load(rep.v10_reference / "unified.json", DAMAGED_HINT) or UnifiedStamp()
    timing = TimingSummary.load(rep.scores / "summary.json")
    listening = ListeningSummary.load(rep.root / "listening" / "summary.json")
    judge = JudgeSummary.load(rep.root / "judge.json")
    backends = listening.backends if listening else {}
    judged = (
        judge is not None
        and judge.behavior is not None
        and judge.behavior.status in ("complete", "has_failures")
    )
    keys.update(
        {
            "backend.asr": _ident(asr_backend(rep.v10_reference)),
            "backend.vad": _ident(unified.vad or (timing.vad.model_dump() if timing else None)),
            "backend.listening_asr": _ident(backends.get("asr")),
            "backend.mos": _ident(backends.get("mos")),
            "backend.speaker": _ident(backends.get("speaker")),
            "backend.judge": _ident(judge.judge) if judged else None,
            "definitions.v10_unified": unified.definitions,
            "definitions.v15_timing": _digest(timing.definitions) if timing else None,
            "definitions.listening": _digest(listening.definitions) if listening else None,
        }
    )
    return keys


def observe_run(directory: Path) -> Observations:
    run = RunPaths(directory)
    manifest = _load(
        run.manifest,
        "the run manifest (no repeat was ever started)",
        f"record the run with `python -m fdb generate --run-name {run.name}`",
    )
    repeats = run.repeats()
    if not repeats:
        raise FdbError(
            f"{directory} has no repeat-N/",
            f"record one: python -m fdb generate --run-name {run.name}",
        )
    out = Observations(kind="run", source=str(directory))
    for index, rep in enumerate(repeats):
        check_scored(rep, run.name, manifest)
        add_repeat(out, rep, index, len(repeats))
    out.comparability = comparability(manifest, repeats)
    out.notes.append(
        f"{len(repeats)} repeat(s): " + ", ".join(f"repeat-{r.number}" for r in repeats)
    )
    return out
