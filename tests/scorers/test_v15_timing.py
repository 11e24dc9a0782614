"""v1.5 timing: the official interval rules on hand-built spans, the pooled summary with its
cluster bootstrap, and real Silero runs on a tiny tree built from reference audio."""

from __future__ import annotations

import math
import shutil

import numpy as np
import pytest

from benchmarks.support.treebuild import FixedSegments, bursts
from fdb.audio import wav_bytes
from fdb.io import atomic_write_bytes, atomic_write_json, read_json, sha256_file
from fdb.records import ExportManifest, ExportSample
from fdb.records.v15 import TIMING_SCHEMA
from scorers.v15_intervals import latencies, merge_spans, response_intervals, stop_intervals
from scorers.v15_timing import cluster_stats, score_v15_timing

FILES = ("input.wav", "output.wav", "clean_input.wav", "clean_output.wav")


def test_merge_gap_is_inclusive():
    spans = [(2.5, 3.0), (0.0, 1.0), (1.5, 2.0)]
    assert merge_spans(spans, 0.5) == [(0.0, 3.0)]
    assert merge_spans(spans, 0.4) == [(0.0, 1.0), (1.5, 2.0), (2.5, 3.0)]
    assert merge_spans([(0.0, 4.0), (1.0, 2.0)], 0.5) == [(0.0, 4.0)]  # a contained span


def test_stop_intervals_sweep():
    user, model = [(1.0, 3.0), (5.0, 6.0)], [(2.0, 4.0), (4.5, 5.5)]
    out = stop_intervals(user, model)
    assert out == [(2.0, 3.0), (5.0, 5.5)]
    assert latencies(out) == [1.0, 0.5]
    assert stop_intervals([], model) == [] and stop_intervals(user, []) == []


def test_stop_dedupe_by_rounded_end_keeps_shortest():
    user = [(1.0, 2.0002), (2.0003, 3.0)]
    model = [(1.5, 2.0004)]
    # raw overlaps (1.5, 2.0002) and (2.0003, 2.0004) share the key round(2000.2) = round(2000.4)
    assert stop_intervals(user, model) == [(2.0, 2.0)]


def test_response_intervals_rules():
    user = [(0.0, 1.0), (1.5, 2.0), (5.0, 6.0)]
    model = [(3.0, 4.0)]
    # both user ends point at the model start 3.0: keep the later user end; 6.0 has no later start
    assert response_intervals(user, model) == [(2.0, 3.0)]
    assert response_intervals([(0.0, 3.0)], [(3.0, 4.0), (5.0, 6.0)]) == [
        (3.0, 5.0)
    ]  # strictly after
    assert response_intervals([(0.0, 1.00049)], [(2.0, 3.0)]) == [(1.0, 2.0)]  # 3-decimal rounding
    assert latencies([(1.0, 2.5), (0.1, 0.3)]) == [1.5, 0.2]


def test_cluster_stats_by_hand_and_bootstrap():
    clusters = [[1.0, 2.0], [], [4.0]]
    stats = cluster_stats(clusters)
    assert (stats.intervals, stats.sessions, stats.mean_s, stats.median_s) == (3, 2, 7 / 3, 2.0)
    idx = np.random.default_rng(0).integers(0, 3, size=(2000, 3))
    means, medians = [], []
    for row in idx:
        pooled = [v for i in row for v in clusters[i]]
        if pooled:
            means.append(float(np.mean(pooled)))
            medians.append(float(np.median(pooled)))
    means.sort()
    medians.sort()
    b = len(means)
    lo, hi = math.ceil(0.025 * b) - 1, math.ceil(0.975 * b) - 1
    assert stats.valid_resamples == b < 2000
    assert stats.mean_bootstrap95 == pytest.approx((means[lo], means[hi]), abs=1e-12)
    assert stats.median_bootstrap95 == (medians[lo], medians[hi])
    empty = cluster_stats([[], []])
    assert empty.mean_s is None and empty.median_s is None and empty.mean_bootstrap95 is None


def write_pair(root, category, pid, audio: dict, eligible=True):
    folder = root / category / pid
    files = {}
    if eligible:
        folder.mkdir(parents=True, exist_ok=True)
        for name, value in audio.items():
            if isinstance(value, np.ndarray):
                atomic_write_bytes(folder / name, wav_bytes(value, 16000))
            else:
                shutil.copyfile(value, folder / name)
            files[name] = sha256_file(folder / name)
    return ExportSample(
        sample_id=f"{category}/{pid}",
        subset=category,
        id=pid,
        eligible=eligible,
        reasons=[] if eligible else ["verdict fail"],
        files=files,
    )


