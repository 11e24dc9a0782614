"""Seed-TTS quality: the official WER normalization and aggregation (exact), then the embedded
ASR, speaker and MOS backends on short Piper clips."""

from __future__ import annotations

import numpy as np
import pytest

from fdb.records.tts import UtteranceQuality
from scorers.tts_quality import (
    QualityJob,
    aggregate_wer,
    asr_label,
    cosine,
    score_quality,
    sim_label,
    wer_counts,
)


def test_wer_counts_and_aggregation():
    assert wer_counts("The cat sat.", "the cat sat", "en").wer == 0.0
    sub = wer_counts("The cat sat.", "the bat sat on", "en")
    assert (sub.substitutions, sub.deletions, sub.insertions, sub.words) == (1, 0, 1, 3)
    assert wer_counts("Two words", "", "en").deletions == 2
    assert wer_counts("?!", "anything", "en") is None
    assert wer_counts("你好", "你们", "zh").wer == 0.5

    def row(ref, hyp):
        counts = wer_counts(ref, hyp, "en")
        return UtteranceQuality(
            id=ref, lang="en", reference=ref, hypothesis=hyp, counts=counts, wer=counts.wer
        )

    rows = [
        row(
            "one two three four five six seven eight nine ten",
            "one two three four five six seven eight nine ten",
        ),
        row("hello there", "goodbye"),
        row("a b c d", "a b c x"),
    ]
    agg = aggregate_wer(rows)
    assert agg["evaluated"] == 3
    assert agg["wer_mean_pct"] == pytest.approx(
        100 * (0 + 1.0 + 0.25) / 3, abs=1e-3
    )  # mean of per-utterance WER
    assert agg["wer_corpus_pct"] == pytest.approx(100 * 3 / 16, abs=1e-3)  # (0 + 2 + 1) / 16 words
    assert agg["wer_outliers"] == 1 and agg["wer_mean_excl_outliers_pct"] == pytest.approx(12.5)
    assert aggregate_wer([])["wer_mean_pct"] is None


def test_labels_and_cosine():
    assert "not Whisper-large-v3" in asr_label({"name": "faster-whisper/whisper-tiny.en"})
    assert asr_label({"name": "faster-whisper/whisper-large-v3"}).startswith("Whisper-large-v3")
    assert "proxy" in sim_label({"name": "resemblyzer-ge2e"}) and "proxy" not in sim_label(
        {"name": "wavlm-large-ecapa"}
    )
    assert cosine(np.array([1.0, 0.0]), np.array([1.0, 1.0])) == pytest.approx(2**-0.5)


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    from fdb.audio import write_wav
    from fdb.models.tts import PiperTts

    tts = PiperTts(deterministic=True)
    folder = tmp_path_factory.mktemp("clips")
    paths = {}
    for name, text in (
        ("gen", "The quick brown fox jumps over the lazy dog."),
        ("prompt", "Please call Stella and ask her to bring these things."),
    ):
        paths[name] = str(write_wav(folder / f"{name}.wav", tts.synthesize(text), tts.rate))
    return paths


def test_score_quality_with_embedded_asr(clips):
    """The embedded ASR here; resemblyzer SIM and DNSMOS run in tests/runs/test_tts_bench.py."""
    from scorers.tts_quality import load_backends

    asr, speaker, mos = load_backends(sim=False, mos=False)
    jobs = [
        QualityJob(
            id="fox",
            lang="en",
            reference="The quick brown fox jumps over the lazy dog.",
            wav=clips["gen"],
            prompt_wav=clips["prompt"],
        ),
        QualityJob(
            id="lost",
            lang="en",
            reference="Nothing came back.",
            wav=None,
            prompt_wav=clips["prompt"],
            note="HTTP 500",
        ),
    ]
    rows, summary = score_quality(jobs, asr, speaker, mos)
    fox, lost = rows
    assert fox.wer is not None and fox.wer <= 0.3, fox.hypothesis
    assert fox.sim is None and fox.mos is None
    assert lost.wer == 1.0 and lost.hypothesis is None and lost.note == "HTTP 500"
    assert summary.expected == 2 and summary.evaluated == 2
    assert summary.wer_mean_pct == pytest.approx(100 * (fox.wer + 1.0) / 2, abs=1e-3)
    assert summary.sim_n == 0 and summary.sim_mean is None and summary.sim_label is None
    assert "not Whisper-large-v3" in summary.asr_label
    assert (
        any("without audio" in note for note in summary.notes)
        and "SIM off (--no-sim)" in summary.notes
    )
