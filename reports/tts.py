"""TTS.md, tables/*.csv and plots/tts-concurrency.png from a tts-bench's tts.json (its record,
fdb.records.tts.TtsReport).

The serving table has the shape of the Drama 3 serving table (Concurrency, Throughput, TTFA p50,
TTFA p95, RTF mean), with throughput both in audio seconds per second and, when the model's
codec frame rate was given, in acoustic frames per second, and the mean TTFA beside its p50/p95.
A run recorded in rounds (tts.json ``layout: rounds``) shows each level entry's mean +- sd over
its measured rounds and their count, and its cold rounds in a table of their own. Nothing here
recomputes a metric: it formats what tts.json holds (scorers.tts_serving / scorers.tts_quality
computed it). Every table is one fdb.tables.Table (typed values, per-column formats): TTS.md shows
its Markdown, tables/NN-<name>.csv its cells and tts.json ``tables`` its dump.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fdb.io import atomic_write_bytes, atomic_write_text
from fdb.records.tts import (
    LevelRow,
    LevelStats,
    QualitySummary,
    StopViolation,
    TtsBenchOptions,
    TtsReport,
)
from fdb.run_manifest import ServerProvenance
from fdb.tables import NA, Column, Table, write_tables
from reports.server_header import report_lines, revisions_line

# (LevelRow field, header, format, unit) of the serving table's measured columns
METRICS = (
    ("throughput_audio_s_per_s", "Throughput (audio-s/s)", ",.2f", ""),
    ("throughput_frames_per_s", "Throughput (frames/s)", ",.1f", ""),
    ("ttfa_p50_ms", "TTFA p50", ",.1f", " ms"),
    ("ttfa_p95_ms", "TTFA p95", ",.1f", " ms"),
    ("ttfa_mean_ms", "TTFA mean", ",.1f", " ms"),
    ("rtf_mean", "RTF (mean)", ".3f", ""),
)
SERVING_COLUMNS = ("Concurrency", *(header for _, header, _, _ in METRICS))


def _number(fmt: str, unit: str = "") -> Callable[[Any], str]:
    """A float as ``fmt`` with ``unit``; a {mean, sd} spread over rounds as ``mean ± sd`` (the sd
    when there is one); None as n/a; text as it is."""

    def cell(value: Any) -> str:
        if value is None:
            return NA
        if isinstance(value, str):
            return value
        if isinstance(value, dict):
            sd = "" if value["sd"] is None else f" ± {format(value['sd'], fmt)}"
            return f"{format(value['mean'], fmt)}{sd}{unit}"
        return f"{format(value, fmt)}{unit}"

    return cell


_MS = _number(",.1f", " ms")
ENTRY, CONCURRENCY = Column("entry", "Entry"), Column("concurrency", "Concurrency")
METRIC_COLUMNS = tuple(
    Column(name, header, _number(fmt, unit)) for name, header, fmt, unit in METRICS
)
DETAIL_COLUMNS = (
    CONCURRENCY,
    Column("requests", "Requests"),
    Column("failed", "Failed"),
    Column("empty", "No audio"),
    Column("wall_s", "Wall s", _number(".2f")),
    Column("e2e_p50_ms", "E2E p50", _MS),
    Column("e2e_p95_ms", "E2E p95", _MS),
    Column("max_gap_p95_ms", "Max gap p95", _MS),
    Column("underrun_p95_ms", "Underrun p95", _MS),
    Column("underruns", "Underruns"),
    Column("stop_violations", "Stop violations"),
)


def _metrics(row: LevelRow, stats: LevelStats | None = None) -> dict[str, Any]:
    """The serving table's measured values of one level entry: with ``stats``, each a {mean, sd}
    spread over its rounds (None where the entry has no value)."""
    values = {name: getattr(row, name) for name, _, _, _ in METRICS}
    if stats is None:
        return values
    sd = {name: found.sd for name, found in stats.metrics.items()}
    return {
        name: None if value is None else {"mean": value, "sd": sd.get(name)}
        for name, value in values.items()
    }


def serving(report: TtsReport) -> Table:
    """The serving table, one row per level entry; a run in rounds adds Entry (the position in
    --concurrency) and Rounds (the measured rounds the cells are over)."""
    columns = (
        (ENTRY, CONCURRENCY, Column("rounds", "Rounds")) if report.in_rounds else (CONCURRENCY,)
    )
    table = Table("serving", "Serving", [*columns, *METRIC_COLUMNS])
    for row, stats in report.entries():
        table.add(
            **({"entry": stats.entry, "rounds": stats.rounds} if stats else {}),
            concurrency=row.concurrency,
            **_metrics(row, stats),
        )
    return table


def serving_table(
    report: TtsReport,
) -> tuple[tuple[str, ...], list[tuple[LevelRow, list[str]]]]:
    """(headers, (row, cells) per level entry) of the serving table (the CLI's summary)."""
    table = serving(report)
    return tuple(table.headers()), list(zip(report.rows, table.cells(), strict=True))


def _details(report: TtsReport) -> Table:
    table = Table(
        "serving-details",
        "Details",
        [ENTRY, *DETAIL_COLUMNS] if report.in_rounds else list(DETAIL_COLUMNS),
    )
    for row, stats in report.entries():
        under = (
            None
            if row.underrun_requests is None
            else f"{row.underrun_requests}/{row.ok - row.empty}"
        )
        stops = (
            "not checked" if row.stop_checked == 0 else f"{row.stop_violations}/{row.stop_checked}"
        )
        table.add(
            **({"entry": stats.entry} if stats else {}),
            concurrency=row.concurrency,
            requests=row.requests,
            failed=row.failed,
            empty=row.empty,
            wall_s=row.wall_s,
            e2e_p50_ms=row.e2e_p50_ms,
            e2e_p95_ms=row.e2e_p95_ms,
            max_gap_p95_ms=row.max_gap_p95_ms,
            underrun_p95_ms=row.underrun_p95_ms,
            underruns=under,
            stop_violations=stops,
        )
    return table


def _cold(report: TtsReport) -> Table | None:
    cold = report.cold_rounds()
    if not cold:
        return None
    table = Table(
        "serving-cold-rounds",
        "Cold rounds",
        [ENTRY, CONCURRENCY, *METRIC_COLUMNS, Column("failed", "Failed")],
    )
    for found in cold:
        table.add(
            entry=found.entry,
            concurrency=found.row.concurrency,
            **_metrics(found.row),
            failed=f"{found.row.failed}/{found.row.requests}",
        )
    return table


def _quality(q: QualitySummary) -> Table:
    table = Table(
        "quality",
        "Quality",
        [
            Column("metric", "Metric"),
            Column("value", "Value", _number(".3f")),
            Column("backend", "Backend"),
        ],
    )
    asr = q.asr_label or NA

    def counted(mean: float | None, n: int) -> str:
        return f"{_number('.3f')(mean)} (n = {n})"

    table.add(
        metric="WER % (mean of per-utterance WER; headline)", value=q.wer_mean_pct, backend=asr
    )
    table.add(metric="WER % (corpus)", value=q.wer_corpus_pct, backend=asr)
    table.add(
        metric="Utterances with WER > 50%",
        backend="",
        value=None if q.wer_outliers is None else f"{q.wer_outliers}/{q.evaluated}",
    )
    table.add(metric="WER % (mean, without those)", value=q.wer_mean_excl_outliers_pct, backend="")
    table.add(
        metric="SIM (generated vs prompt wav)",
        value=counted(q.sim_mean, q.sim_n),
        backend=q.sim_label or "off",
    )
    table.add(metric="MOS", value=counted(q.mos_mean, q.mos_n), backend=q.mos_label or "off")
    return table


def _stops(found: list[StopViolation], rounds: bool = False) -> Table | None:
    if not found:
        return None
    seconds = _number(".3f")
    columns = [
        CONCURRENCY,
        Column("id", "Request"),
        Column("audio_after_done_s", "Audio after end (s)", seconds),
        Column("overrun_s", "Audio beyond bound (s)", seconds),
    ]
    table = Table(
        "stop-condition",
        "Stop condition",
        [Column("directory", "Round"), *columns] if rounds else columns,
    )
    for v in found:
        table.add(
            **({"directory": v.directory} if rounds else {}),
            concurrency=v.concurrency,
            id=v.id,
            audio_after_done_s=v.audio_after_done_s,
            overrun_s=v.overrun_s,
        )
    return table


def tables(report: TtsReport) -> list[Table]:
    """Every table of TTS.md, in its order: serving, cold rounds (if any), details, quality (if
    scored), stop violations (if any)."""
    q = report.quality
    found = [
        serving(report),
        _cold(report),
        _details(report),
        None if q is None else _quality(q),
        _stops(report.stop_violations, report.in_rounds),
    ]
    return [table for table in found if table is not None]


DEFINITIONS = [
    "## Definitions",
    "",
    "All times are on the client's clock (time.perf_counter), from just before the request was "
    "sent; they include the network to the server. Warm-up requests are excluded; "
    "failed requests stay in the counts.",
    "",
    "- TTFA: arrival of the first non-empty audio payload "
    "(SSE framing and WAV headers are not audio).",
    "- E2E: end of the response body.",
    "- Audio duration: PCM bytes / (2 x channels x the sample rate the server declared: "
    "X-Sample-Rate, a rate= Content-Type parameter, the WAV header or the SSE event; "
    "--sample-rate only when it declared none).",
    "- RTF: arrival of the last audio chunk / audio duration, per request; "
    "RTF (mean) averages requests with audio.",
    "- Throughput (audio-s/s): audio seconds of the successful requests / the level's wall time "
    "(first send to last body end). Throughput (frames/s) multiplies it by --frame-rate "
    "(the model's codec frame rate).",
    "- TTFA p50/p95, E2E p50/p95: the ceil(qN)-th smallest value over the requests with audio (no "
    "interpolation); TTFA mean: their arithmetic mean.",
    "- Max gap: the largest time between two consecutive audio arrivals of a request "
    "(p95 over requests).",
    "- Underrun: the worst deficit of a real-time player starting at the first arrival, max over "
    "chunks of arrival - (first arrival + audio before it); "
    "a request underruns when it exceeds the playback reserve.",
    "- Stop violation: audio received after the server declared the end (SSE speech.audio.done, "
    "finish_reason or [DONE]), or audio beyond --max-audio-s; 'not checked' when neither applies.",
    "",
]
ROUND_DEFINITIONS = [
    "- Rounds: each level entry (Entry: its position in --concurrency) was recorded in several "
    "rounds, one after another, each with its own warm-ups and requests; its cells are the mean "
    "over its measured rounds ± their sample standard deviation (n - 1; none for one round), "
    "counts summed over the rounds. A cold round, recorded first, is shown apart and left out.",
    "",
]


def _rounds(opts: TtsBenchOptions) -> str:
    rounds, cold = opts.rounds, opts.cold_round
    if rounds == 1 and not cold and len(set(opts.concurrency)) == len(opts.concurrency):
        return ""
    return (
        f" Level entries {' '.join(str(n) for n in opts.concurrency)}: "
        f"{rounds} measured round(s) each" + (", after one cold round (excluded)." if cold else ".")
    )


def _sent(opts: TtsBenchOptions) -> str:
    if opts.transport == "realtime":
        return (
            "One /v1/realtime session per request (times from response.create, "
            "E2E at response.done)"
        )
    return f"stream_format {opts.stream_format}, response_format pcm"


def _serving(report: TtsReport, reserve: float, found: dict[str, Table]) -> list[str]:
    """The serving table, the cold rounds (if any) and the details table."""
    rounds = report.in_rounds
    cold = found.get("serving-cold-rounds")
    caption = f"**Details** (playback reserve {reserve:g} ms" + (
        "; counts summed over the rounds)" if rounds else ")"
    )
    out = ["## Serving", "", *found["serving"].markdown(None)]
    if cold is not None:
        out += [
            "**Cold rounds** (one per entry, recorded before its measured rounds; "
            "not in the means above)",
            "",
            *cold.markdown(None),
        ]
    return out + [caption, "", *found["serving-details"].markdown(None)]


def _quality_section(q: QualitySummary | None, table: Table | None) -> list[str]:
    if q is None or table is None:
        return ["## Quality", "", "Not scored (--no-quality).", ""]
    out = [
        "## Quality",
        "",
        f"{q.evaluated} of {q.expected} utterances have a WER ({q.lang}).",
        "",
        *table.markdown(None),
    ]
    return out + [f"- {note}" for note in q.notes] + [""]


def _stops_section(found: list[StopViolation], table: Table | None) -> list[str]:
    out = ["## Stop condition", ""]
    if table is None:
        return out + [
            "No request received audio after the server's declared end or beyond --max-audio-s.",
            "",
        ]
    return out + [
        f"{len(found)} requests broke it (audio after the declared end, or beyond the bound):",
        "",
        *table.markdown(None),
    ]


def _server_lines(server: ServerProvenance | None) -> list[str]:
    """TTS.md's server lines: the declared revisions and what the server reported about itself."""
    if server is None:
        return ["Server provenance: not recorded (a run recorded before fdb kept it)."]
    return [
        revisions_line(
            server.server_revision,
            server.model_revision,
            server.dataset_revision,
            with_dataset=True,
        ),
        *report_lines(server.reported),
    ]


def render(report: TtsReport, found: list[Table] | None = None) -> str:
    """TTS.md; its tables are ``found`` (``tables(report)`` unless given)."""
    named = {table.name: table for table in (tables(report) if found is None else found)}
    run = report.run
    opts, dataset, rows = run.options, run.dataset, report.rows
    rounds = report.in_rounds
    rates = sorted({rate for row in rows for rate in row.sample_rates})
    reserve = rows[0].playback_reserve_ms if rows else opts.playback_reserve_ms
    frame = f"{opts.frame_rate:g} Hz" if opts.frame_rate else "not given (--frame-rate)"
    lines = [
        "# TTS serving",
        "",
        f"Endpoint {run.endpoint}"
        + (f" (bundled system {run.server})" if run.server else "")
        + ". "
        f"Seed-TTS {dataset.list_name} ({dataset.source}, {dataset.rows} rows): "
        f"{opts.num_prompts} requests per {'round' if rounds else 'level'}, "
        f"{opts.num_warmups} warm-up(s) excluded, closed loop. {_sent(opts)}, ref_audio "
        f"{opts.ref_audio}. Declared sample rate(s): "
        f"{', '.join(f'{r} Hz' for r in rates) or 'n/a'}. Codec frame rate: "
        f"{frame}.{_rounds(opts)}",
        "",
    ]
    lines += _server_lines(run.server_provenance) + [""]
    lines += [f"- {note}" for note in run.notes] + ([""] if run.notes else [])
    lines += _serving(report, reserve, named)
    errors = [(r.concurrency, e) for r in rows for e in r.errors]
    if errors:
        lines += [
            "Failures (first distinct reasons):",
            "",
            *(f"- concurrency {n}: {e}" for n, e in errors),
            "",
        ]
    lines += _quality_section(report.quality, named.get("quality"))
    lines += _stops_section(report.stop_violations, named.get("stop-condition"))
    lines += DEFINITIONS[:-1] + ROUND_DEFINITIONS if rounds else DEFINITIONS
    return "\n".join(lines)


def plot(rows: list[LevelRow]) -> bytes:
    """Throughput and TTFA p50/p95 against concurrency, side by side."""
    # lazy: matplotlib is slow to import; only the plots need it
    import matplotlib

    matplotlib.use("Agg")
    # lazy: matplotlib is slow to import; only the plots need it
    from matplotlib.figure import Figure

    rows = sorted(
        rows, key=lambda r: r.concurrency
    )  # level entries may repeat a level or come in any order
    levels = [r.concurrency for r in rows]
    figure = Figure(figsize=(9, 3.5), dpi=100)
    left, right = figure.subplots(1, 2)
    frames = all(r.throughput_frames_per_s is not None for r in rows)
    left.plot(
        levels,
        [
            (r.throughput_frames_per_s if frames else r.throughput_audio_s_per_s) or float("nan")
            for r in rows
        ],
        marker="o",
        color="#4c72b0",
    )
    left.set_ylabel("frames/s" if frames else "audio-s/s")
    left.set_title("Throughput")
    for key, label in (("ttfa_p50_ms", "p50"), ("ttfa_p95_ms", "p95")):
        right.plot(levels, [getattr(r, key) or float("nan") for r in rows], marker="o", label=label)
    right.set_ylabel("ms")
    right.set_title("TTFA")
    right.legend()
    for axes in (left, right):
        axes.set_xscale("log", base=2)
        ticks = sorted(set(levels))
        axes.set_xticks(ticks, [str(n) for n in ticks])
        axes.set_xlabel("concurrency")
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", metadata={"Software": None})  # byte-stable
    return buffer.getvalue()


def write_report(output: Path, report: TtsReport) -> list[Table]:
    """TTS.md, tables/NN-<name>.csv (one per table of TTS.md, from the same Table objects) and the
    plot; returns the tables (tts.json keeps their dump)."""
    found = tables(report)
    atomic_write_text(output / "TTS.md", render(report, found))
    write_tables(output / "tables", found)
    if report.rows:
        atomic_write_bytes(output / "plots" / "tts-concurrency.png", plot(report.rows))
    return found