def test_tree_with_injected_spans(tmp_path):
    root = tmp_path / "reference-audio"
    T = 10.0
    overlap = {
        "input.wav": bursts(T, (1.0, 3.0), (6.0, 7.0)),
        "output.wav": bursts(T, (2.0, 4.0), (8.0, 9.0)),
    }
    clean = {"clean_input.wav": bursts(T, (1.0, 3.0)), "clean_output.wav": bursts(T, (4.0, 5.0))}
    samples = [
        write_pair(root, "user_interruption", "2", {**overlap, **clean}),
        write_pair(
            root,
            "user_interruption",
            "10",
            {**clean, "input.wav": bursts(T, (1.0, 2.0)), "output.wav": bursts(T)},
        ),
        write_pair(root, "talking_to_other", "1", {}, eligible=False),
    ]
    atomic_write_json(
        root / "reference-manifest.json", ExportManifest(dataset="v1.5", samples=samples).dump()
    )
    vad = FixedSegments()
    summary = score_v15_timing(root, vad)
    ui = summary.categories["user_interruption"]
    assert (ui.pairs, ui.eligible_pairs, ui.timed_overlap_sessions, ui.timed_clean_sessions) == (
        2,
        2,
        1,
        2,
    )
    # overlap: stop (2, 3) -> 1.0; user ends 3.0 and 7.0 both point at the model start 8.0, so
    # the key keeps the later user end: (7.0, 8.0) -> 1.0
    assert (ui.stop_latency.mean_s, ui.response_latency.mean_s, ui.response_latency.intervals) == (
        1.0,
        1.0,
        1,
    )
    assert ui.clean_response_latency.mean_s == 1.0 and ui.clean_stop_latency.mean_s is None
    assert summary.categories["talking_to_other"].stop_latency.mean_s is None
    assert summary.categories["all"].pairs == 3
    rows = read_json_lines(tmp_path / "scores/intervals.jsonl")
    assert [(r["sample_id"], r["variant"], r["status"]) for r in rows] == [
        ("user_interruption/2", "overlap", "ok"),
        ("user_interruption/2", "clean", "ok"),
        ("user_interruption/10", "overlap", "ok"),
        ("user_interruption/10", "clean", "ok"),
        ("talking_to_other/1", "overlap", "ineligible"),
        ("talking_to_other/1", "clean", "ineligible"),
    ]
    assert rows[0]["response_intervals"] == [[7.0, 8.0]] and rows[0]["stop_intervals"] == [
        [2.0, 3.0]
    ]
    calls = vad.calls
    score_v15_timing(root, vad)
    assert vad.calls == calls  # spans cached by file sha256


def test_real_silero_on_reference_audio(tmp_path, reference, silero):
    root = tmp_path / "reference-audio"
    inter, smooth = (
        reference / "user_interruption_example/1",
        reference / "smooth_turn_taking_example/1",
    )
    pair = {
        "input.wav": inter / "input.wav",
        "output.wav": inter / "output.wav",
        "clean_input.wav": smooth / "input.wav",
        "clean_output.wav": smooth / "output.wav",
    }
    samples = [write_pair(root, "user_interruption", "1", pair)]
    atomic_write_json(
        root / "reference-manifest.json", ExportManifest(dataset="v1.5", samples=samples).dump()
    )
    summary = score_v15_timing(root, silero, out=tmp_path / "out")
    doc = read_json(tmp_path / "out/summary.json")
    assert doc["schema"] == TIMING_SCHEMA and doc["vad"]["settings"]["speech_pad_ms"] == 30
    row = read_json_lines(tmp_path / "out/intervals.jsonl")[0]
    assert row["status"] == "ok" and row["model_vad"] and row["user_vad"]
    for s, e in row["stop_intervals"] + row["response_intervals"]:
        assert 0 <= s <= e <= 28.16
    ui = summary.categories["user_interruption"]
    assert ui.timed_overlap_sessions == 1
    assert ui.response_latency.intervals == len(row["response_intervals"]) > 0
    before = (tmp_path / "out/summary.json").read_bytes()
    score_v15_timing(root, silero, out=tmp_path / "out")
    assert (tmp_path / "out/summary.json").read_bytes() == before


def read_json_lines(path):
    import json

    return [json.loads(line) for line in path.read_text().splitlines()]
