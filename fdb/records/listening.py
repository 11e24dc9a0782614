"""Typed records of the listening-quality outputs under ``repeat-N/listening/``:
``replies.json`` (``fdb-listening-replies-2``), ``scores.json`` (``fdb-listening-scores-2``)
and ``summary.json`` (``fdb-listening-2``). Missing values are null, never 0. Version 2: replies
are cut by the export's playout rule for every profile, a playout-cut reply is not compared, and
WER pools every compared reply (version 1 pooled those of >= 3 s only)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from fdb.records import FileRecord

REPLIES_SCHEMA = "fdb-listening-replies-2"
SCORES_SCHEMA = "fdb-listening-scores-2"
SUMMARY_SCHEMA = "fdb-listening-2"
RESCORE = "rescore the repeat's listening quality: python -m fdb asr --run-name RUN --repeat N"
# a rerun reads replies.json and scores.json back (to reuse ASR text and MOS): a damaged one goes
RESCORE_DAMAGED = (
    "delete it and rescore the repeat's listening quality: "
    "python -m fdb asr --run-name RUN --repeat N"
)


class WordCounts(BaseModel):
    """The alignment counts of one reply's reference (transcript) and hypothesis (ASR text)."""

    reference_words: int
    hits: int
    substitutions: int
    deletions: int
    insertions: int


class ReplyRow(BaseModel):
    reply_id: str  # dataset/category/id/variant/index
    dataset: str  # v1.5 | v1.0
    category: str
    sample_id: str
    variant: str
    response_id: str
    status: str  # completed | cancelled | incomplete | failed | ...
    barge_in_cut: bool
    duration_s: float
    short: bool
    compared: bool
    transcript: str | None
    asr_text: str | None
    wav: str | None  # relative to listening/
    voice_window: str | None = None
    wav_sha256: str | None = (
        None  # of the reply's WAV: a rerun with the same backends reuses its scores
    )


class ReplyScores(BaseModel):
    reply_id: str
    dataset: str
    category: str
    duration_s: float
    short: bool
    compared: bool
    counts: WordCounts | None = None
    omission_rate: float | None = None
    wer: float | None = None  # compared replies, short ones included
    mos: float | None = None
    voice_similarity: float | None = None
    notes: list[str] = Field(default_factory=list)


class ListeningReplies(FileRecord):
    """``listening/replies.json``: every cut reply of the repeat, in discovery order."""

    FIX = RESCORE_DAMAGED

    schema_: str = Field(REPLIES_SCHEMA, alias="schema")
    replies: list[ReplyRow]

    model_config = {"populate_by_name": True}


class ListeningScores(FileRecord):
    """``listening/scores.json``: the identity of each backend (asr, mos, speaker; None: off or
    unavailable) and the scores of every reply, in the order of replies.json."""

    FIX = RESCORE_DAMAGED

    schema_: str = Field(SCORES_SCHEMA, alias="schema")
    backends: dict[str, dict | None]
    replies: list[ReplyScores]

    model_config = {"populate_by_name": True}


class GroupSummary(BaseModel):
    dataset: str
    category: str
    replies: int
    short_replies: int
    compared_replies: int
    cancelled_replies: int
    reference_words: int
    omitted_words: int
    omission_rate: float | None
    wer: float | None
    wer_reference_words: int
    mos_n: int
    mos_mean: float | None
    mos_p10: float | None
    voice_n: int
    voice_mean: float | None
    voice_p10: float | None


class ListeningSummary(FileRecord):
    """``listening/summary.json``."""

    FIX = RESCORE

    schema_: str = Field(SUMMARY_SCHEMA, alias="schema")
    definitions: dict[str, object]
    backends: dict[str, dict | None]
    notes: list[str] = Field(default_factory=list)
    datasets: dict[str, dict[str, GroupSummary]]
    provenance: dict[str, object] = Field(default_factory=dict)

    model_config = {"populate_by_name": True}
