"""Listening quality of every reply of a repeat (spec "Listening quality").

``score_listening(repeat_root, asr=None, mos=None, speaker=None)`` walks
``recording/shard-*/<category>/<id>/<variant>/`` (v1.5) and ``v10/recording/shard-*/<subset>/
<id>/main/`` (v1.0), cuts each reply (``scorers.listening_cut``), writes it as a 16 kHz WAV
under ``listening/wav/``, transcribes it, and scores:

- omission rate: omitted (deleted) reference words / reference words, pooled over the
  compared replies of a group; compared = status ``completed``, playout not cut, and a
  non-empty normalized transcript (cancelled or playout-cut replies are not compared: their
  transcript runs past the audio they played);
- WER: (S + D + I) / reference words of the same alignment, pooled over the same compared
  replies (short ones included, as the spec defines it);
- MOS of every reply of at least 3 s (backend labeled in ``backends.mos``); mean and p10;
- voice similarity of every reply of at least 3 s: 100 x cosine of the embedding of its middle
  3 s (written to ``voice-window/``) with the mean embedding of the same window of every other
  such reply of the repeat (both datasets); mean and p10 (``np.percentile``, linear).

A rerun reuses the ASR text and MOS of a reply whose WAV bytes (``wav_sha256``) are unchanged when
the previous ``scores.json`` records the same ASR (MOS) backend identity; voice similarity, which
pools every reply, is always recomputed.

A backend argument of None loads the default (``default_asr()``, DNSMOS via speechmos,
resemblyzer); ``False`` turns that metric off. A metric whose backend is off or missing is
null with a note, never 0. Groups: each v1.5 category and each v1.0 subset, plus one "all"
per dataset; never pooled across datasets.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fdb.audio import wav_bytes, write_wav
from fdb.dialects import dialect_for_trace_format
from fdb.errors import FdbError
from fdb.io import atomic_write_bytes, atomic_write_json, read_json, sha256_bytes
from fdb.models.mos import load_mos
from fdb.models.speaker import load_speaker
from fdb.provenance import current
from fdb.records.listening import (
    ListeningReplies,
    ListeningScores,
    ListeningSummary,
    ReplyRow,
    ReplyScores,
)
from fdb.session_records import read_trace
from scorers.asr_phase import default_asr
from scorers.listening_cut import REPLY_RATE, CutReply, cut_replies
from scorers.listening_stats import group_summaries
from scorers.listening_text import align

MIN_SCORED_S = 3.0
WINDOW_S = 3.0


def discover_sessions(root: Path) -> list[tuple[str, str, str, str, Path]]:
    """(dataset, category, id, variant, folder) of every recorded session, sorted."""
    found = []
    for dataset, rec in (("v1.5", root / "recording"), ("v1.0", root / "v10" / "recording")):
        for session in rec.glob("shard-*/*/*/*/session.json"):
            folder = session.parent
            found.append(
                (dataset, folder.parent.parent.name, folder.parent.name, folder.name, folder)
            )
    return sorted(found, key=lambda s: (s[0], s[1], _id_key(s[2]), s[3], str(s[4])))


def _id_key(sid: str) -> tuple[int, str]:
    return (int(sid), sid) if sid.isdigit() else (1 << 62, sid)


def _load(kind: str, given, notes: list[str]):
    if given is False:
        if not any(note.startswith(f"{kind}:") for note in notes):  # unless the caller said why
            notes.append(f"{kind}: turned off; its metrics are null")
        return None
    if given is not None:
        return given
    try:
        if kind == "asr":
            return default_asr()
        if kind == "mos":
            return load_mos()
        return load_speaker()
    except Exception as exc:  # a missing extra or an unloadable checkpoint: null with a note
        notes.append(f"{kind}: backend unavailable ({exc}); its metrics are null")
        return None


def session_replies(folder: Path) -> tuple[list[CutReply], int]:
    """The cut replies of one session and its output rate; ValueError naming the file when
    session.json lacks its trace_format or names an unknown one."""
    session = read_json(folder / "session.json")
    rate = int(session.get("output_rate") or 24000)
    try:
        profile = dialect_for_trace_format(str(session.get("trace_format")))
    except FdbError as exc:
        raise ValueError(f"{folder / 'session.json'}: {exc.message} ({exc.hint})") from None
    pcm = (folder / "output.pcm").read_bytes() if (folder / "output.pcm").exists() else b""
    trace = read_trace(folder / "trace.jsonl")
    return cut_replies(trace, pcm, profile, rate, session.get("turn_detection_requested")), rate


def _row(out: Path, key: tuple, reply: CutReply, audio: np.ndarray) -> ReplyRow:
    dataset, category, sid, variant, _folder = key
    rid = f"{dataset}/{category}/{sid}/{variant}/{reply.index}"
    rel = f"wav/{rid}.wav"
    data = wav_bytes(audio, REPLY_RATE)
    atomic_write_bytes(out / rel, data)
    duration = len(audio) / REPLY_RATE
    compared = (
        reply.status == "completed"
        and not reply.barge_in_cut
        and align(reply.transcript, "") is not None
    )
    return ReplyRow(
        reply_id=rid,
        dataset=dataset,
        category=category,
        sample_id=f"{category}/{sid}",
        variant=variant,
        response_id=reply.response_id,
        status=reply.status,
        barge_in_cut=reply.barge_in_cut,
        duration_s=round(duration, 6),
        short=duration < MIN_SCORED_S,
        compared=compared,
        transcript=reply.transcript,
        asr_text=None,
        wav=rel,
        wav_sha256=sha256_bytes(data),
    )


def previous_scores(out: Path, backends: dict) -> dict[str, dict[str, object]]:
    """kind -> {reply_id: (wav sha256, asr text or MOS)} from an earlier run of ``out``, for
    each of asr and mos whose backend identity equals the one in ``backends`` (else none)."""
    scores = ListeningScores.load(out / "scores.json")
    replies = ListeningReplies.load(out / "replies.json")
    if scores is None or replies is None:
        return {"asr": {}, "mos": {}}
    old = scores.backends
    sha = {r.reply_id: r.wav_sha256 for r in replies.replies}
    values = {
        "asr": {r.reply_id: r.asr_text for r in replies.replies},
        "mos": {s.reply_id: s.mos for s in scores.replies},
    }
    return {
        kind: (
            {rid: (sha.get(rid), v) for rid, v in values[kind].items()}
            if backends.get(kind) is not None and old.get(kind) == backends[kind]
            else {}
        )
        for kind in ("asr", "mos")
    }


def _reused(previous: dict, row: ReplyRow):
    """(True, value) when ``previous`` holds this reply's value for the same WAV bytes."""
    sha, value = previous.get(row.reply_id, (None, None))
    return (row.wav_sha256 is not None and sha == row.wav_sha256 and value is not None), value


