"""v1.5 timing over an export tree ``reference-audio/<category>/<id>/{input.wav, output.wav,
clean_input.wav, clean_output.wav}`` with ``reference-manifest.json`` (docs/formats.md).

Per session (overlap: input.wav / output.wav; clean: clean_input.wav / clean_output.wav):
Silero VAD with get_timing's defaults (threshold 0.5, min speech 250 ms, min silence 100 ms,
speech_pad 30 ms, spans = samples / 16000), then the official merge, stop and response rules of
``scorers.v15_intervals`` (§3.5). Per category and "all": the pooled mean and median of the
stop and response latencies over the overlap sessions (and, separately, the clean sessions),
with a sample-cluster bootstrap that resamples pairs (2000 resamples, ``default_rng(0)``,
ceil-quantile percentile endpoints); empty sets are null. Timed overlap sessions are the
overlap sessions that produced any interval. Writes ``intervals.jsonl`` and ``summary.json``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import numpy as np

import fdb.models.vad  # the module, so that tests can stand in for SileroVad
from fdb.audio import read_wav, resample
from fdb.datasets.types import category_key
from fdb.errors import SampleError
from fdb.io import atomic_write_json, atomic_write_jsonl, read_json, sha256_bytes, sha256_file
from fdb.models.vad import VadSettings
from fdb.provenance import current
from fdb.records import ExportManifest, ExportSample, load_v15_manifest
from fdb.records.v15 import (
    ANCHORED_LABEL,
    CategoryTiming,
    LatencyStats,
    SessionIntervals,
    TimingSummary,
    TimingVad,
)
from fdb.stats import bootstrap_indices, percentile_interval
from scorers.segmenter import PREFETCH_BLOCK, SegmentMemo, SpeechSegmenter, prefetch_blocks
from scorers.v10_tree import id_key
from scorers.v15_intervals import (
    MODEL_MERGE_GAP_S,
    USER_MERGE_GAP_S,
    Interval,
    anchored_response,
    anchored_stop,
    event_span,
    latencies,
    merge_spans,
    response_intervals,
    stop_intervals,
)

TIMING_VAD_SETTINGS = VadSettings(
    threshold=0.5, min_speech_duration_ms=250, min_silence_duration_ms=100, speech_pad_ms=30
)
VAD_RATE = 16000
VARIANTS = {
    "overlap": ("input.wav", "output.wav"),
    "clean": ("clean_input.wav", "clean_output.wav"),
}
_SPAN_CACHE: dict[tuple, list[Interval]] = {}


def _disk_key(vad: SpeechSegmenter, sha: str) -> str:
    """File name of a cached span list: sha256 of (VAD identity, settings, file sha256)."""
    ident = vad.identity.model_dump(mode="json")
    blob = json.dumps(
        {"vad": ident, "settings": asdict(TIMING_VAD_SETTINGS), "file": sha}, sort_keys=True
    )
    return sha256_bytes(blob.encode()) + ".json"


def _cached(vad: SpeechSegmenter, sha: str, cache_dir: Path | None) -> tuple[tuple, Path | None]:
    """The in-process cache key of a file's spans (loaded from ``cache_dir`` when there)."""
    key = (vad.identity.name, vad.identity.checkpoint_sha256, sha, TIMING_VAD_SETTINGS)
    disk = cache_dir / _disk_key(vad, sha) if cache_dir is not None else None
    if key not in _SPAN_CACHE and disk is not None and disk.exists():
        try:
            _SPAN_CACHE[key] = [(float(s), float(e)) for s, e in read_json(disk)["spans"]]
        except (
            OSError,
            ValueError,
            KeyError,
            TypeError,
        ):  # a damaged cache entry is a miss: recomputed
            _SPAN_CACHE.pop(key, None)
    return key, disk


def _vad_input(path: Path, sample_id: str) -> np.ndarray:
    audio = read_wav(path, sample_id)
    return (
        audio.samples if audio.rate == VAD_RATE else resample(audio.samples, audio.rate, VAD_RATE)
    )


