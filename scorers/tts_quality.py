"""Seed-TTS quality of generated speech: WER as the official ``run_wer.py`` computes it, speaker
similarity to the prompt wav, and MOS (docs/tts.md).

WER (per utterance, reference = the row's target text, hypothesis = the ASR text of the
generated wav): remove every character of ``string.punctuation`` and of Chinese punctuation
(zhon's ``hanzi.punctuation``) except the ASCII apostrophe; EN is lower-cased; ZH is split into
characters (``fdb.text.seed_tts_normalize``); ``jiwer.process_words`` aligns the words
(``fdb.text.align_words``) and WER = (S + D + I) / reference words. An
empty hypothesis is all deletions (WER 1). The headline is the **mean of per-utterance WER**
(x100, as ``average_wer.py``); corpus WER (sum of errors / sum of reference words), the count of
utterances above 50% and the mean without them are reported beside it. A request without audio
counts with every word deleted (WER 1) beside others that have audio; when no request of the
scored level returned audio, quality is not measured: every WER, SIM and MOS is null (never
"WER 100%" for speech that was never received) and a note says why.

SIM: cosine of the speaker embeddings of the generated wav and the prompt wav, both at 16 kHz;
mean over utterances, 3 decimals. Only WavLM-large ECAPA (a local checkpoint) is the official
SIM; resemblyzer is labeled a proxy.

ASR: Whisper-large-v3 from a local CTranslate2 directory (sha256 of its model.bin checked) when
given, else the embedded faster-whisper tiny.en, labeled as such: its WER is not comparable to
published Seed-TTS numbers. The embedded ASR is English-only, so a ZH row has no WER with it.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel

from fdb.audio import read_wav
from fdb.errors import FdbError
from fdb.models.asr import FasterWhisperAsr
from fdb.models.mos import load_mos
from fdb.models.speaker import load_speaker
from fdb.records.tts import QualitySummary, UtteranceQuality, WerCounts
from fdb.text import align_words, seed_tts_normalize

OUTLIER_WER = 0.5


def wer_counts(reference: str, hypothesis: str, lang: str) -> WerCounts | None:
    """Alignment counts of one utterance; None when the normalized reference is empty."""
    counts = align_words(
        seed_tts_normalize(reference, lang), seed_tts_normalize(hypothesis or "", lang)
    )
    if counts is None:
        return None
    return WerCounts(
        words=counts.reference_words,
        substitutions=counts.substitutions,
        deletions=counts.deletions,
        insertions=counts.insertions,
    )


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, dtype=np.float64).reshape(-1), np.asarray(b, dtype=np.float64).reshape(-1)
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def aggregate_wer(rows: list[UtteranceQuality]) -> dict[str, float | int | None]:
    """Mean of per-utterance WER (the headline), corpus WER, outliers, mean without outliers."""
    scored = [r for r in rows if r.counts is not None]
    if not scored:
        return {
            "evaluated": 0,
            "wer_mean_pct": None,
            "wer_corpus_pct": None,
            "wer_outliers": None,
            "wer_mean_excl_outliers_pct": None,
        }
    wers = [r.counts.wer for r in scored]
    kept = [w for w in wers if w <= OUTLIER_WER]
    corpus = sum(r.counts.errors for r in scored) / sum(r.counts.words for r in scored)
    return {
        "evaluated": len(scored),
        "wer_mean_pct": round(100.0 * sum(wers) / len(wers), 3),
        "wer_corpus_pct": round(100.0 * corpus, 3),
        "wer_outliers": len(wers) - len(kept),
        "wer_mean_excl_outliers_pct": round(100.0 * sum(kept) / len(kept), 3) if kept else None,
    }


def asr_label(identity: dict[str, object] | None) -> str | None:
    if identity is None:
        return None
    name = str(identity.get("name"))
    if "large-v3" in name:
        return f"Whisper-large-v3 ({name})"
    return f"embedded ASR {name}: not Whisper-large-v3, not comparable to published Seed-TTS WER"


def sim_label(identity: dict[str, object] | None) -> str | None:
    if identity is None:
        return None
    name = str(identity.get("name"))
    return (
        f"SIM ({name})"
        if name == "wavlm-large-ecapa"
        else f"SIM proxy ({name}, not WavLM-large ECAPA)"
    )


def mos_label(identity: dict[str, object] | None) -> str | None:
    if identity is None:
        return None
    name = str(identity.get("name"))
    return "UTMOS" if name == "utmos" else f"{name} (not UTMOS)"


def summarize(
    rows: list[UtteranceQuality],
    lang: str,
    expected: int,
    backends: dict[str, dict | None],
    notes: list[str],
) -> QualitySummary:
    sims = [r.sim for r in rows if r.sim is not None]
    moses = [r.mos for r in rows if r.mos is not None]
    return QualitySummary(
        lang=lang,
        expected=expected,
        **aggregate_wer(rows),
        sim_mean=_round(sum(sims) / len(sims), 3) if sims else None,
        sim_n=len(sims),
        mos_mean=_round(sum(moses) / len(moses), 3) if moses else None,
        mos_n=len(moses),
        asr=backends.get("asr"),
        asr_label=asr_label(backends.get("asr")),
        speaker=backends.get("speaker"),
        sim_label=sim_label(backends.get("speaker")),
        mos_backend=backends.get("mos"),
        mos_label=mos_label(backends.get("mos")),
        notes=notes,
    )


class QualityJob(BaseModel):
    """One generated utterance to score (``wav`` None: the request produced no audio)."""

    id: str
    lang: str
    reference: str
    wav: str | None
    prompt_wav: str
    note: str | None = None


def load_backends(
    asr_model: str | None = None,
    asr_sha256: str | None = None,
    speaker_checkpoint: str | None = None,
    speaker_sha256: str | None = None,
    utmos_checkpoint: str | None = None,
    utmos_sha256: str | None = None,
    sim: bool = True,
    mos: bool = True,
):
    """(asr, speaker or None, mos or None): Whisper-large-v3 from a local CTranslate2 directory
    when ``asr_model`` is given (its model.bin sha256 required), else the embedded tiny.en."""
    if asr_model:
        if not asr_sha256:
            raise FdbError(
                "--asr-model needs --asr-model-sha256 (the sha256 of its model.bin)",
                "pass the hash of the checkpoint you mean to use",
            )
        asr = FasterWhisperAsr(model_dir=asr_model, expected_sha256=asr_sha256, cpu_threads=2)
        asr.identity = asr.identity.model_copy(update={"name": "faster-whisper/whisper-large-v3"})
    else:
        asr = FasterWhisperAsr(cpu_threads=2)
    speaker = moser = None
    if sim:
        speaker = load_speaker(speaker_checkpoint, speaker_sha256)
    if mos:
        moser = load_mos(utmos_checkpoint, utmos_sha256)
    return asr, speaker, moser


def _wav16k(path: str) -> np.ndarray:
    return read_wav(path).resample(16000).samples


def score_utterance(
    job: QualityJob, asr, speaker, mos, english_only: bool = True
) -> UtteranceQuality:
    row = UtteranceQuality(id=job.id, lang=job.lang, reference=job.reference, note=job.note)
    if job.wav is None:
        row.counts = wer_counts(job.reference, "", job.lang)  # no audio: every word deleted
        row.wer = None if row.counts is None else round(row.counts.wer, 6)
        return row
    audio = _wav16k(job.wav)
    row.audio_s = round(len(audio) / 16000.0, 3)
    if job.lang == "zh" and english_only:
        row.note = "no WER: the ASR is English-only (ZH needs paraformer-zh, not bundled)"
    else:
        row.hypothesis = asr.transcribe(audio).text
        row.counts = wer_counts(job.reference, row.hypothesis, job.lang)
        row.wer = None if row.counts is None else round(row.counts.wer, 6)
    if speaker is not None and len(audio) >= 1600:
        row.sim = round(cosine(speaker.embed(audio), speaker.embed(_wav16k(job.prompt_wav))), 6)
    if mos is not None and len(audio) >= 1600:
        row.mos = round(float(mos.score(audio)), 4)
    return row


def score_quality(
    jobs: list[QualityJob], asr, speaker=None, mos=None, progress=None
) -> tuple[list[UtteranceQuality], QualitySummary]:
    """Score every job; ``progress(done, total)`` after each. One language per call."""
    langs = sorted({job.lang for job in jobs}) or ["en"]
    rows = []
    for number, job in enumerate(jobs, start=1):
        rows.append(score_utterance(job, asr, speaker, mos))
        if progress is not None:
            progress(number, len(jobs))
    backends = {
        "asr": asr.identity.model_dump(mode="json"),
        "speaker": None if speaker is None else speaker.identity.model_dump(mode="json"),
        "mos": None if mos is None else mos.identity.model_dump(mode="json"),
    }
    notes = [] if speaker is not None else ["SIM off (--no-sim)"]
    notes += [] if mos is not None else ["MOS off (--no-mos)"]
    missing = sum(1 for job in jobs if job.wav is None)
    if jobs and missing == len(jobs):
        for row in rows:  # nothing was heard: nothing to measure
            row.counts = row.wer = None
        notes.append(
            f"not measured: none of the {missing} requests returned audio (see the failures under "
            "Serving)"
        )
    elif missing:
        notes.append(f"{missing} requests without audio count as all words deleted (WER 1)")
    return rows, summarize(rows, "+".join(langs), len(jobs), backends, notes)