def middle_window(audio: np.ndarray) -> np.ndarray:
    n = int(WINDOW_S * REPLY_RATE)
    start = (len(audio) - n) // 2
    return audio[start : start + n]


def _text_scores(row: ReplyRow, score: ReplyScores) -> None:
    if not row.compared:
        score.notes.append(
            f"not compared: status {row.status}"
            if row.status != "completed"
            else "not compared: playout cut"
            if row.barge_in_cut
            else "not compared: empty transcript"
        )
        return
    counts = align(row.transcript, row.asr_text or "")
    score.counts = counts
    score.omission_rate = counts.deletions / counts.reference_words
    score.wer = (
        counts.substitutions + counts.deletions + counts.insertions
    ) / counts.reference_words


def _voice_scores(rows, scores, windows: dict[int, np.ndarray], speaker) -> None:
    keys = sorted(windows)
    embs = {k: np.asarray(speaker.embed(windows[k]), dtype=np.float64) for k in keys}
    if len(keys) < 2:
        for k in keys:
            scores[k].notes.append("voice: no other reply of >= 3 s in the repeat")
        return
    total = np.sum([embs[k] for k in keys], axis=0)
    for k in keys:
        others = (total - embs[k]) / (len(keys) - 1)
        norms = float(np.linalg.norm(embs[k]) * np.linalg.norm(others))
        if norms == 0.0:  # a zero embedding has no direction: null, never NaN
            scores[k].notes.append("voice: zero speaker embedding")
            continue
        scores[k].voice_similarity = 100.0 * float(embs[k] @ others) / norms


