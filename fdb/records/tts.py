"""Typed records of the TTS serving benchmark (docs/tts.md): what a tts-bench replayed
(``TtsRun``, run.json, with its options ``TtsBenchOptions``), a level's ``LevelRow`` and, for
several rounds of one level entry, ``RoundRow`` and ``LevelStats``, the Seed-TTS quality of the
generated speech: ``UtteranceQuality`` (one line of ``quality/quality.jsonl``) and
``QualitySummary`` (``fdb-tts-quality-1``), and the whole report, ``TtsReport`` (tts.json,
``fdb-tts-bench-1``). None where a value cannot be measured, never 0. ``scorers.tts_serving`` and
``scorers.tts_quality`` compute them, ``runs.tts_bench`` writes run.json and tts.json through
them and reports read them back with ``TtsRun.load`` and ``TtsReport.load``; the per-request
records the client writes are in ``fdb.tts_records``."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from fdb.errors import FdbError
from fdb.records import FileRecord
from fdb.run_manifest import ServerProvenance

DEFAULT_RESERVE_S = 0.080
QUALITY_SCHEMA = "fdb-tts-quality-1"
TTS_BENCH_SCHEMA = "fdb-tts-bench-1"


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


class QualitySummary(FileRecord):
    """quality/quality.json (no file: quality was not scored)."""

    FIX = "score the quality again: rerun the tts-bench into a new --output"

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


class QualityOptions(BaseModel):
    """run.json ``options.quality``: whether and with which checkpoints quality is scored."""

    enabled: bool = True
    asr_model: str | None = None
    asr_model_sha256: str | None = None
    speaker_checkpoint: str | None = None
    speaker_sha256: str | None = None
    utmos_checkpoint: str | None = None
    utmos_sha256: str | None = None
    sim: bool = True
    mos: bool = True


class TtsBenchOptions(BaseModel):
    """The options of a tts-bench (run.json ``options``, --url without its secrets)."""

    output: Path
    concurrency: list[int]  # the level entries, in order (repeats allowed)
    rounds: int = Field(1, ge=1)  # measured rounds per level entry
    cold_round: bool | None = None  # one more round first, left out; None: on when rounds >= 2
    num_prompts: int = 8
    num_warmups: int = 1
    url: str | None = None
    system: str = "embedded-cascade"
    dataset_root: Path | None = None
    list_name: str = "en/meta.lst"
    model: str | None = None
    stream_format: str = "audio"
    transport: str = (
        "http"  # http (/v1/audio/speech) | realtime (/v1/realtime, recorders.tts_realtime)
    )
    ref_audio: str = "inline"
    extra_body: dict[str, object] = Field(default_factory=dict)
    sample_rate: int | None = None
    channels: int | None = None
    frame_rate: float | None = None
    max_audio_s: float | None = None
    playback_reserve_ms: float = 80.0
    timeout_s: float = 120.0
    api_key_env: str | None = None  # the variable's name only: the key never reaches a file
    server_revision: str | None = None  # --server-revision, as given
    model_revision: str | None = None  # --model-revision, as given
    dataset_revision: str | None = None  # --dataset-revision, as given
    quality: QualityOptions = QualityOptions()

    @model_validator(mode="after")
    def _entries(self) -> TtsBenchOptions:
        if not self.concurrency or any(n < 1 for n in self.concurrency):
            raise ValueError(
                f"concurrency {self.concurrency} must be one or more positive integers"
            )
        if self.cold_round is None:
            self.cold_round = self.rounds >= 2
        return self


class TtsDataset(BaseModel):
    """run.json ``dataset``: the Seed-TTS list the prompts came from."""

    model_config = ConfigDict(populate_by_name=True)

    root: str
    source: str  # official | synthetic | user
    list_name: str = Field(alias="list")  # e.g. en/meta.lst
    rows: int  # rows of the list (the prompts are its first --num-prompts, cycled)
    list_sha256: str


class TtsRun(FileRecord):
    """run.json of a tts-bench: what was replayed, against which endpoint. ``server_provenance``
    is None in a run recorded before fdb kept it."""

    FIX = "pass the --output of an earlier tts-bench run"

    model_config = ConfigDict(populate_by_name=True)

    schema_: str = Field(TTS_BENCH_SCHEMA, alias="schema")
    options: TtsBenchOptions
    dataset: TtsDataset
    endpoint: str  # the URL requests went to, secrets redacted
    server: str | None = None  # the bundled system started for the run; None with --url
    server_provenance: ServerProvenance | None = None
    prompt_wavs: dict[str, str] = Field(default_factory=dict)  # request id -> its prompt wav
    notes: list[str] = Field(default_factory=list)

    @classmethod
    def load(cls, path: Path, fix: str | None = None) -> TtsRun:
        """run.json of a tts-bench --output; an FdbError naming it when it does not parse and,
        unlike FileRecord's, when it is missing (a tts-bench always writes it first)."""
        found = super().load(path, fix)
        if found is None:
            raise FdbError(
                f"{Path(path).parent} holds no run.json", cls.FIX if fix is None else fix
            )
        return found


