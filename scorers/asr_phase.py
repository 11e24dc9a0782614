"""The v1.0 ASR phase: transcribe every eligible window into the official output.json schema.

For each eligible sample of ``manifest.json`` it reads ``<subset>/<id>/output.wav`` (16 kHz;
another rate is resampled), transcribes it with the injected backend and writes
``output.json`` = ``{"text": words joined by single spaces, "chunks": [{"text", "timestamp":
[start, end]}]}`` atomically. For ``synthetic_user_interruption`` the audio is cut at sample
int(R * 16000), R = interrupt.json[0]["timestamp"][1], and R is added back to every word time,
so every word starts at or after R (official asr.py rule, docs/formats.md "ASR (v1.0)").

The receipt ``asr.json`` (``fdb-asr-1``) records the backend identity, the manifest's sha256
and per sample the status, error and the sha256 of the output.wav read and output.json
written. It is rewritten after every sample, so a killed phase resumes. A rerun skips samples
whose entry is ok and whose output.wav and output.json still match it; a failed sample with an
unchanged output.wav is retried only with ``retry_failed``. A different backend identity
redoes every sample.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from fdb.audio import read_wav, resample
from fdb.errors import SampleError
from fdb.io import (
    atomic_write_json,
    atomic_write_text,
    dumps_json,
    read_json,
    sha256_bytes,
    sha256_file,
)
from fdb.models.asr import ASR_RATE, AsrBackend, Transcript
from fdb.models.scoring import BackendChoice, load_backend
from fdb.provenance import current
from fdb.records import (
    AsrReceipt,
    AsrSampleReceipt,
    ExportSample,
    OfficialTranscript,
    TranscriptChunk,
)
from scorers.v10_tree import load_manifest

INTERRUPTION_SUBSET = "synthetic_user_interruption"
Progress = Callable[[str, int, int], None]


def official_transcript(transcript: Transcript, offset_s: float = 0.0) -> OfficialTranscript:
    """The official output.json record; word times shifted by ``offset_s`` (rounded to 1 µs)."""
    chunks = [
        TranscriptChunk(
            text=word.text,
            timestamp=(
                round(offset_s + word.start, 6),
                None if word.end is None else round(offset_s + word.end, 6),
            ),
        )
        for word in transcript.words
    ]
    return OfficialTranscript(text=" ".join(c.text for c in chunks), chunks=chunks)


def interrupt_end(sample: ExportSample, folder: Path) -> float:
    """R = interrupt.json[0]["timestamp"][1], after checking the copy against the manifest."""
    path = folder / "interrupt.json"
    if not path.exists():
        raise SampleError(sample.sample_id, "interrupt.json is missing", path=str(path))
    want = sample.files.get("interrupt.json")
    if want and sha256_file(path) != want:
        raise SampleError(
            sample.sample_id, "interrupt.json differs from manifest.json", path=str(path)
        )
    try:
        value = read_json(path)[0]["timestamp"][1]
        return float(value)
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise SampleError(
            sample.sample_id, f"interrupt.json has no [0]['timestamp'][1] ({exc})"
        ) from exc


def transcribe_sample(
    asr: AsrBackend, sample: ExportSample, folder: Path
) -> tuple[OfficialTranscript, float | None]:
    """(output.json record, cut_at_s) for one sample; cut at R for user interruption."""
    audio = read_wav(folder / "output.wav", sample.sample_id)
    samples = (
        audio.samples if audio.rate == ASR_RATE else resample(audio.samples, audio.rate, ASR_RATE)
    )
    if sample.subset != INTERRUPTION_SUBSET:
        return official_transcript(asr.transcribe(samples)), None
    R = interrupt_end(sample, folder)
    cut = samples[int(R * ASR_RATE) :]
    return official_transcript(asr.transcribe(np.ascontiguousarray(cut)), R), R


def _reusable(
    entry: AsrSampleReceipt | None, wav_sha: str, folder: Path, retry_failed: bool
) -> bool:
    if entry is None or entry.output_wav_sha256 != wav_sha:
        return False
    if entry.status == "failed":
        return not retry_failed
    out = folder / "output.json"
    return entry.status == "ok" and out.exists() and sha256_file(out) == entry.output_json_sha256


def process_sample(
    asr: AsrBackend,
    tree: Path,
    sample: ExportSample,
    previous: AsrSampleReceipt | None,
    retry_failed: bool,
) -> AsrSampleReceipt:
    """One sample's receipt entry: skipped (ineligible), reused, transcribed, or failed."""
    sid = sample.sample_id
    if not sample.eligible:
        return AsrSampleReceipt(
            sample_id=sid,
            status="skipped",
            error="ineligible: " + "; ".join(sample.reasons or ["unspecified"]),
        )
    folder = tree / sample.subset / sample.id
    wav = folder / "output.wav"
    wav_sha = sha256_file(wav) if wav.exists() else None
    if wav_sha and _reusable(previous, wav_sha, folder, retry_failed):
        return previous
    want = sample.files.get("output.wav")
    try:
        if wav_sha and want and wav_sha != want:
            raise SampleError(sid, "output.wav differs from manifest.json", path=str(wav))
        obj, cut = transcribe_sample(asr, sample, folder)
    except Exception as exc:  # one bad sample is recorded; the others continue
        (folder / "output.json").unlink(missing_ok=True)
        message = (
            exc.one_line()
            if isinstance(exc, SampleError)
            else f"{sid}: {type(exc).__name__}: {exc}"
        )
        return AsrSampleReceipt(
            sample_id=sid, status="failed", error=message, output_wav_sha256=wav_sha
        )
    text = dumps_json(obj.dump())
    atomic_write_text(folder / "output.json", text)
    return AsrSampleReceipt(
        sample_id=sid,
        status="ok",
        cut_at_s=cut,
        output_wav_sha256=wav_sha,
        output_json_sha256=sha256_bytes(text.encode("utf-8")),
        words=len(obj.chunks),
    )


