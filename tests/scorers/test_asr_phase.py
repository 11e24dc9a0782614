"""The v1.0 ASR phase with the real faster-whisper backend on reference windows: official
output.json schema, the interruption cut at R, a corrupt WAV recorded as failed, rerun skips."""

from __future__ import annotations

import shutil

import numpy as np

from benchmarks.support.treebuild import FixedSegments, V10Tree, turn_json
from fdb.io import read_json, sha256_file
from fdb.models.asr import Transcript, Word
from scorers.asr_phase import official_transcript, run_v10_asr
from scorers.v10_unified import score_unified


class Counting:
    """Wraps a backend and records the length of every clip it transcribes."""

    def __init__(self, inner):
        self.inner, self.identity, self.calls = inner, inner.identity, []

    def transcribe(self, samples: np.ndarray) -> Transcript:
        self.calls.append(len(samples))
        return self.inner.transcribe(samples)


def build(root, reference):
    tree = V10Tree(root)
    smooth, inter = (
        reference / "smooth_turn_taking_example/1",
        reference / "user_interruption_example/1",
    )
    folder = tree.add("candor_turn_taking", "1", 10.4, annotation=turn_json(2.01))
    shutil.copyfile(smooth / "output.wav", folder / "output.wav")
    folder = tree.add(
        "synthetic_user_interruption", "1", 28.16, annotation=read_json(inter / "interrupt.json")
    )
    shutil.copyfile(inter / "output.wav", folder / "output.wav")
    folder = tree.add("candor_turn_taking", "2", 2.0, annotation=turn_json(1.0))
    (folder / "output.wav").write_bytes(b"RIFF\x00\x00not a wav at all")
    tree.add("candor_turn_taking", "3", 2.0, eligible=False, reasons=["pacing"])
    for s in tree.samples:
        s.files.pop("output.wav", None)  # the files were replaced after add()
    tree.manifest()
    return tree


def test_asr_phase_real_whisper(tmp_path, reference, whisper):
    tree = build(tmp_path, reference)
    asr = Counting(whisper)
    seen = []
    receipt = run_v10_asr(
        tmp_path, asr, progress=lambda sid, done, total: seen.append((sid, done, total))
    )
    by_id = {e.sample_id: e for e in receipt.samples}
    assert [e.status for e in receipt.samples] == ["ok", "ok", "failed", "skipped"]
    assert len(seen) == 4 and seen[-1][1:] == (4, 4)
    assert (
        "candor_turn_taking/2" in by_id["candor_turn_taking/2"].error
        and "unreadable WAV" in by_id["candor_turn_taking/2"].error
    )
    assert not (tmp_path / "candor_turn_taking/2/output.json").exists()

    turn = read_json(tmp_path / "candor_turn_taking/1/output.json")
    assert turn["text"] == " ".join(c["text"] for c in turn["chunks"]) and len(turn["chunks"]) >= 15
    assert 3.0 <= turn["chunks"][0]["timestamp"][0] <= 3.5  # Parakeet: 3.36, Silero onset 3.424

    inter = read_json(tmp_path / "synthetic_user_interruption/1/output.json")
    starts = [c["timestamp"][0] for c in inter["chunks"]]
    entry = by_id["synthetic_user_interruption/1"]
    assert entry.cut_at_s == 13.144 and min(starts) >= 13.144
    assert 16.9 <= starts[0] <= 17.4  # Parakeet: 17.224, Silero onset 17.312
    assert asr.calls[1] == 450560 - int(13.144 * 16000)  # cut at sample int(R * sr)
    assert entry.output_json_sha256 == sha256_file(
        tmp_path / "synthetic_user_interruption/1/output.json"
    )
    doc = read_json(tmp_path / "asr.json")
    assert doc["schema"] == "fdb-asr-1" and doc["manifest_sha256"] == sha256_file(
        tmp_path / "manifest.json"
    )
    assert doc["backend"]["settings"]["vad_filter"] is True

    # rerun: ok samples with unchanged output.wav and a failed one without --retry-failed are
    # skipped
    asr.calls.clear()
    again = run_v10_asr(tmp_path, asr)
    assert asr.calls == [] and again.samples == receipt.samples
    run_v10_asr(tmp_path, asr, retry_failed=True)
    assert asr.calls == []  # the corrupt file fails while reading, before the backend
    # a replaced output.wav is transcribed again; then the tree scores
    shutil.copyfile(
        reference / "smooth_turn_taking_example/1/output.wav",
        tmp_path / "candor_turn_taking/2/output.wav",
    )
    third = run_v10_asr(tmp_path, asr)
    assert len(asr.calls) == 1 and [e.status for e in third.samples] == [
        "ok",
        "ok",
        "ok",
        "skipped",
    ]
    tree.samples[2].T_s = 10.4
    tree.samples[2].input_samples = 166400
    tree.manifest()
    run_v10_asr(tmp_path, asr)  # the manifest changed: entries revalidated by hash, nothing redone
    assert len(asr.calls) == 1
    result = score_unified(tmp_path, FixedSegments())
    m = result.subsets["candor_turn_taking"].metrics  # first words near 3.3 s: E 2.01 and E 1.0
    assert (m.response_rate_2s.count, m.response_rate_5s.count, m.early_start_rate.count) == (
        1,
        2,
        0,
    )


def test_official_transcript_shift_and_nulls():
    t = Transcript("a b", [Word("a", 0.0, 0.3), Word("b", 0.5, None)])
    obj = official_transcript(t, 10.530666666666667).dump()
    assert obj == {
        "text": "a b",
        "chunks": [
            {"text": "a", "timestamp": [10.530667, 10.830667]},
            {"text": "b", "timestamp": [11.030667, None]},
        ],
    }
    assert official_transcript(Transcript("", [])).dump() == {"text": "", "chunks": []}


def test_first_word_after_five_seconds_of_silence(reference, whisper, silero):
    """5 s of silence, then the reference reply: with faster-whisper's VAD filter (200 ms
    padding) the first word starts at most ~0.2 s before Silero's speech onset."""
    from fdb.audio import read_wav

    speech = read_wav(reference / "smooth_turn_taking_example/1/output.wav").samples[3 * 16000 :]
    window = np.concatenate([np.zeros(5 * 16000, np.float32), speech])
    onset = silero.segments(window)[0][0]
    first = whisper.transcribe(window).words[0].start
    assert 5.3 < onset < 5.5
    assert onset - 0.3 <= first <= onset + 0.1