class StopViolation(BaseModel):
    """tts.json ``stop_violations``: one measured request (cold rounds included, marked) whose
    audio broke the stop condition; seconds as scorers.tts_serving.RequestMetrics has them."""

    concurrency: int
    entry: int
    round: int
    cold: bool
    directory: str  # the round's directory, relative to the run directory
    id: str
    audio_s: float | None = None
    audio_after_done_s: float | None = None
    overrun_s: float | None = None
    max_audio_s: float | None = None


class TtsReport(FileRecord):
    """tts.json, the report of a tts-bench (``python -m fdb tts-bench``, ``--report-only``
    rebuilds it): run.json as ``run``, one ``LevelRow`` per level entry (``rows``: the mean over
    its measured rounds), every recorded round (``rounds``, cold ones included) and the entries'
    spread over them (``level_stats``), the quality summary (None: not scored), the requests that
    broke the stop condition, provenance and TTS.md's tables (fdb.tables.Table.dump). A report
    written before rounds existed has no ``layout``, ``rounds``, ``level_stats`` or ``tables``
    (None)."""

    FIX = (
        "finish the bench, or rebuild it with `python -m fdb tts-bench --output DIR --report-only`"
    )

    model_config = ConfigDict(populate_by_name=True)

    schema_: str = Field(TTS_BENCH_SCHEMA, alias="schema")
    run: TtsRun
    layout: Literal["levels", "rounds"] | None = None  # rounds: entries recorded in rounds
    rows: list[LevelRow]
    rounds: list[RoundRow] | None = None
    level_stats: list[LevelStats] | None = None
    quality: QualitySummary | None = None
    stop_violations: list[StopViolation] = Field(default_factory=list)
    provenance: dict[str, Any] | None = None  # fdb.provenance.Provenance as dumped
    tables: list[dict[str, Any]] | None = None  # TTS.md's tables, as tables/*.csv hold them

    @property
    def in_rounds(self) -> bool:
        """Level entries recorded in rounds (repeated levels, --rounds, a cold round)."""
        return self.layout == "rounds"

    def entries(self) -> list[tuple[LevelRow, LevelStats | None]]:
        """Each level entry's row with, in a report in rounds, its spread over the rounds."""
        if not self.in_rounds:
            return [(row, None) for row in self.rows]
        return list(zip(self.rows, self.level_stats or [], strict=True))

    def cold_rounds(self) -> list[RoundRow]:
        return [found for found in self.rounds or [] if found.cold]

    def measured_rows(self) -> list[LevelRow]:
        """The row of every measured round (cold rounds left out), in recording order; a report
        without ``rounds`` has one round per level: its rows."""
        if self.rounds is None:
            return list(self.rows)
        return [found.row for found in self.rounds if not found.cold]

    @classmethod
    def load(cls, path: Path, fix: str | None = None) -> TtsReport:
        """tts.json; an FdbError naming it when it does not parse and, unlike FileRecord's, when
        it is missing (the bench did not finish). The default ``fix`` is ``FIX`` with the bench's
        directory for DIR."""
        path = Path(path)
        fix = fix or cls.FIX.replace("DIR", str(path.parent))
        found = super().load(path, fix)
        if found is None:
            raise FdbError(
                f"{path} is missing: the tts-bench report (the bench did not finish)", fix
            )
        return found