def score_listening(
    repeat_root: Path,
    asr=None,
    mos=None,
    speaker=None,
    out: Path | None = None,
    notes: list[str] | None = None,
) -> ListeningSummary:
    """Cut, transcribe and score every reply of a repeat; writes ``out`` (default
    ``listening/`` of the repeat; another directory for backends side by side). ``notes`` are
    kept in the summary (e.g. why a backend is unavailable)."""
    root, notes = Path(repeat_root), list(notes or [])
    out = Path(out) if out is not None else root / "listening"
    asr, mos, speaker = (
        _load(k, b, notes) for k, b in (("asr", asr), ("mos", mos), ("speaker", speaker))
    )
    rows: list[ReplyRow] = []
    audios: list[np.ndarray] = []
    for key in discover_sessions(root):
        try:
            replies, _rate = session_replies(key[4])
        except (OSError, ValueError) as exc:
            notes.append(f"{key[0]}/{key[1]}/{key[2]}/{key[3]}: session not read ({exc})")
            continue
        for reply in replies:
            audio = reply.audio(_rate)
            rows.append(_row(out, key, reply, audio))
            audios.append(audio)
    scores = [
        ReplyScores(
            reply_id=r.reply_id,
            dataset=r.dataset,
            category=r.category,
            duration_s=r.duration_s,
            short=r.short,
            compared=r.compared,
        )
        for r in rows
    ]
    windows: dict[int, np.ndarray] = {}
    previous = previous_scores(out, _identities(asr, mos, speaker))
    for k, (row, audio) in enumerate(zip(rows, audios, strict=True)):
        if asr is not None and len(audio):
            done, text = _reused(previous["asr"], row)
            row.asr_text = text if done else asr.transcribe(audio).text.strip()
        if asr is not None:
            _text_scores(row, scores[k])
        if not row.short:
            done, value = _reused(previous["mos"], row)
            scores[k].mos = value if done else (mos.score(audio) if mos is not None else None)
            windows[k] = middle_window(audio)
            row.voice_window = f"voice-window/{row.reply_id}.wav"
            write_wav(out / row.voice_window, windows[k], REPLY_RATE)
    if speaker is not None:
        _voice_scores(rows, scores, windows, speaker)
    return _finish(out, rows, scores, notes, asr, mos, speaker)


def _identities(asr, mos, speaker) -> dict[str, dict | None]:
    return {
        kind: (b.identity.model_dump(mode="json") if b is not None else None)
        for kind, b in (("asr", asr), ("mos", mos), ("speaker", speaker))
    }


def _finish(out: Path, rows, scores, notes, asr, mos, speaker) -> ListeningSummary:
    backends = _identities(asr, mos, speaker)
    summary = ListeningSummary(
        definitions=definitions(),
        backends=backends,
        notes=notes,
        datasets=group_summaries(rows, scores),
        provenance=current().model_dump(mode="json"),
    )
    atomic_write_json(out / "replies.json", ListeningReplies(replies=rows).dump())
    atomic_write_json(
        out / "scores.json", ListeningScores(backends=backends, replies=scores).dump()
    )
    atomic_write_json(out / "summary.json", summary.dump())
    return summary


def definitions() -> dict[str, object]:
    return {
        "reply": "a response's played audio back to back, under the export's FIFO playout rule "
        "(fdb.playout) for the session's profile: cut where playout stopped (a cancelled "
        "response.done; or output_audio_buffer.cleared / input_audio_buffer.speech_started on "
        "the legacy and OpenAI profiles); no window end; late-arrival gaps left out; 16 kHz "
        "(soxr HQ)",
        "compared": "status completed, playout not cut, non-empty normalized response.done "
        "transcript (a reply cut at playout is not compared, like a cancelled one: its "
        "transcript runs past the audio it played)",
        "omission_rate": "deleted reference words / reference words, pooled over compared replies",
        "wer": "(S + D + I) / reference words of the same alignment, pooled over compared replies "
        "(short ones included)",
        "normalizer": "whisper_normalizer.english.EnglishTextNormalizer; alignment "
        "jiwer.process_words",
        "short_s": MIN_SCORED_S,
        "mos": "per reply of >= 3 s, whole reply; mean and p10 (np.percentile, linear)",
        "voice_similarity": "100 x cosine(embedding of the middle 3 s, mean embedding of the "
        "middle 3 s of every other reply of >= 3 s in the repeat); mean and p10",
        "groups": "each v1.5 category and v1.0 subset plus one 'all' per dataset; never across "
        "datasets",
    }