def previous_entries(tree: Path, asr: AsrBackend, receipt_cls=AsrReceipt) -> dict:
    """Entries of an existing asr.json (a ``receipt_cls``) written by the same backend identity
    (else none)."""
    old = receipt_cls.load(tree / "asr.json")
    if old is None or old.backend != asr.identity.model_dump(mode="json"):
        return {}
    return {e.sample_id: e for e in old.samples}


def default_asr() -> AsrBackend:
    """The embedded scoring ASR: Whisper tiny.en with faster-whisper's VAD filter (200 ms
    padding), which keeps first-word starts after long silences at most about the padding early
    (``fdb.models.scoring``'s ``faster-whisper`` choice; docs/benchmarks.md#embedded-asr)."""
    return load_backend("asr", BackendChoice(name="faster-whisper"))


def run_v10_asr(
    tree: Path,
    asr: AsrBackend | None = None,
    progress: Progress | None = None,
    retry_failed: bool = False,
) -> AsrReceipt:
    """Transcribe a v1.0 reference tree; returns the receipt it wrote to ``tree/asr.json``.

    ``asr`` defaults to ``default_asr()``; ``progress(sample_id, done, total)`` is called after
    each sample.
    """
    tree = Path(tree)
    asr = asr if asr is not None else default_asr()
    manifest, manifest_sha = load_manifest(tree)
    return transcribe_tree(
        tree,
        asr,
        manifest.samples,
        manifest_sha,
        previous_entries(tree, asr),
        process_sample,
        AsrReceipt,
        progress,
        retry_failed,
    )


def transcribe_tree(
    tree: Path,
    asr: AsrBackend,
    samples: list[ExportSample],
    manifest_sha: str,
    previous: dict,
    process,
    receipt_cls,
    progress: Progress | None,
    retry_failed: bool,
):
    """The resumable driver both ASR phases share: ``process(asr, tree, sample, previous_entry,
    retry_failed)`` per sample in manifest order; ``tree/asr.json`` (a ``receipt_cls``) is
    rewritten after every changed entry, so a killed run resumes where it stopped."""
    entries = dict(previous)
    prov = current().model_dump(mode="json")
    receipt = None
    total = len(samples)
    for done, sample in enumerate(samples, start=1):
        entry = process(asr, tree, sample, previous.get(sample.sample_id), retry_failed)
        changed = entries.get(sample.sample_id) != entry
        entries[sample.sample_id] = entry
        if changed or done == total:
            receipt = _write_receipt(tree, asr, manifest_sha, samples, entries, receipt_cls, prov)
        if progress:
            progress(sample.sample_id, done, total)
    return receipt or _write_receipt(tree, asr, manifest_sha, samples, entries, receipt_cls, prov)


def _write_receipt(
    tree: Path,
    asr: AsrBackend,
    manifest_sha: str,
    samples: list[ExportSample],
    entries: dict,
    receipt_cls,
    provenance: dict,
):
    ordered = [entries[s.sample_id] for s in samples if s.sample_id in entries]
    receipt = receipt_cls(
        backend=asr.identity.model_dump(mode="json"),
        manifest_sha256=manifest_sha,
        samples=ordered,
        provenance=provenance,
    )
    atomic_write_json(tree / "asr.json", receipt.dump())
    return receipt
