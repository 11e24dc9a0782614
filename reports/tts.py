"""TTS.md, tables/*.csv and plots/tts-concurrency.png from a tts-bench's tts.json.

The serving table has the shape of the Drama 3 serving table (Concurrency, Throughput, TTFA p50,
TTFA p95, RTF mean), with throughput both in audio seconds per second and, when the model's
codec frame rate was given, in acoustic frames per second, and the mean TTFA beside its p50/p95.
A run recorded in rounds (tts.json ``layout: rounds``) shows each level entry's mean +- sd over
its measured rounds and their count, and its cold rounds in a table of their own. Nothing here
recomputes a metric: it formats what tts.json holds (scorers.tts_serving / scorers.tts_quality
computed it).
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

from fdb.io import atomic_write_bytes, atomic_write_text
from reports.exports import markdown_tables
from scorers.tts_serving import LevelRow, LevelStats, MetricStats, RoundRow

SERVING_COLUMNS = ("Concurrency", "Throughput (audio-s/s)", "Throughput (frames/s)", "TTFA p50", "TTFA p95",
                   "TTFA mean", "RTF (mean)")
DETAIL_COLUMNS = ("Concurrency", "Requests", "Failed", "No audio", "Wall s", "E2E p50", "E2E p95", "Max gap p95",
                  "Underrun p95", "Underruns", "Stop violations")


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.1f} ms"


def _num(value: float | None, fmt: str) -> str:
    return "n/a" if value is None else format(value, fmt)


def _spread(value: float | None, stats: MetricStats | None, fmt: str, unit: str = "") -> str:
    """``value`` (with ``unit``), and `` ± sd`` when its rounds have one."""
    if value is None:
        return "n/a"
    sd = "" if stats is None or stats.sd is None else f" ± {format(stats.sd, fmt)}"
    return f"{format(value, fmt)}{sd}{unit}"


def serving_cells(row: LevelRow, stats: LevelStats | None = None) -> list[str]:
    """The serving table's cells of one level entry; with ``stats``, each mean ± the sd over its rounds."""
    metric = (stats.metrics if stats else {}).get
    cells = [("throughput_audio_s_per_s", ",.2f", ""), ("throughput_frames_per_s", ",.1f", ""),
             ("ttfa_p50_ms", ",.1f", " ms"), ("ttfa_p95_ms", ",.1f", " ms"), ("ttfa_mean_ms", ",.1f", " ms"),
             ("rtf_mean", ".3f", "")]
    return [str(row.concurrency), *(_spread(getattr(row, name), metric(name), fmt, unit) for name, fmt, unit in cells)]


def _entries(data: dict) -> list[tuple[LevelRow, LevelStats | None]]:
    rows = [LevelRow.model_validate(row) for row in data["rows"]]
    if data.get("layout") != "rounds":
        return [(row, None) for row in rows]
    return list(zip(rows, (LevelStats.model_validate(s) for s in data["level_stats"]), strict=True))


def serving_table(data: dict) -> tuple[tuple[str, ...], list[tuple[LevelRow, list[str]]]]:
    """(columns, (row, cells) per level entry) of the serving table; a run in rounds adds Entry
    (the position in --concurrency) and Rounds (the measured rounds the cells are over)."""
    lines = []
    for row, stats in _entries(data):
        cells = serving_cells(row, stats)
        lines.append((row, cells if stats is None else [str(stats.entry), cells[0], str(stats.rounds), *cells[1:]]))
    if data.get("layout") != "rounds":
        return SERVING_COLUMNS, lines
    return ("Entry", SERVING_COLUMNS[0], "Rounds", *SERVING_COLUMNS[1:]), lines


def detail_cells(row: LevelRow) -> list[str]:
    under = "n/a" if row.underrun_requests is None else f"{row.underrun_requests}/{row.ok - row.empty}"
    stops = "not checked" if row.stop_checked == 0 else f"{row.stop_violations}/{row.stop_checked}"
    return [str(row.concurrency), str(row.requests), str(row.failed), str(row.empty), _num(row.wall_s, ".2f"),
            _ms(row.e2e_p50_ms), _ms(row.e2e_p95_ms), _ms(row.max_gap_p95_ms), _ms(row.underrun_p95_ms), under, stops]


def _table(columns, lines) -> list[str]:
    return ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns),
            *("| " + " | ".join(cells) + " |" for cells in lines)]


