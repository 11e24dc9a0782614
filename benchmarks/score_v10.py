"""Time v1.0 scoring (unified + official rules, ASR excluded) on a synthetic 727-sample tree.

The tree has the official subset sizes (216 + 137 pause handling, 119 turn-taking, 200 user
interruption, 55 backchannel) and window lengths like the dataset's (pause 6-14 s, turn-taking
E + 5 s, interruption 20-35 s, backchannel the ICC ground-truth length, 20-80 s): 16 kHz PCM16
output.wav files (silence, with constant-amplitude bursts where the model "speaks" in the
interruption and backchannel windows), output.json transcripts consistent with the bursts,
annotations, manifest.json and an asr.json receipt. ASR is not run.

VAD: ``--vad injected`` (default) passes segments through the segmenter protocol
(``scorers.segmenter.SpeechSegmenter``): the nonzero spans of each window, so every outcome
branch is exercised and the figure is the scorer's own cost; ``--vad silero`` runs the real
Silero JIT model on the same audio (its cost is mostly the model; measured:
docs/benchmarks.md#v10-scoring). The default ICC ground truth is ``../shared/fdb-reference``'s copy.

    .venv/bin/python benchmarks/score_v10.py [--vad injected|silero] [--out DIR] [--keep]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fdb.audio import wav_bytes  # noqa: E402
from fdb.io import atomic_write_bytes, atomic_write_json, read_json, sha256_bytes, sha256_file  # noqa: E402
from fdb.models import BackendIdentity  # noqa: E402
from fdb.models.vad import SileroVad  # noqa: E402
from fdb.records import AsrReceipt, AsrSampleReceipt, ExportManifest, ExportSample  # noqa: E402
from scorers.v10_official import score_official  # noqa: E402
from scorers.v10_unified import score_unified  # noqa: E402

RATE = 16000
SUBSETS = {
    "synthetic_pause_handling": 137,
    "candor_pause_handling": 216,
    "candor_turn_taking": 119,
    "synthetic_user_interruption": 200,
    "icc_backchannel": 55,
}
DEFAULT_GT = ROOT.parent / "shared" / "fdb-reference" / "icc_gt_distribution.json"


class NonzeroSegments:
    """Segments where the window is nonzero (exact sample bounds), through the VAD protocol."""

    identity = BackendIdentity(kind="vad", name="nonzero-benchmark-vad", version="1")

    def segments(self, samples, settings=None):
        active = np.abs(samples) > 1e-3
        edges = np.flatnonzero(np.diff(np.concatenate([[0], active.astype(np.int8), [0]])))
        return [
            (int(a) / RATE, int(b) / RATE) for a, b in zip(edges[::2], edges[1::2], strict=True)
        ]


def words_between(rng, start: float, end: float, count: int) -> list[list[float]]:
    """``count`` word spans evenly placed in [start, end], 3-decimal times."""
    step = (end - start) / max(count, 1)
    return [
        [round(start + i * step, 3), round(start + i * step + step * 0.8, 3)] for i in range(count)
    ]


def make_sample(rng, subset: str, idx: int, gt: dict | None):
    """(T, annotation name, annotation, bursts, words) of one synthetic sample."""
    if subset.endswith("pause_handling"):
        T = round(float(rng.uniform(6, 14)), 3)
        a = round(float(rng.uniform(1, T / 2)), 3)
        pauses = [[a, round(a + 0.8, 3)], [round(a + 2.0, 3), round(a + 2.6, 3)]]
        words = words_between(rng, 0.2, T - 0.5, int(rng.integers(0, 8)))
        return T, "pause.json", [{"text": "[PAUSE]", "timestamp": p} for p in pauses], [], words
    if subset == "candor_turn_taking":
        E = round(float(rng.uniform(2, 8)), 3)
        T = round(E + 5.0, 3)
        first = E + float(rng.uniform(-0.5, 4.0))
        words = words_between(rng, max(first, 0.0), T - 0.2, int(rng.integers(0, 12)))
        return (
            T,
            "turn_taking.json",
            [{"text": "[TURN-TAKING]", "timestamp": [E, round(E + 0.4, 3)]}],
            [],
            words,
        )
    if subset == "synthetic_user_interruption":
        T = round(float(rng.uniform(20, 35)), 3)
        S = round(float(rng.uniform(5, 15)), 3)
        R = round(S + float(rng.uniform(1, 3)), 3)
        stop = S + float(rng.uniform(-2.0, 3.5))
        reply = R + float(rng.uniform(0.3, 3.0))
        bursts = [(1.0, stop), (reply, min(reply + 6.0, T))]
        words = words_between(rng, reply, min(reply + 6.0, T) - 0.1, int(rng.integers(0, 15)))
        annotation = [{"context": "c", "interrupt": "i", "timestamp": [S, R]}]
        return T, "interrupt.json", annotation, bursts, words
    key = str(idx)
    T = (
        round((len(gt[key]) - 1) * 0.2, 3)
        if gt and key in gt
        else round(float(rng.uniform(20, 80)), 3)
    )
    starts = np.sort(rng.uniform(0.5, T - 5.0, size=int(rng.integers(0, 6))))
    bursts = [(float(s), float(s) + float(rng.uniform(0.3, 3.6))) for s in starts]
    words = [w for a, b in bursts for w in words_between(rng, a, b, int(rng.integers(0, 5)))]
    return T, None, None, bursts, words


def write_tree(out: Path, gt: dict | None, seed: int = 0) -> Path:
    """The synthetic 727-sample tree with manifest.json and asr.json; returns ``out``."""
    rng = np.random.default_rng(seed)
    samples, entries = [], []
    for subset, count in SUBSETS.items():
        for idx in range(count):
            sid = str(idx if subset == "icc_backchannel" else idx + 1)
            T, name, annotation, bursts, words = make_sample(rng, subset, idx, gt)
            n = round(T * RATE)
            audio = np.zeros(n, np.float32)
            for a, b in bursts:
                audio[round(max(a, 0.0) * RATE) : round(min(b, T) * RATE)] = 0.3
            folder = out / subset / sid
            files = {
                "output.wav": sha256_file(
                    atomic_write_bytes(folder / "output.wav", wav_bytes(audio, RATE))
                )
            }
            if name:
                files[name] = sha256_file(atomic_write_json(folder / name, annotation))
            chunks = [{"text": f"w{i}", "timestamp": w} for i, w in enumerate(words)]
            text = atomic_write_json(
                folder / "output.json",
                {"text": " ".join(c["text"] for c in chunks), "chunks": chunks},
            ).read_bytes()
            samples.append(
                ExportSample(
                    sample_id=f"{subset}/{sid}",
                    subset=subset,
                    id=sid,
                    eligible=True,
                    T_s=T,
                    input_samples=n,
                    files=files,
                )
            )
            entries.append(
                AsrSampleReceipt(
                    sample_id=f"{subset}/{sid}",
                    status="ok",
                    output_wav_sha256=files["output.wav"],
                    output_json_sha256=sha256_bytes(text),
                    words=len(chunks),
                )
            )
    manifest = atomic_write_json(
        out / "manifest.json", ExportManifest(dataset="v1.0", samples=samples).dump()
    )
    receipt = AsrReceipt(
        backend={"kind": "asr", "name": "synthetic-benchmark"},
        manifest_sha256=sha256_file(manifest),
        samples=entries,
    )
    atomic_write_json(out / "asr.json", receipt.dump())
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vad", choices=("injected", "silero"), default="injected")
    parser.add_argument("--icc-gt", type=Path, default=DEFAULT_GT)
    parser.add_argument(
        "--out", type=Path, default=None, help="build the tree here (default: a temp dir)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the tree")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="fdb-score-v10-"))
    gt = read_json(args.icc_gt) if args.icc_gt.exists() else None
    t0 = time.perf_counter()
    write_tree(out, gt)
    t1 = time.perf_counter()
    if args.vad == "silero":
        vad = SileroVad()
    else:
        vad = NonzeroSegments()
    t2 = time.perf_counter()
    unified = score_unified(out, vad)
    t3 = time.perf_counter()
    official = score_official(out, icc_gt=args.icc_gt if gt else None, vad=vad)
    t4 = time.perf_counter()
    selected = (
        sum(s.counts.selected for s in unified.subsets.values())
        + official.subsets["icc_backchannel"].selected
    )
    print(
        f"samples: {selected} (tree built in {t1 - t0:.1f} s at {out}); VAD: {vad.identity.name}; "
        f"cpus: {os.cpu_count()}"
    )
    print(
        f"unified: {t3 - t2:.1f} s; official rules: {t4 - t3:.1f} s; "
        f"scoring total: {t4 - t2:.1f} s (goal <= 60 s)"
    )
    inter = unified.subsets["synthetic_user_interruption"].counts
    bc = official.subsets["icc_backchannel"]
    print(
        f"interruption exercised {inter.exercised}/{inter.eligible}; backchannel TOR "
        f"{bc.takeover_rate:.3f}, frequency {bc.backchannel_frequency:.4f}, "
        f"JSD {bc.backchannel_jsd}"
    )
    if not (args.keep or args.out):
        shutil.rmtree(out)


if __name__ == "__main__":
    main()
