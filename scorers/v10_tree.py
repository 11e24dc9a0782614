"""File side of the v1.0 scorers: manifest, ASR receipt, freshness checks and sample loading.

A tree is ``<subset>/<id>/{output.wav, output.json, <annotation>}`` plus ``manifest.json``
(``fdb-export-1``) and ``asr.json`` (``fdb-asr-1``), see docs/formats.md. The scorer refuses a
tree without asr.json and stops when an eligible sample's output.json or output.wav differs
from asr.json, or its annotation differs from manifest.json (spec "Run"), and it stops on an
eligible output.wav that does not hold exactly T seconds of samples (checked from the header
for every task, and again wherever the audio is read).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

from fdb.audio import Audio, read_wav, resample
from fdb.datasets.types import V10_ANNOTATION, V10_SUBSETS, V10_TASK
from fdb.errors import FdbError, SampleError
from fdb.io import read_json, sha256_file
from fdb.records import AsrReceipt, AsrSampleReceipt, ExportManifest, ExportSample
from scorers.times import to_us

VAD_RATE = 16000


@dataclass(frozen=True)
class TreeInputs:
    root: Path
    manifest: ExportManifest
    manifest_sha256: str
    receipt: AsrReceipt
    receipt_sha256: str


def id_key(sample_id: str) -> tuple[int, int | str]:
    """Order by numeric id within a subset (ruling 10); non-numeric ids sort after, by text."""
    tail = sample_id.rsplit("/", 1)[-1]
    return (0, int(tail)) if tail.isdigit() else (1, tail)


def subset_key(subset: str) -> tuple[int, str]:
    """Order subsets as the dataset lists them (V10_SUBSETS), unknown ones last."""
    return (V10_SUBSETS.index(subset) if subset in V10_SUBSETS else len(V10_SUBSETS), subset)


def load_manifest(tree: Path) -> tuple[ExportManifest, str]:
    """The v1.0 export manifest (``fdb-export-1``) and its sha256."""
    path = tree / "manifest.json"
    fix = "point --tree at a v1.0 reference export"
    manifest = ExportManifest.load(path, fix)
    if manifest is None:
        raise FdbError(f"{path} is missing", fix)
    if manifest.dataset != "v1.0":
        raise FdbError(f"{path} is a {manifest.dataset} export, not v1.0")
    return manifest, sha256_file(path)


def load_tree(tree: Path) -> TreeInputs:
    """Manifest and ASR receipt; refuses a tree without asr.json or with a stale receipt."""
    manifest, manifest_sha = load_manifest(tree)
    asr_path = tree / "asr.json"
    receipt = AsrReceipt.load(asr_path)
    if receipt is None:
        raise FdbError(
            f"{asr_path} is missing: the tree has not been transcribed",
            "run the asr phase on this tree first",
        )
    if receipt.manifest_sha256 != manifest_sha:
        raise FdbError(
            f"{asr_path} was written for another manifest.json "
            f"({receipt.manifest_sha256[:12]}… vs {manifest_sha[:12]}…)",
            "rerun the asr phase on this tree",
        )
    return TreeInputs(tree, manifest, manifest_sha, receipt, sha256_file(asr_path))


def window_us(sample: ExportSample) -> int:
    """T in microseconds, from the manifest's T_s (else input_samples / 16000)."""
    if sample.T_s is not None:
        return to_us(sample.T_s)
    if sample.input_samples is not None:
        return to_us(sample.input_samples / VAD_RATE)
    raise SampleError(sample.sample_id, "manifest.json gives neither T_s nor input_samples")


def check_fresh(inputs: TreeInputs, sample: ExportSample) -> AsrSampleReceipt:
    """The receipt entry of an eligible sample, after checking its files are the ones it names."""
    entry = next((e for e in inputs.receipt.samples if e.sample_id == sample.sample_id), None)
    sid, folder = sample.sample_id, inputs.root / sample.subset / sample.id
    if entry is None or entry.status != "ok":
        why = "has no entry" if entry is None else f"has status {entry.status} ({entry.error})"
        raise SampleError(sid, f"asr.json {why}", "rerun the asr phase (with --retry-failed)")
    for name, want in (
        ("output.json", entry.output_json_sha256),
        ("output.wav", entry.output_wav_sha256),
    ):
        path = folder / name
        if not path.exists():
            raise SampleError(sid, f"{name} is missing", path=str(path))
        actual = sha256_file(path)
        if actual != want:
            raise SampleError(
                sid,
                f"{name} differs from asr.json (stale transcript)",
                "rerun the asr phase on this tree",
                str(path),
            )
        if sample.files.get(name) not in (None, actual):
            raise SampleError(
                sid, f"{name} differs from manifest.json", "re-export the tree", str(path)
            )
    annotation = V10_ANNOTATION[V10_TASK[sample.subset]]
    if annotation and annotation in sample.files:
        path = folder / annotation
        if not path.exists() or sha256_file(path) != sample.files[annotation]:
            raise SampleError(
                sid, f"{annotation} is missing or differs from manifest.json", path=str(path)
            )
    check_window_length(sample, folder / "output.wav")
    return entry


def _length_matches(sample: ExportSample, frames: int, rate: int) -> bool:
    if rate == VAD_RATE and sample.input_samples:
        return frames == sample.input_samples
    return to_us(frames / rate) == window_us(sample)


def _wrong_length(sample: ExportSample, path: Path, frames: int, rate: int) -> SampleError:
    return SampleError(
        sample.sample_id,
        f"output.wav holds {frames} samples at {rate} Hz, not T = {window_us(sample) / 1e6} s",
        "re-export the window",
        str(path),
    )


def check_window_length(sample: ExportSample, path: Path) -> None:
    """From the WAV header: output.wav holds exactly T seconds (input_samples at 16 kHz)."""
    try:
        info = sf.info(str(path))
    except Exception as exc:  # soundfile raises several error types for a bad header
        raise SampleError(
            sample.sample_id, f"unreadable WAV ({exc})", "re-export the window", str(path)
        ) from exc
    if not _length_matches(sample, int(info.frames), int(info.samplerate)):
        raise _wrong_length(sample, path, int(info.frames), int(info.samplerate))


def read_sample_json(sample: ExportSample, folder: Path, name: str) -> Any:
    """A sample's JSON file; missing or malformed raises SampleError naming the sample."""
    path = folder / name
    if not path.exists():
        raise SampleError(sample.sample_id, f"{name} is missing", path=str(path))
    try:
        return read_json(path)
    except (ValueError, UnicodeDecodeError) as exc:
        fix = (
            "delete it and rerun the asr phase (`python -m fdb asr --run-name RUN`)"
            if name == "output.json"
            else "re-export the tree (`python -m fdb generate --run-name RUN --export-only`)"
        )
        raise SampleError(
            sample.sample_id, f"{name} is not valid UTF-8 JSON ({exc})", fix, str(path)
        ) from exc


def read_native_window(sample: ExportSample, folder: Path) -> Audio:
    """output.wav at its own rate, after checking it holds exactly T seconds of samples."""
    path = folder / "output.wav"
    audio = read_wav(path, sample.sample_id)
    if not _length_matches(sample, len(audio.samples), audio.rate):
        raise _wrong_length(sample, path, len(audio.samples), audio.rate)
    return audio


def read_window(sample: ExportSample, folder: Path) -> np.ndarray:
    """output.wav as 16 kHz float32, after checking it holds exactly T seconds of samples."""
    audio = read_native_window(sample, folder)
    return (
        audio.samples if audio.rate == VAD_RATE else resample(audio.samples, audio.rate, VAD_RATE)
    )