def _quality(q: dict | None) -> list[str]:
    if q is None:
        return ["## Quality", "", "Not scored (--no-quality).", ""]
    wer = f"{q['wer_mean_pct']:.3f}" if q["wer_mean_pct"] is not None else "n/a"
    corpus = f"{q['wer_corpus_pct']:.3f}" if q["wer_corpus_pct"] is not None else "n/a"
    excl = f"{q['wer_mean_excl_outliers_pct']:.3f}" if q["wer_mean_excl_outliers_pct"] is not None else "n/a"
    outliers = "n/a" if q["wer_outliers"] is None else f"{q['wer_outliers']}/{q['evaluated']}"
    lines = [("WER % (mean of per-utterance WER; headline)", wer, q["asr_label"] or "n/a"),
             ("WER % (corpus)", corpus, q["asr_label"] or "n/a"),
             ("Utterances with WER > 50%", outliers, ""),
             ("WER % (mean, without those)", excl, ""),
             ("SIM (generated vs prompt wav)", _num(q["sim_mean"], ".3f") + f" (n = {q['sim_n']})",
              q["sim_label"] or "off"),
             ("MOS", _num(q["mos_mean"], ".3f") + f" (n = {q['mos_n']})", q["mos_label"] or "off")]
    out = ["## Quality", "", f"{q['evaluated']} of {q['expected']} utterances have a WER ({q['lang']}).", "",
           *_table(("Metric", "Value", "Backend"), lines), ""]
    return out + [f"- {note}" for note in q.get("notes", [])] + [""]


def _stops(found: list[dict], rounds: bool = False) -> list[str]:
    out = ["## Stop condition", ""]
    if not found:
        return out + ["No request received audio after the server's declared end or beyond --max-audio-s.", ""]
    out.append(f"{len(found)} requests broke it (audio after the declared end, or beyond the bound):")
    out.append("")
    columns = ("Concurrency", "Request", "Audio after end (s)", "Audio beyond bound (s)")
    rows = [(str(v["concurrency"]), v["id"], _num(v["audio_after_done_s"], ".3f"), _num(v["overrun_s"], ".3f"))
            for v in found]
    if rounds:
        columns, rows = ("Round", *columns), [(v["directory"], *row) for v, row in zip(found, rows, strict=True)]
    return out + _table(columns, rows) + [""]


def _cold(data: dict) -> list[str]:
    cold = [RoundRow.model_validate(found) for found in data.get("rounds") or [] if found["cold"]]
    if not cold:
        return []
    lines = [(str(found.entry), *serving_cells(found.row), f"{found.row.failed}/{found.row.requests}")
             for found in cold]
    return ["**Cold rounds** (one per entry, recorded before its measured rounds; not in the means above)", "",
            *_table(("Entry", *SERVING_COLUMNS, "Failed"), lines), ""]


DEFINITIONS = [
    "## Definitions", "",
    "All times are on the client's clock (time.perf_counter), from just before the request was sent; they "
    "include the network to the server. Warm-up requests are excluded; failed requests stay in the counts.", "",
    "- TTFA: arrival of the first non-empty audio payload (SSE framing and WAV headers are not audio).",
    "- E2E: end of the response body.",
    "- Audio duration: PCM bytes / (2 x channels x the sample rate the server declared: X-Sample-Rate, a rate= "
    "Content-Type parameter, the WAV header or the SSE event; --sample-rate only when it declared none).",
    "- RTF: arrival of the last audio chunk / audio duration, per request; RTF (mean) averages requests with audio.",
    "- Throughput (audio-s/s): audio seconds of the successful requests / the level's wall time (first send to "
    "last body end). Throughput (frames/s) multiplies it by --frame-rate (the model's codec frame rate).",
    "- TTFA p50/p95, E2E p50/p95: the ceil(qN)-th smallest value over the requests with audio (no interpolation); "
    "TTFA mean: their arithmetic mean.",
    "- Max gap: the largest time between two consecutive audio arrivals of a request (p95 over requests).",
    "- Underrun: the worst deficit of a real-time player starting at the first arrival, max over chunks of arrival "
    "- (first arrival + audio before it); a request underruns when it exceeds the playback reserve.",
    "- Stop violation: audio received after the server declared the end (SSE speech.audio.done, finish_reason or "
    "[DONE]), or audio beyond --max-audio-s; 'not checked' when neither applies.",
    "",
]
ROUND_DEFINITIONS = [
    "- Rounds: each level entry (Entry: its position in --concurrency) was recorded in several rounds, one "
    "after another, each with its own warm-ups and requests; its cells are the mean over its measured rounds "
    "± their sample standard deviation (n - 1; none for one round), counts summed over the rounds. A cold "
    "round, recorded first, is shown apart and left out.",
    "",
]


