"""Observation-window export of recorded sessions (docs/formats.md, "Export").

A session is eligible when its recording exists, its status is ``ok``, the protocol oracle
(re-run here on the stored trace) passes, no input packet was more than 80 ms off its schedule,
the recorded input is the dataset input, the stored files are the ones the recorder wrote, and
the input is long enough to score (``MIN_SCORABLE_INPUT_S``; reason ``too_short``).
An eligible session gets its window [0, T] as 16 kHz mono PCM16 with exactly the input's sample
count; an ineligible one gets no audio folder and keeps its reasons. A v1.5 pair is eligible only
when both its sessions are. Export is deterministic: the same recordings give the same bytes.

The manifest's ``trace_format`` names the protocol the cohort was recorded in (each profile has
its own, see :mod:`fdb.dialects`): the one passed (``--trace-format``), else the recordings' own
(the first recorded session's). A session recorded in another format is ineligible
(``trace_format``); with no session recorded at all it is null.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fdb.audio import pcm16_to_float, read_wav, wav_bytes
from fdb.datasets.types import V10Sample, V15Pair
from fdb.dialects import dialect_for_trace_format
from fdb.errors import FdbError
from fdb.io import (
    atomic_write_bytes,
    atomic_write_json,
    read_json,
    remove_stale_leftovers,
    sha256_bytes,
    sha256_file,
)
from fdb.provenance import current
from fdb.records import ExportManifest, ExportSample
from fdb.session_records import SessionRecord
from recorders.recording import input_pcm16
from recorders.variant import VariantResult, analyze_variant, dataset_input, source_hashes

V10_MANIFEST = "manifest.json"
V15_MANIFEST = "reference-manifest.json"
V15_VARIANTS = (
    ("overlap", "input.wav", "output.wav"),
    ("clean", "clean_input.wav", "clean_output.wav"),
)
# The shortest input (= window T) a sample is scored on. 1 s is the shortest duration the metric
# definitions use: the official takeover rule counts a reply that spans at least 1 s (or has more
# than 3 words), response_rate_1s is the first unified response threshold, and the official
# backchannel rule sorts model segments by whether they are shorter than 1 s. Every VAD the
# scorers run also drops speech under 250 ms, so a shorter window holds at most a fragment of a
# user turn and of a reply: its outcome would be set by the window, not by the system. Such a
# sample stays in the denominators as ineligible, never as a scored outcome.
MIN_SCORABLE_INPUT_S = 1.0
TOO_SHORT_REASON = f"too_short: input shorter than {MIN_SCORABLE_INPUT_S:g} s, too short to score"


def find_session(recordings: Sequence[Path], rel: Path) -> tuple[Path | None, str | None]:
    """The one recording root holding ``rel``/session.json; a reason when none or several do."""
    found = [
        Path(root) / rel for root in recordings if (Path(root) / rel / "session.json").is_file()
    ]
    if len(found) > 1:
        return None, f"duplicate: recorded in {len(found)} runs ({', '.join(map(str, found))})"
    return (found[0], None) if found else (None, None)


def export_v10(
    recordings: Sequence[Path],
    samples: Sequence[V10Sample],
    out_dir: Path,
    dataset_revision: str | None = None,
    trace_format: str | None = None,
) -> ExportManifest:
    """Export v1.0 windows: ``<subset>/<id>/output.wav`` plus the annotation copy, and
    ``manifest.json``. ``recordings`` are run roots holding ``<subset>/<id>/main/``."""
    out_dir = Path(out_dir)
    located = [(s, *find_session(recordings, Path(s.subset) / s.id / "main")) for s in samples]
    fmt = _cohort_format(trace_format, [where for _, where, _ in located])
    sources = {s.sample_id: _v10_sources(s, where) for s, where, _ in located}
    digest = sha256_bytes(_canonical(sources).encode())
    _prepare_out_dir(out_dir, V10_MANIFEST, digest, [(s.subset, s.id) for s in samples])
    rows = [_export_v10_sample(s, where, dup, out_dir, fmt) for s, where, dup in located]
    manifest = ExportManifest(
        dataset="v1.0",
        dataset_revision=dataset_revision,
        trace_format=fmt,
        samples=rows,
        provenance=_provenance(recordings, sources, digest, fmt),
    )
    atomic_write_json(out_dir / V10_MANIFEST, manifest.dump())
    (out_dir / EXPORT_MARKER).unlink()
    return manifest


def _export_v10_sample(
    sample: V10Sample,
    where: Path | None,
    dup: str | None,
    out_dir: Path,
    fmt: str | None,
) -> ExportSample:
    label = sample.sample_id
    result = _too_short(_analyze(where, dup, sample.input_wav, label, fmt), sample.duration_s)
    row = _row(label, sample.subset, sample.id, result, [result])
    if not row.eligible:
        return row
    folder = out_dir / sample.subset / sample.id
    row.files["output.wav"] = _write(folder / "output.wav", wav_bytes(result.window, 16000))
    if sample.annotation is not None:
        row.files[sample.annotation.name] = _write(
            folder / sample.annotation.name, sample.annotation.read_bytes()
        )
    return row


def export_v15(
    recordings: Sequence[Path],
    pairs: Sequence[V15Pair],
    out_dir: Path,
    dataset_revision: str | None = None,
    trace_format: str | None = None,
) -> ExportManifest:
    """Export v1.5 pairs: ``<category>/<id>/{input.wav, output.wav, clean_input.wav,
    clean_output.wav, metadata.json}`` and ``reference-manifest.json``. ``recordings`` are run
    roots holding ``<category>/<id>/{overlap,clean}/``."""
    out_dir = Path(out_dir)
    located = []
    for pair in pairs:
        base = Path(pair.category) / pair.id
        located.append((pair, {v: find_session(recordings, base / v) for v, _, _ in V15_VARIANTS}))
    fmt = _cohort_format(
        trace_format, [where[v][0] for _, where in located for v, _, _ in V15_VARIANTS]
    )
    sources = {p.sample_id: _v15_sources(p, where) for p, where in located}
    digest = sha256_bytes(_canonical(sources).encode())
    _prepare_out_dir(out_dir, V15_MANIFEST, digest, [(p.category, p.id) for p in pairs])
    rows = [_export_v15_pair(p, where, out_dir, fmt) for p, where in located]
    manifest = ExportManifest(
        dataset="v1.5",
        dataset_revision=dataset_revision,
        trace_format=fmt,
        samples=rows,
        provenance=_provenance(recordings, sources, digest, fmt),
    )
    atomic_write_json(out_dir / V15_MANIFEST, manifest.dump())
    (out_dir / EXPORT_MARKER).unlink()
    return manifest


def _export_v15_pair(
    pair: V15Pair,
    where: dict[str, tuple[Path | None, str | None]],
    out_dir: Path,
    fmt: str | None,
) -> ExportSample:
    inputs = {"overlap": pair.input_wav, "clean": pair.clean_input_wav}
    durations = {"overlap": pair.duration_s, "clean": pair.clean_duration_s}
    results = {
        v: _too_short(
            _analyze(where[v][0], where[v][1], inputs[v], f"{pair.sample_id} [{v}]", fmt),
            durations[v],
        )
        for v, _, _ in V15_VARIANTS
    }
    reasons = [f"{v}: {r}" for v, _, _ in V15_VARIANTS for r in results[v].reasons]
    row = _row(
        pair.sample_id, pair.category, pair.id, results["overlap"], list(results.values()), reasons
    )
    if not row.eligible:
        return row
    folder = out_dir / pair.category / pair.id
    for variant, input_name, output_name in V15_VARIANTS:
        result = results[variant]
        row.files[input_name] = _write(
            folder / input_name, wav_bytes(pcm16_to_float(result.input_pcm), 16000)
        )
        row.files[output_name] = _write(folder / output_name, wav_bytes(result.window, 16000))
    row.files["metadata.json"] = _write(folder / "metadata.json", pair.metadata.read_bytes())
    return row


def _analyze(
    where: Path | None, dup: str | None, input_wav: Path, label: str, fmt: str | None
) -> VariantResult:
    if dup is not None:
        return VariantResult.missing(dup, verdict="fail")
    try:
        expected = dataset_input(input_wav, label)
    except FdbError as exc:
        return VariantResult.missing(f"dataset: {exc.one_line()}", verdict="fail")
    return analyze_variant(
        where, expected, label, lambda rate: input_pcm16(read_wav(input_wav, label), rate), fmt
    )


def _too_short(result: VariantResult, duration_s: float) -> VariantResult:
    """Mark a variant whose dataset input is under MIN_SCORABLE_INPUT_S ineligible (reason
    first)."""
    if duration_s < MIN_SCORABLE_INPUT_S:
        result.eligible = False
        result.reasons.insert(0, TOO_SHORT_REASON)
    return result


def _cohort_format(given: str | None, sessions: Sequence[Path | None]) -> str | None:
    """The export's trace format: ``given`` (checked), else the first readable recording's."""
    if given is not None:
        return dialect_for_trace_format(given).trace_format
    for where in sessions:
        if where is None:
            continue
        try:
            return SessionRecord.model_validate(read_json(where / "session.json")).trace_format
        except (OSError, ValueError):
            continue
    return None


def _row(
    sample_id: str,
    subset: str,
    id_: str,
    main: VariantResult,
    parts: list[VariantResult],
    reasons: list[str] | None = None,
) -> ExportSample:
    verdicts = {p.verdict for p in parts}
    verdict = "missing" if "missing" in verdicts else "fail" if "fail" in verdicts else "pass"
    eligible = all(p.eligible for p in parts)
    return ExportSample(
        sample_id=sample_id,
        subset=subset,
        id=id_,
        eligible=eligible,
        reasons=[] if eligible else (reasons if reasons is not None else main.reasons),
        T_s=main.T_s,
        input_samples=main.input_samples,
        barge_in_cuts=sum(p.barge_in_cuts for p in parts) if eligible else 0,
        verdict=verdict,
    )


def _write(path: Path, data: bytes) -> str:
    atomic_write_bytes(path, data)
    return sha256_bytes(data)


def _v10_sources(sample: V10Sample, where: Path | None) -> dict[str, Any]:
    files = [("input", sample.input_wav)] + (
        [("annotation", sample.annotation)] if sample.annotation else []
    )
    return {"dataset": {k: _file_sha(p) for k, p in files}, "main": source_hashes(where)}


def _v15_sources(pair: V15Pair, where: dict[str, tuple[Path | None, str | None]]) -> dict[str, Any]:
    files = [
        ("input", pair.input_wav),
        ("clean_input", pair.clean_input_wav),
        ("metadata", pair.metadata),
    ]
    out: dict[str, Any] = {"dataset": {k: _file_sha(p) for k, p in files}}
    for variant, _, _ in V15_VARIANTS:
        out[variant] = source_hashes(where[variant][0])
    return out


def _file_sha(path: Path) -> str | None:
    return sha256_file(path) if Path(path).is_file() else None


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def _provenance(
    recordings: Sequence[Path], sources: dict[str, Any], digest: str, fmt: str | None
) -> dict[str, Any]:
    profile = dialect_for_trace_format(fmt) if fmt else None
    return {
        "fdb": current().model_dump(mode="json"),
        "recordings": [str(r) for r in recordings],
        "sources_sha256": digest,
        "sources": sources,
        "policy": {
            "window": "[0, T], T the input length from the first packet's slot",
            "playout": "fifo from receipt" + (f"; {profile.cuts.description}" if profile else ""),
            "resample": "soxr HQ, output rate -> 16000 Hz, fixed to the input's sample count",
            "pacing_tolerance_ms": profile.pacing.tolerance_ms if profile else None,
        },
    }


EXPORT_MARKER = (
    ".export-in-progress.json"  # written before the first sample, removed after the manifest
)


def _previous_folders(
    out_dir: Path, manifest_name: str, digest: str
) -> set[tuple[str, str]] | None:
    """The sample folders of a previous export of the same recordings in ``out_dir`` (finished:
    its manifest; interrupted: its in-progress marker), or None when there is none."""
    try:
        manifest = ExportManifest.load(
            out_dir / manifest_name, "a damaged manifest counts as no previous export"
        )
    except (OSError, FdbError):
        manifest = None
    if manifest is not None and manifest.provenance.get("sources_sha256") == digest:
        return {(s.subset, s.id) for s in manifest.samples}
    try:
        old = read_json(out_dir / EXPORT_MARKER)
        if old["sources_sha256"] == digest:
            return {(subset, id_) for subset, id_ in old["folders"]}
    except (OSError, KeyError, TypeError, ValueError):
        pass
    return None


def _prepare_out_dir(
    out_dir: Path, manifest_name: str, digest: str, planned: Sequence[tuple[str, str]]
) -> None:
    """Refuse a non-empty ``out_dir`` unless it holds only a previous export of the same
    recordings, finished or interrupted (a killed export leaves its marker); that export's
    sample folders are removed before writing again, and so are the temp files of writes that a
    killed export never committed. Then mark the export as in progress."""
    if out_dir.is_dir():
        remove_stale_leftovers(out_dir)
    if out_dir.exists() and any(out_dir.iterdir()):
        refuse = FdbError(
            f"export directory {out_dir} is not empty and holds no previous export of these "
            "recordings",
            "export into a new directory",
        )
        folders = _previous_folders(out_dir, manifest_name, digest)
        if folders is None:
            raise refuse
        subsets = {subset for subset, _ in folders}
        for entry in out_dir.iterdir():
            if entry.name in (manifest_name, EXPORT_MARKER):
                continue
            if not entry.is_dir() or entry.name not in subsets:
                raise refuse
            if any((entry.name, child.name) not in folders for child in entry.iterdir()):
                raise refuse
        for subset, id_ in sorted(folders):
            shutil.rmtree(out_dir / subset / id_, ignore_errors=True)
        for subset in subsets:
            if (out_dir / subset).is_dir() and not any((out_dir / subset).iterdir()):
                (out_dir / subset).rmdir()
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(
        out_dir / EXPORT_MARKER,
        {
            "schema": "fdb-export-progress-1",
            "sources_sha256": digest,
            "folders": sorted({tuple(f) for f in planned}),
        },
    )