def vad_spans(
    vad: SpeechSegmenter, path: Path, sample_id: str, cache_dir: Path | None = None
) -> tuple[list[Interval], str]:
    """(VAD spans in seconds, file sha256); cached in-process by (VAD identity, sha256) and,
    with ``cache_dir``, on disk as ``<sha256(identity, settings, file sha256)>.json``."""
    if not path.exists():
        raise SampleError(sample_id, f"{path.name} is missing", path=str(path))
    sha = sha256_file(path)
    key, disk = _cached(vad, sha, cache_dir)
    if key not in _SPAN_CACHE:
        samples = _vad_input(path, sample_id)
        _SPAN_CACHE[key] = [
            (float(s), float(e)) for s, e in vad.segments(samples, TIMING_VAD_SETTINGS)
        ]
        if disk is not None:
            atomic_write_json(
                disk,
                {
                    "schema": "fdb-vad-cache-1",
                    "vad": vad.identity.model_dump(mode="json"),
                    "file_sha256": sha,
                    "spans": _SPAN_CACHE[key],
                },
            )
    return list(_SPAN_CACHE[key]), sha


def _uncached(
    vad: SpeechSegmenter, tree: Path, sample: ExportSample, cache_dir: Path | None
) -> list[tuple[Path, str]]:
    """(path, sha256) of an eligible pair's files whose spans no cache holds yet; the sha256 is
    the manifest's (the file is hashed only when the manifest lists none), no audio is read."""
    if not sample.eligible:
        return []
    folder = tree / sample.subset / sample.id
    paths = [folder / n for names in VARIANTS.values() for n in names]
    found = [(p, sample.files.get(p.name) or sha256_file(p)) for p in paths if p.exists()]
    return [(p, sha) for p, sha in found if _cached(vad, sha, cache_dir)[0] not in _SPAN_CACHE]


def overlap_span(folder: Path) -> Interval | None:
    """metadata.json's "timestamps" [start, end], or None when absent or malformed."""
    path = folder / "metadata.json"
    try:
        start, end = read_json(path)["timestamps"]
        return (float(start), float(end))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def anchor_session(row: SessionIntervals, span: Interval | None) -> None:
    """Fill the fdb event-anchored fields (not official) of an overlap row."""
    row.overlap_span = span
    if span is None:
        return
    row.event_span = event_span(row.user_spans, span)
    row.anchored_stop_interval = anchored_stop(row.event_span, row.model_spans)
    row.anchored_response_interval = anchored_response(row.event_span, row.model_spans)
    for field, iv in (
        ("anchored_stop_latency_s", row.anchored_stop_interval),
        ("anchored_response_latency_s", row.anchored_response_interval),
    ):
        setattr(row, field, None if iv is None else latencies([iv])[0])


def intervals_from_spans(
    row: SessionIntervals, user_vad: list[Interval], model_vad: list[Interval]
) -> None:
    """Fill a session row from raw VAD spans (pure): merged spans, intervals, latencies."""
    row.user_vad, row.model_vad = user_vad, model_vad
    row.user_spans = merge_spans(user_vad, USER_MERGE_GAP_S)
    row.model_spans = merge_spans(model_vad, MODEL_MERGE_GAP_S)
    row.stop_intervals = stop_intervals(row.user_spans, row.model_spans)
    row.response_intervals = response_intervals(row.user_spans, row.model_spans)
    row.stop_latencies_s = latencies(row.stop_intervals)
    row.response_latencies_s = latencies(row.response_intervals)


def time_session(
    vad: SpeechSegmenter,
    tree: Path,
    sample: ExportSample,
    variant: str,
    cache_dir: Path | None = None,
) -> SessionIntervals:
    """One session's row; an unreadable or changed file gives a failed row with the error."""
    row = SessionIntervals(
        sample_id=sample.sample_id,
        category=sample.subset,
        id=sample.id,
        variant=variant,
        status="ok",
    )
    if not sample.eligible:
        row.status, row.reasons = "ineligible", list(sample.reasons)
        return row
    folder = tree / sample.subset / sample.id
    names = VARIANTS[variant]
    try:
        (user, row.input_sha256), (model, row.output_sha256) = (
            vad_spans(vad, folder / name, sample.sample_id, cache_dir) for name in names
        )
        for name, sha in zip(names, (row.input_sha256, row.output_sha256), strict=True):
            if sample.files.get(name) not in (None, sha):
                raise SampleError(sample.sample_id, f"{name} differs from reference-manifest.json")
    except SampleError as exc:
        row.status, row.error = "failed", exc.one_line()
        return row
    intervals_from_spans(row, user, model)
    if variant == "overlap":
        anchor_session(row, overlap_span(folder))
    return row