def _rounds(opts: dict) -> str:
    rounds, cold = opts.get("rounds", 1), opts.get("cold_round")
    if rounds == 1 and not cold and len(set(opts["concurrency"])) == len(opts["concurrency"]):
        return ""
    return (f" Level entries {' '.join(str(n) for n in opts['concurrency'])}: {rounds} measured round(s) each"
            + (", after one cold round (excluded)." if cold else "."))


def _sent(opts: dict) -> str:
    if opts.get("transport") == "realtime":
        return "One /v1/realtime session per request (times from response.create, E2E at response.done)"
    return f"stream_format {opts['stream_format']}, response_format pcm"


def _serving(data: dict, reserve: float) -> list[str]:
    """The serving table, the cold rounds (if any) and the details table."""
    rounds = data.get("layout") == "rounds"
    columns, table = serving_table(data)
    details = [detail_cells(row) for row, _ in table]
    if rounds:
        details = [[str(stats.entry), *cells] for (_, stats), cells in zip(_entries(data), details, strict=True)]
    caption = f"**Details** (playback reserve {reserve:g} ms" + ("; counts summed over the rounds)" if rounds else ")")
    return ["## Serving", "", *_table(columns, [cells for _, cells in table]), "", *_cold(data), caption, "",
            *_table((("Entry",) if rounds else ()) + DETAIL_COLUMNS, details), ""]


def render(data: dict) -> str:
    run = data["run"]
    opts, dataset = run["options"], run["dataset"]
    rows = [LevelRow.model_validate(row) for row in data["rows"]]
    rounds = data.get("layout") == "rounds"
    rates = sorted({rate for row in rows for rate in row.sample_rates})
    reserve = rows[0].playback_reserve_ms if rows else opts["playback_reserve_ms"]
    frame = f"{opts['frame_rate']:g} Hz" if opts.get("frame_rate") else "not given (--frame-rate)"
    lines = ["# TTS serving", "",
             f"Endpoint {run['endpoint']}" + (f" (bundled system {run['server']})" if run.get("server") else "") + ". "
             f"Seed-TTS {dataset['list']} ({dataset['source']}, {dataset['rows']} rows): {opts['num_prompts']} "
             f"requests per {'round' if rounds else 'level'}, {opts['num_warmups']} warm-up(s) excluded, closed loop. {_sent(opts)}, ref_audio "
             f"{opts['ref_audio']}. Declared sample rate(s): "
             f"{', '.join(f'{r} Hz' for r in rates) or 'n/a'}. Codec frame rate: {frame}.{_rounds(opts)}", ""]
    lines += [f"- {note}" for note in run.get("notes", [])] + ([""] if run.get("notes") else [])
    lines += _serving(data, reserve)
    errors = [(r.concurrency, e) for r in rows for e in r.errors]
    if errors:
        lines += ["Failures (first distinct reasons):", "", *(f"- concurrency {n}: {e}" for n, e in errors), ""]
    lines += _quality(data.get("quality")) + _stops(data.get("stop_violations") or [], rounds)
    lines += DEFINITIONS[:-1] + ROUND_DEFINITIONS if rounds else DEFINITIONS
    return "\n".join(lines)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:60] or "table"


def write_csvs(output: Path, text: str) -> list[Path]:
    written = []
    for index, (title, rows) in enumerate(markdown_tables(text), start=1):
        buffer = io.StringIO()
        csv.writer(buffer, lineterminator="\n").writerows(rows)
        written.append(atomic_write_text(output / "tables" / f"{index:02d}-{_slug(title)}.csv", buffer.getvalue()))
    return written


def plot(rows: list[LevelRow]) -> bytes:
    """Throughput and TTFA p50/p95 against concurrency, side by side."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    rows = sorted(rows, key=lambda r: r.concurrency)  # level entries may repeat a level or come in any order
    levels = [r.concurrency for r in rows]
    figure = Figure(figsize=(9, 3.5), dpi=100)
    left, right = figure.subplots(1, 2)
    frames = all(r.throughput_frames_per_s is not None for r in rows)
    left.plot(levels, [(r.throughput_frames_per_s if frames else r.throughput_audio_s_per_s) or float("nan")
                       for r in rows], marker="o", color="#4c72b0")
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


def write_report(output: Path, data: dict) -> str:
    text = render(data)
    atomic_write_text(output / "TTS.md", text)
    write_csvs(output, text)
    rows = [LevelRow.model_validate(row) for row in data["rows"]]
    if rows:
        atomic_write_bytes(output / "plots" / "tts-concurrency.png", plot(rows))
    return text
