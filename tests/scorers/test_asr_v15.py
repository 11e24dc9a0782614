"""The v1.5 ASR phase with the real faster-whisper backend: four official-schema transcripts
per eligible pair, the receipt, a corrupt file recorded as failed, resumption per file."""

from __future__ import annotations

import numpy as np
import pytest

from fdb.audio import read_wav, wav_bytes
from fdb.errors import FdbError
from fdb.io import atomic_write_bytes, atomic_write_json, read_json, sha256_file
from fdb.records import V15_ASR_SCHEMA, ExportManifest, ExportSample
from scorers.asr_v15 import TRANSCRIBED, run_v15_asr, transcript_name
from tests.scorers.test_asr_phase import Counting


def build(root, reference):
    speech = read_wav(reference / "smooth_turn_taking_example/1/output.wav").samples
    clips = {
        "input.wav": speech[48000:96000],
        "clean_input.wav": speech[56000:96000],
        "output.wav": np.zeros(32000, np.float32),
        "clean_output.wav": speech[64000:96000],
    }
    tiny = {name: speech[48000:48800] for name in clips}  # under 0.1 s: the backend skips the model
    samples = []
    for category, sid, eligible in (
        ("user_interruption", "1", True),
        ("user_backchannel", "2", True),
        ("talking_to_other", "3", False),
    ):
        files = {}
        if eligible:
            for name, audio in (clips if sid == "1" else tiny).items():
                files[name] = sha256_file(
                    atomic_write_bytes(root / category / sid / name, wav_bytes(audio, 16000))
                )
        samples.append(
            ExportSample(
                sample_id=f"{category}/{sid}",
                subset=category,
                id=sid,
                eligible=eligible,
                reasons=[] if eligible else ["overlap: pacing"],
                files=files,
            )
        )
    (root / "user_backchannel/2/clean_output.wav").write_bytes(b"RIFF\x00\x00junk")
    samples[1].files.pop("clean_output.wav")
    atomic_write_json(
        root / "reference-manifest.json", ExportManifest(dataset="v1.5", samples=samples).dump()
    )
    return samples


def test_v15_asr_real_whisper(tmp_path, reference, whisper):
    build(tmp_path, reference)
    asr = Counting(whisper)
    receipt = run_v15_asr(tmp_path, asr)
    doc = read_json(tmp_path / "asr.json")
    assert doc["schema"] == V15_ASR_SCHEMA and doc["manifest_sha256"] == sha256_file(
        tmp_path / "reference-manifest.json"
    )
    assert doc["backend"]["name"] == "faster-whisper/whisper-tiny.en"
    assert [p.status for p in receipt.samples] == ["ok", "failed", "skipped"]
    assert len(asr.calls) == 7  # 4 + 3 (the corrupt file fails while reading)
    folder = tmp_path / "user_interruption/1"
    for name in TRANSCRIBED:
        obj = read_json(folder / transcript_name(name))
        assert set(obj) == {"text", "chunks"} and obj["text"] == " ".join(
            c["text"] for c in obj["chunks"]
        )
        entry = receipt.samples[0].files[name]
        assert entry.json_sha256 == sha256_file(folder / transcript_name(name))
        assert entry.wav_sha256 == sha256_file(folder / name)
    assert read_json(folder / "output.json") == {"text": "", "chunks": []}  # silence
    words = read_json(folder / "input.json")["chunks"]
    assert len(words) >= 5 and all(len(c["timestamp"]) == 2 for c in words)
    bad = receipt.samples[1]
    assert bad.files["clean_output.wav"].status == "failed" and "unreadable WAV" in bad.error
    assert (
        "user_backchannel/2" in bad.error
        and not (tmp_path / "user_backchannel/2/clean_output.json").exists()
    )
    assert (tmp_path / "user_backchannel/2/input.json").exists()

    asr.calls.clear()
    assert run_v15_asr(tmp_path, asr).samples == receipt.samples and asr.calls == []
    run_v15_asr(tmp_path, asr, retry_failed=True)
    assert asr.calls == []  # the retried file still fails while reading
    speech = read_wav(folder / "clean_input.wav").samples[:800]
    atomic_write_bytes(tmp_path / "user_backchannel/2/clean_output.wav", wav_bytes(speech, 16000))
    third = run_v15_asr(tmp_path, asr)
    assert len(asr.calls) == 1 and [p.status for p in third.samples] == ["ok", "ok", "skipped"]
    (folder / "input.json").write_text("{}")  # a damaged transcript is redone
    run_v15_asr(tmp_path, asr)
    assert len(asr.calls) == 2 and read_json(folder / "input.json")["chunks"]


class Silent:
    """A stand-in backend for tests about files, not words."""

    from fdb.models import BackendIdentity

    identity = BackendIdentity(kind="asr", name="silent-test-asr")

    def transcribe(self, samples):
        from fdb.models.asr import Transcript

        return Transcript("", [])


def test_v15_asr_refuses_changed_wav_and_other_trees(tmp_path, reference):
    samples = build(tmp_path, reference)
    atomic_write_bytes(
        tmp_path / "user_interruption/1/output.wav",
        wav_bytes(np.ones(16000, np.float32) * 0.1, 16000),
    )
    whisper = Silent()
    receipt = run_v15_asr(tmp_path, whisper)
    entry = receipt.samples[0].files["output.wav"]
    assert (
        entry.status == "failed"
        and "output.wav differs from reference-manifest.json" in entry.error
    )
    assert samples[0].sample_id in entry.error
    with pytest.raises(FdbError, match="reference-manifest.json is missing"):
        run_v15_asr(tmp_path / "user_interruption", whisper)