def cluster_stats(clusters: Sequence[Sequence[float]]) -> LatencyStats:
    """Pooled mean and median over clusters (one per pair) with sample-cluster bootstrap."""
    values = (
        np.concatenate([np.asarray(c, dtype=np.float64) for c in clusters])
        if clusters
        else np.zeros(0)
    )
    sessions = sum(1 for c in clusters if len(c))
    if values.size == 0:
        return LatencyStats(
            intervals=0,
            sessions=0,
            mean_s=None,
            median_s=None,
            mean_bootstrap95=None,
            median_bootstrap95=None,
            valid_resamples=0,
        )
    means, medians = _resample_stats(clusters)
    mean_ci, valid = percentile_interval(means)
    median_ci, _ = percentile_interval(medians)
    return LatencyStats(
        intervals=int(values.size),
        sessions=sessions,
        mean_s=float(values.mean()),
        median_s=float(np.median(values)),
        mean_bootstrap95=mean_ci,
        median_bootstrap95=median_ci,
        valid_resamples=valid,
    )


def _resample_stats(clusters: Sequence[Sequence[float]]) -> tuple[np.ndarray, np.ndarray]:
    """Mean and median (np.median convention) of each of the 2000 cluster resamples; NaN for
    a resample that drew no interval."""
    n = len(clusters)
    owner = np.repeat(np.arange(n), [len(c) for c in clusters])
    values = np.concatenate([np.asarray(c, dtype=np.float64) for c in clusters])
    order = np.argsort(values, kind="stable")
    values, owner = values[order], owner[order]
    idx = bootstrap_indices(n)
    offsets = (idx + np.arange(idx.shape[0])[:, None] * n).ravel()
    weights = np.bincount(offsets, minlength=idx.shape[0] * n).reshape(idx.shape[0], n)[:, owner]
    total = weights.sum(axis=1)
    cum = weights.cumsum(axis=1)
    lo = (cum <= ((total - 1) // 2)[:, None]).sum(axis=1)
    hi = (cum <= (total // 2)[:, None]).sum(axis=1)
    safe = np.minimum(np.stack([lo, hi]), values.size - 1)
    ok = total > 0
    with np.errstate(invalid="ignore", divide="ignore"):
        means = np.where(ok, (weights * values).sum(axis=1) / np.where(ok, total, 1), np.nan)
    medians = np.where(ok, (values[safe[0]] + values[safe[1]]) / 2, np.nan)
    return means, medians


def category_timing(
    category: str, pairs: Sequence[ExportSample], rows: dict[tuple[str, str], SessionIntervals]
) -> CategoryTiming:
    """Counts and pooled latency statistics of one category (or "all") from its session rows."""

    def clusters(variant: str, field: str) -> list[list[float]]:
        chosen = [rows[(p.sample_id, variant)] for p in pairs]
        return [getattr(r, field) for r in chosen if r.status == "ok"]

    sessions = [rows[(p.sample_id, v)] for p in pairs for v in VARIANTS]
    return CategoryTiming(
        category=category,
        pairs=len(pairs),
        eligible_pairs=sum(1 for p in pairs if p.eligible),
        timed_overlap_sessions=sum(1 for p in pairs if rows[(p.sample_id, "overlap")].timed),
        timed_clean_sessions=sum(1 for p in pairs if rows[(p.sample_id, "clean")].timed),
        failed_sessions=sum(1 for r in sessions if r.status == "failed"),
        stop_latency=cluster_stats(clusters("overlap", "stop_latencies_s")),
        response_latency=cluster_stats(clusters("overlap", "response_latencies_s")),
        clean_stop_latency=cluster_stats(clusters("clean", "stop_latencies_s")),
        clean_response_latency=cluster_stats(clusters("clean", "response_latencies_s")),
        anchored_event_sessions=sum(1 for c in clusters("overlap", "event_span") if c is not None),
        anchored_stop_latency=cluster_stats(_one(clusters("overlap", "anchored_stop_latency_s"))),
        anchored_response_latency=cluster_stats(
            _one(clusters("overlap", "anchored_response_latency_s"))
        ),
    )


def _one(values: Sequence[float | None]) -> list[list[float]]:
    """Clusters of at most one anchored latency per session."""
    return [[] if v is None else [v] for v in values]


def definitions() -> dict[str, object]:
    """The rules summary.json was computed with (recorded in the file)."""
    return {
        "vad_settings": {
            **asdict(TIMING_VAD_SETTINGS),
            "sampling_rate": VAD_RATE,
            "return_seconds": False,
        },
        "merge_gap_s": {"user": USER_MERGE_GAP_S, "model": MODEL_MERGE_GAP_S},
        "intervals": "official get_timing.py rules (clean-room), values rounded to 3 decimals",
        "pooled": "mean and median (np.median) of all intervals of the sessions of a category",
        "bootstrap": "2000 resamples of the pairs whose session of the variant was read (status "
        "ok, with or without intervals), a fresh default_rng(0) per statistic; a resample "
        "without intervals is skipped; ceil(0.025 B)-th and ceil(0.975 B)-th valid statistic",
        "anchored": f"{ANCHORED_LABEL}: metadata.json's overlap span picks the merged user span "
        "with the largest intersection (earliest on ties); stop = its first positive "
        "overlap with a merged model span; response = [its end, next model start "
        "strictly after]; at most one of each per overlap session, same bootstrap",
    }


def _default_vad(vad: SpeechSegmenter | None) -> SpeechSegmenter:
    if vad is not None:
        return vad
    return fdb.models.vad.SileroVad()


def _selected_pairs(
    tree: Path, manifest: ExportManifest, only: Sequence[str] | None
) -> list[ExportSample]:
    chosen = manifest.select(list(only) if only else None, str(tree / "reference-manifest.json"))
    return sorted(chosen, key=lambda s: (category_key(s.subset), id_key(s.id)))


def time_some(
    tree: Path,
    cache_dir: Path,
    limit: int,
    vad: SpeechSegmenter | None = None,
    only: Sequence[str] | None = None,
) -> tuple[int, int]:
    """Run the VAD of at most ``limit`` selected pairs whose spans ``cache_dir`` does not hold
    yet (the work units of one call of ``score v15 timing --limit``); returns (pairs done now,
    pairs still to do). Once none is left, ``score_v15_timing`` reads every span from the cache."""
    tree, vad = Path(tree), _default_vad(vad)
    manifest, _ = load_v15_manifest(tree)
    unreadable_path = (
        Path(cache_dir) / "unreadable.json"
    )  # files the VAD could not read: tried, not cached
    unreadable = set(read_json(unreadable_path)) if unreadable_path.exists() else set()
    todo = [
        p
        for p in _selected_pairs(tree, manifest, only)
        if {sha for _, sha in _uncached(vad, tree, p, cache_dir)} - unreadable
    ]
    for pair in todo[:limit]:
        for variant in VARIANTS:
            time_session(vad, tree, pair, variant, cache_dir)
        unreadable |= {sha for _, sha in _uncached(vad, tree, pair, cache_dir)}
    atomic_write_json(unreadable_path, sorted(unreadable))
    return min(limit, len(todo)), max(0, len(todo) - limit)


def score_v15_timing(
    tree: Path,
    vad: SpeechSegmenter | None = None,
    out: Path | None = None,
    cache_dir: Path | None = None,
    only: Sequence[str] | None = None,
) -> TimingSummary:
    """Time every session of a v1.5 reference-audio tree (``only``: just these "category/id"
    pairs); writes ``out/intervals.jsonl`` and ``out/summary.json`` (``out`` defaults to
    ``tree/../scores``); ``cache_dir`` keeps VAD spans on disk by (VAD identity, settings, file
    sha256)."""
    tree = Path(tree)
    out = Path(out) if out is not None else tree.parent / "scores"
    manifest, manifest_sha = load_v15_manifest(tree)
    vad = _default_vad(vad)
    pairs = _selected_pairs(tree, manifest, only)
    memo, rows = SegmentMemo(vad), {}

    def load(pair: ExportSample) -> list[np.ndarray]:
        return [
            _vad_input(path, pair.sample_id) for path, _ in _uncached(vad, tree, pair, cache_dir)
        ]

    blocks = prefetch_blocks(memo, pairs, load, TIMING_VAD_SETTINGS, block=PREFETCH_BLOCK // 4)
    for block in blocks:
        rows.update(
            {
                (p.sample_id, v): time_session(memo, tree, p, v, cache_dir)
                for p in block
                for v in VARIANTS
            }
        )
    categories = {"all": category_timing("all", pairs, rows)}
    for category in sorted({p.subset for p in pairs}, key=category_key):
        categories[category] = category_timing(
            category, [p for p in pairs if p.subset == category], rows
        )
    ident = vad.identity
    summary = TimingSummary(
        definitions=definitions(),
        manifest_sha256=manifest_sha,
        vad=TimingVad(
            name=ident.name,
            version=ident.version,
            model_sha256=ident.checkpoint_sha256,
            settings=definitions()["vad_settings"],
        ),
        categories=categories,
        provenance=current().model_dump(mode="json"),
    )
    atomic_write_jsonl(out / "intervals.jsonl", list(rows.values()))
    atomic_write_json(out / "summary.json", summary.dump())
    return summary
