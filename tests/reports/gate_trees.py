"""Small outputs on disk for the gate tests, written through the outputs' own records."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from fdb.io import atomic_write_json, atomic_write_jsonl
from fdb.records.listening import ListeningScores, ReplyScores
from fdb.records.serving import Capacity, ServingRow, SweepCapacity, SweepReport
from fdb.records.tts import (
    LevelRow,
    LevelStats,
    QualitySummary,
    RoundRow,
    TtsBenchOptions,
    TtsDataset,
    TtsReport,
    TtsRun,
)
from fdb.records.v10 import TurnRow


def tts_output(
    root: Path,
    *,
    throughput: float = 10.0,
    ttfa_ms: float = 200.0,
    rounds: int = 3,
    seed: int = 0,
    levels=(1, 4),
    list_sha256: str = "abc",
    stop_violations: int = 0,
    noise: float = 0.02,
    failed: int = 0,
) -> Path:
    """A tts-bench output with ``rounds`` measured rounds per level (plus a cold round)."""
    rng = np.random.default_rng(seed)
    entries, rows, stats = [], [], []
    for entry, level in enumerate(levels, start=1):
        for number in range(0, rounds + 1):
            jitter = float(np.exp(rng.normal(0.0, noise)))
            row = LevelRow(
                concurrency=level,
                requests=8,
                ok=8 - failed,
                failed=failed,
                throughput_audio_s_per_s=round(throughput * level**0.5 * jitter, 4),
                ttfa_p50_ms=round(ttfa_ms * jitter, 3),
                ttfa_p95_ms=round(1.3 * ttfa_ms * jitter, 3),
                ttfa_mean_ms=round(1.05 * ttfa_ms * jitter, 3),
                rtf_mean=round(0.2 * jitter, 4),
                e2e_p50_ms=round(900 * jitter, 3),
                stop_checked=8,
                stop_violations=stop_violations,
            )
            if number == 0:
                row = row.model_copy(
                    update={"ttfa_p50_ms": 5 * ttfa_ms}
                )  # a cold round: must be left out
            entries.append(
                RoundRow(
                    entry=entry,
                    concurrency=level,
                    round=number,
                    cold=number == 0,
                    directory=f"concurrency-{level}/"
                    + ("cold" if number == 0 else f"round-{number}"),
                    row=row,
                )
            )
        rows.append(row)
        stats.append(LevelStats(entry=entry, concurrency=level, rounds=rounds, metrics={}))
    run = TtsRun(
        options=TtsBenchOptions(
            output=root, concurrency=list(levels), rounds=rounds, cold_round=True, num_prompts=8
        ),
        dataset=TtsDataset(
            root="/seedtts",
            source="synthetic",
            list_name="en/meta.lst",
            rows=8,
            list_sha256=list_sha256,
        ),
        endpoint="http://127.0.0.1:9/v1/audio/speech",
    )
    atomic_write_json(root / "run.json", run.dump())
    quality = QualitySummary(
        lang="en",
        expected=8,
        evaluated=8,
        asr_label="Whisper tiny.en (embedded)",
        mos_label="DNSMOS",
    )
    report = TtsReport(
        run=run, layout="rounds", rows=rows, rounds=entries, level_stats=stats, quality=quality
    )
    atomic_write_json(root / "tts.json", report.dump())
    utterances = [
        {
            "id": f"u{i}",
            "lang": "en",
            "reference": "x",
            "wer": float(rng.uniform(0.0, 0.1)),
            "sim": None,
            "mos": float(rng.uniform(3.0, 3.5)),
        }
        for i in range(8)
    ]
    atomic_write_jsonl(root / "quality" / "quality.jsonl", utterances)
    return root


def sweep_output(
    root: Path, capacity: int, first_audio_ms: float = 400.0, repeats: int = 3, seed: int = 0
) -> Path:
    rng = np.random.default_rng(seed)
    per_repeat = {}
    for level in (1, 2, 4):
        per_repeat[str(level)] = [
            ServingRow(
                concurrency=level,
                profile="turn-based",
                native=False,
                sessions=level,
                first_audio_p50_ms=first_audio_ms * float(np.exp(rng.normal(0, 0.02))),
                first_audio_p95_ms=first_audio_ms * 1.5,
                rtf_p90=0.5,
                meets_targets=level <= capacity,
            ).model_dump(mode="json")
            for _ in range(repeats)
        ]
    cap = Capacity(sessions=capacity, first_miss=capacity * 2)
    report = SweepReport(
        playback_reserve_ms=80.0,
        capacity=SweepCapacity(**dict(cap), sentence=cap.line()),
        client_limited_levels=[],
        warnings=[],
        levels={level: f"concurrency-{level}" for level in per_repeat},
        rows=[rows[0] for rows in per_repeat.values()],
        repeat_rows=per_repeat,
        provenance={},
        tables=[],
    )
    atomic_write_json(root / "serving.json", report.dump())
    return root


def run_output(
    root: Path,
    latencies: dict[str, float | None],
    revision: str = "rev1",
    asr: str = "faster-whisper-tiny.en",
    mos: dict[str, float] | None = None,
) -> Path:
    """A scored v1.0 run of one repeat: turn-taking samples with the given response latencies
    and, given ``mos``, listening scores of one reply per sample with that MOS."""
    ids = sorted(latencies)
    manifest = {
        "schema": "fdb-run-1",
        "datasets": {"v1.0": {"revision": revision, "sample_ids": ids}},
    }
    atomic_write_json(root / "run.json", manifest)
    ref = root / "repeat-1" / "v10" / "reference"
    rows = []
    for sample in ids:
        latency = latencies[sample]
        rows.append(
            TurnRow(
                sample_id=sample,
                subset="candor_turn_taking",
                task="turn_taking",
                eligible=True,
                T_s=10.0,
                E_s=5.0,
                words=0 if latency is None else 3,
                first_word_s=None if latency is None else 5.0 + latency,
                outcome="response" if latency is not None else "no_response",
                latency_s=latency,
                observable_s=5.0,
            )
        )
    atomic_write_jsonl(ref / "unified-samples.jsonl", rows)
    atomic_write_json(ref / "asr.json", {"schema": "fdb-asr-1", "backend": {"name": asr}})
    atomic_write_json(
        ref / "unified.json", {"definitions": "fdb-v1.0-unified-4", "vad": {"name": "silero"}}
    )
    export = {
        "schema": "fdb-export-1",
        "dataset": "v1.0",
        "samples": [
            {
                "sample_id": s,
                "subset": "candor_turn_taking",
                "id": s.split("/")[-1],
                "eligible": True,
            }
            for s in ids
        ],
    }
    atomic_write_json(ref / "manifest.json", export)
    if mos is not None:
        scores = ListeningScores(
            backends={"asr": None, "mos": {"name": "utmos"}, "speaker": None},
            replies=[
                ReplyScores(
                    reply_id=f"v1.0/{sample}/main/0",
                    dataset="v1.0",
                    category="candor_turn_taking",
                    duration_s=4.0,
                    short=False,
                    compared=False,
                    mos=value,
                )
                for sample, value in sorted(mos.items())
            ],
        )
        atomic_write_json(root / "repeat-1" / "listening" / "scores.json", scores.dump())
    return root


def read(path: Path):
    return json.loads(path.read_text(encoding="utf-8"))
