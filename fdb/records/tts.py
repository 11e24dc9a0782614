"""Typed records of the TTS serving benchmark's results (docs/tts.md): a level's ``LevelRow``
and, for several rounds of one level entry, ``RoundRow`` and ``LevelStats`` (``tts.json``), and
the Seed-TTS quality of the generated speech: ``UtteranceQuality`` (one line of
``quality/quality.jsonl``) and ``QualitySummary`` (``fdb-tts-quality-1``). None where a value
cannot be measured, never 0. ``scorers.tts_serving`` and ``scorers.tts_quality`` compute them;
the per-request records the client writes are in ``fdb.tts_records``."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

DEFAULT_RESERVE_S = 0.080
QUALITY_SCHEMA = "fdb-tts-quality-1"


class LevelRow(BaseModel):
    """One concurrency level; times in milliseconds, throughput per wall-clock second."""

    concurrency: int
    requests: int
    warmups: int = 0
    ok: int = 0
    failed: int = 0
    empty: int = 0  # ok, but no audio
    wall_s: float | None = None
    audio_s: float | None = None
    throughput_audio_s_per_s: float | None = None
    frame_rate_hz: float | None = None
    throughput_frames_per_s: float | None = None
    requests_per_s: float | None = None
    ttfa_p50_ms: float | None = None
    ttfa_p95_ms: float | None = None
    ttfa_mean_ms: float | None = None
    e2e_p50_ms: float | None = None
    e2e_p95_ms: float | None = None
    rtf_mean: float | None = None
    max_gap_p95_ms: float | None = None
    underrun_p95_ms: float | None = None
    playback_reserve_ms: float = DEFAULT_RESERVE_S * 1000.0
    underrun_requests: int | None = None
    stop_checked: int = 0
    stop_violations: int = 0
    sample_rates: list[int] = Field(default_factory=list)
    errors: list[str] = Field(default_factory=list)  # distinct failure reasons, first 5


class MetricStats(BaseModel):
    """One metric over an entry's measured rounds: rounds without a value are left out (n counts
    the others); all None when no round has one, sd None below two values."""

    mean: float | None = None
    sd: float | None = None  # sample standard deviation (n - 1)
    min: float | None = None
    max: float | None = None
    n: int = 0


class LevelStats(BaseModel):
    entry: int
    concurrency: int
    rounds: int  # measured rounds (the cold one is not among them)
    metrics: dict[str, MetricStats]


class RoundRow(BaseModel):
    """tts.json ``rounds``: one recorded round of a level entry and its row."""

    entry: int  # 1..K, the position in --concurrency
    concurrency: int
    round: int  # 1..--rounds; 0 for the cold round
    cold: bool = False
    directory: str  # relative to the run directory, e.g. concurrency-64~2/round-1
    row: LevelRow


class WerCounts(BaseModel):
    words: int
    substitutions: int
    deletions: int
    insertions: int

    @property
    def errors(self) -> int:
        return self.substitutions + self.deletions + self.insertions

    @property
    def wer(self) -> float:
        return self.errors / self.words


class UtteranceQuality(BaseModel):
    """One line of quality.jsonl."""

    id: str
    lang: str
    audio_s: float | None = None
    reference: str
    hypothesis: str | None = None
    counts: WerCounts | None = None
    wer: float | None = None
    sim: float | None = None
    mos: float | None = None
    note: str | None = None


class QualitySummary(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    schema_: str = Field(QUALITY_SCHEMA, alias="schema")
    lang: str
    expected: int  # requests of the scored level
    evaluated: int  # utterances with a WER
    wer_mean_pct: float | None = None
    wer_corpus_pct: float | None = None
    wer_outliers: int | None = None  # utterances with WER > 50%
    wer_mean_excl_outliers_pct: float | None = None
    sim_mean: float | None = None
    sim_n: int = 0
    mos_mean: float | None = None
    mos_n: int = 0
    asr: dict[str, object] | None = None
    asr_label: str | None = None
    speaker: dict[str, object] | None = None
    sim_label: str | None = None
    mos_backend: dict[str, object] | None = None
    mos_label: str | None = None
    notes: list[str] = Field(default_factory=list)

    def dump(self) -> dict:
        return self.model_dump(mode="json", by_alias=True)
