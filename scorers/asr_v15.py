"""The v1.5 ASR phase: transcribe the four windows of every eligible pair.

For each eligible pair of ``reference-manifest.json`` (a v1.5 ``fdb-export-1`` manifest) it
reads ``<category>/<id>/{input.wav, clean_input.wav, output.wav, clean_output.wav}`` (16 kHz;
another rate is resampled) and writes ``input.json``, ``clean_input.json``, ``output.json`` and
``clean_output.json`` next to them in the official schema (``{"text", "chunks": [{"text",
"timestamp": [start, end]}]}``, whole files, no cut): the inputs the v1.5 behaviour judge reads.

The receipt ``asr.json`` (``fdb-v1.5-asr-1``, ``fdb.records.V15AsrReceipt``) records the backend
identity, the sha256 of ``reference-manifest.json`` and, per pair and per WAV, the status, error
and the sha256 of the WAV read and the JSON written. It is rewritten after every pair that
changed, so a killed phase resumes. A rerun reuses a file whose entry is ok and whose WAV and
JSON still match it, and a failed file with an unchanged WAV unless ``retry_failed``; a
different backend identity redoes every file. A pair is ok when its four files are.
"""

from __future__ import annotations

from pathlib import Path

from fdb.audio import read_wav, resample
from fdb.errors import FdbError, SampleError
from fdb.io import (
    atomic_write_text,
    dumps_json,
    sha256_bytes,
    sha256_file,
)
from fdb.models.asr import ASR_RATE, AsrBackend
from fdb.records import (
    ExportSample,
    V15AsrFile,
    V15AsrPair,
    V15AsrReceipt,
    load_v15_manifest,
)
from scorers.asr_phase import (
    Progress,
    default_asr,
    official_transcript,
    previous_entries,
    transcribe_tree,
)

V15_MANIFEST = "reference-manifest.json"
TRANSCRIBED = ("input.wav", "clean_input.wav", "output.wav", "clean_output.wav")


def transcript_name(wav_name: str) -> str:
    """``input.wav`` -> ``input.json`` (the official v1.5 names)."""
    return wav_name[: -len(".wav")] + ".json"


def _reusable(
    entry: V15AsrFile | None, wav_sha: str | None, json_path: Path, retry_failed: bool
) -> bool:
    if entry is None or wav_sha is None or entry.wav_sha256 != wav_sha:
        return False
    if entry.status == "failed":
        return not retry_failed
    return json_path.exists() and sha256_file(json_path) == entry.json_sha256


def transcribe_file(
    asr: AsrBackend,
    sample: ExportSample,
    folder: Path,
    name: str,
    previous: V15AsrFile | None,
    retry_failed: bool,
) -> V15AsrFile:
    """One WAV of a pair: reused, transcribed into ``<stem>.json``, or failed (JSON removed)."""
    wav, out = folder / name, folder / transcript_name(name)
    wav_sha = sha256_file(wav) if wav.exists() else None
    if _reusable(previous, wav_sha, out, retry_failed):
        return previous
    try:
        want = sample.files.get(name)
        if wav_sha and want and wav_sha != want:
            raise SampleError(
                sample.sample_id, f"{name} differs from {V15_MANIFEST}", path=str(wav)
            )
        audio = read_wav(wav, sample.sample_id)
        samples = (
            audio.samples
            if audio.rate == ASR_RATE
            else resample(audio.samples, audio.rate, ASR_RATE)
        )
        obj = official_transcript(asr.transcribe(samples))
    except Exception as exc:  # one bad file is recorded; the others continue
        out.unlink(missing_ok=True)
        message = exc.one_line() if isinstance(exc, FdbError) else f"{type(exc).__name__}: {exc}"
        if not message.startswith(sample.sample_id):
            message = f"{sample.sample_id}: {name}: {message}"
        return V15AsrFile(status="failed", error=message, wav_sha256=wav_sha)
    text = dumps_json(obj.dump())
    atomic_write_text(out, text)
    return V15AsrFile(
        status="ok",
        wav_sha256=wav_sha,
        json_sha256=sha256_bytes(text.encode("utf-8")),
        words=len(obj.chunks),
    )


def process_pair(
    asr: AsrBackend,
    tree: Path,
    sample: ExportSample,
    previous: V15AsrPair | None,
    retry_failed: bool,
) -> V15AsrPair:
    """A pair's receipt entry: skipped (ineligible), or its four files' entries."""
    if not sample.eligible:
        return V15AsrPair(
            sample_id=sample.sample_id,
            status="skipped",
            error="ineligible: " + "; ".join(sample.reasons or ["unspecified"]),
        )
    folder = tree / sample.subset / sample.id
    old = previous.files if previous is not None else {}
    files = {
        name: transcribe_file(asr, sample, folder, name, old.get(name), retry_failed)
        for name in TRANSCRIBED
    }
    failed = [f.error for f in files.values() if f.status == "failed"]
    return V15AsrPair(
        sample_id=sample.sample_id,
        status="failed" if failed else "ok",
        error="; ".join(e for e in failed if e) or None,
        files=files,
    )


def run_v15_asr(
    tree: Path,
    asr: AsrBackend | None = None,
    progress: Progress | None = None,
    retry_failed: bool = False,
) -> V15AsrReceipt:
    """Transcribe a v1.5 ``reference-audio`` tree; returns the receipt written to ``tree/asr.json``.

    ``asr`` defaults to ``default_asr()``; ``progress(sample_id, done, total)`` runs after each
    pair.
    """
    tree = Path(tree)
    asr = asr if asr is not None else default_asr()
    manifest, manifest_sha = load_v15_manifest(tree)
    return transcribe_tree(
        tree,
        asr,
        manifest.samples,
        manifest_sha,
        previous_entries(tree, asr, V15AsrReceipt),
        process_pair,
        V15AsrReceipt,
        progress,
        retry_failed,
    )
