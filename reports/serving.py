"""SERVING.md: one row per concurrency level, the capacity line, the targets, warnings and what the
times are; serving.png: unit lag, first audio and reply RTF against concurrency. The level table is
one fdb.tables.Table: SERVING.md shows its Markdown, tables/NN-<name>.csv its cells and
serving.json ``tables`` its dump. A missing value is ``-``."""

from __future__ import annotations

from fdb.records.serving import CLIENT_CPU_SATURATED, Capacity, ServingRow
from fdb.run_manifest import ServerProvenance
from fdb.tables import Column, Table
from reports.exports import figure_png
from reports.server_header import report_lines, revisions_line


def _num(value: float | int | str | None, digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def _digits(digits: int):
    return lambda value: _num(value, digits)


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.0f}%"


# typed where a cell is one value; the cells that combine several (x/y, p50 / p95, ...) are text
COLUMNS = (
    Column("concurrency", "sessions at once"),
    Column("sessions", "sessions"),
    Column("mean_open", "mean open", _digits(2)),
    Column("sessions_failed", "failed"),
    Column("admission_denied", "503"),
    Column("pacing_violations", "pacing violations"),
    Column("client_behind", "client behind"),
    Column("client_cpu", "client CPU", _percent),
    Column("unit_miss", "unit miss", _num),
    Column("unit_lag_ms", "unit lag p50/p95 ms", _num),
    Column("first_audio_ms", "first audio p50/p95 ms", _num),
    Column("buffer_needed_p90_ms", "buffer needed p90 ms", _digits(0)),
    Column("underrun_replies", "underrun replies", _num),
    Column("rtf_p90", "RTF p90", _digits(2)),
    Column("meets_targets", "meets targets"),
)


def _pair(a: float | None, b: float | None) -> str | None:
    return None if a is None and b is None else f"{_num(a)} / {_num(b)}"


def _unit_miss(row: ServingRow) -> str | None:
    if row.unit_miss_rate is None:
        return None
    return f"{row.unit_misses}/{row.units} ({row.unit_miss_rate * 100:.2f}%)"


def _underruns(row: ServingRow) -> str | None:
    if row.underrun_replies is None:
        return None
    return f"{row.underrun_replies}/{row.replies - row.empty_replies}"


def _client(row: ServingRow) -> str:
    return f"{row.client_behind} (client-limited)" if row.client_limited else str(row.client_behind)


def warnings(rows: list[ServingRow]) -> list[str]:
    """Levels with a cohort smaller than the level, levels above the server's max_sessions (their
    503s are by design) and client-limited levels."""
    found = []
    for row in sorted(rows, key=lambda r: r.concurrency):
        cohort = row.sessions // max(row.repeats, 1)
        if 0 < cohort < row.concurrency:
            found.append(
                f"level {row.concurrency} recorded a cohort of only {cohort} sessions, so it never "
                f"had {row.concurrency} open at once; select more samples"
            )
        if row.server_max_sessions is not None and row.concurrency > row.server_max_sessions:
            found.append(
                f"level {row.concurrency} exceeds the server's max_sessions "
                f"{row.server_max_sessions}: sessions beyond {row.server_max_sessions} at once are "
                "refused with 503 by design"
            )
        if row.client_limited:
            found.append(
                f"level {row.concurrency} was limited by the load generator, not the server: "
                + _client_cause(row)
            )
    return found


def _client_cause(row: ServingRow) -> str:
    if row.client_cpu is not None and row.client_cpu >= CLIENT_CPU_SATURATED:
        return (
            f"the client process used {row.client_cpu * 100:.0f}% of a core while its pacing "
            "broke; record the level from more client processes or a faster host"
        )
    cpu = "unknown" if row.client_cpu is None else f"only {row.client_cpu * 100:.0f}% of a core"
    return (
        "its pacing violations coincide with the client's own event-loop lag while its CPU was "
        f"{cpu}, so other processes on the client's host starved it (the server too, when it "
        "shares the host); record the level with the client on another host or on a reserved core"
    )


def serving_table(rows: list[ServingRow], title: str = "Serving capacity") -> Table:
    """SERVING.md's table: one row per level, by concurrency."""
    table = Table("serving", title, COLUMNS)
    for row in sorted(rows, key=lambda r: r.concurrency):
        table.add(
            concurrency=row.concurrency,
            sessions=f"{row.sessions} ({row.repeats} repeats)"
            if row.repeats > 1
            else str(row.sessions),
            mean_open=row.mean_open,
            sessions_failed=row.sessions_failed,
            admission_denied=row.admission_denied,
            pacing_violations=row.pacing_violations,
            client_behind=_client(row),
            client_cpu=row.client_cpu,
            unit_miss=_unit_miss(row),
            unit_lag_ms=_pair(row.unit_lag_p50_ms, row.unit_lag_p95_ms),
            first_audio_ms=_pair(row.first_audio_p50_ms, row.first_audio_p95_ms),
            buffer_needed_p90_ms=row.buffer_needed_p90_ms,
            underrun_replies=_underruns(row),
            rtf_p90=row.rtf_p90,
            meets_targets="yes" if row.meets_targets else "no: " + "; ".join(row.missed_targets),
        )
    return table


def tables(rows: list[ServingRow], title: str = "Serving capacity") -> list[Table]:
    """Every table of SERVING.md, in its order."""
    return [serving_table(rows, title)]


def server_header(server: ServerProvenance | None) -> list[str]:
    """SERVING.md's server lines: where it ran, the declared revisions, what the server reported."""
    if server is None:
        return ["Server: not recorded (levels recorded before fdb kept the server's provenance)."]
    target = server.url or (
        f"bundled system `{server.bundled_system}` (started by the sweep)"
        if server.bundled_system
        else "not recorded"
    )
    return [
        f"Server: {target}.",
        revisions_line(
            server.server_revision,
            server.model_revision,
            server.dataset_revision,
            with_dataset=True,
        ),
        *report_lines(server.reported),
    ]


def render(
    rows: list[ServingRow],
    cap: Capacity,
    title: str = "Serving capacity",
    found: list[Table] | None = None,
    server: ServerProvenance | None = None,
    extra_warnings: list[str] | None = None,
) -> str:
    """SERVING.md; its table is ``found`` (``tables(rows, title)`` unless given)."""
    (table,) = tables(rows, title) if found is None else found
    reserve = rows[0].playback_reserve_ms if rows else 80.0
    profile = rows[0].profile if rows else "-"
    lines = [
        f"# {title}",
        "",
        *server_header(server),
        "",
        f"Profile: {profile}. {cap.line()}.",
        "",
        *table.markdown(None),
    ]
    lines += [
        "## Targets",
        "",
        "A level meets the targets when no session failed, no session was denied admission (503), "
        "no input pacing was violated, and the unit miss rate is at most 1% (native profiles) or "
        "the reply RTF p90 is below 1 (turn-based profiles). The capacity is the highest level "
        "below the first one that misses; when every level meets them it is at least the highest "
        "recorded level.",
        "",
        "## Reading the columns",
        "",
        "- mean open: sessions open at once, averaged over the level's recording.",
        "- unit lag: receipt of sglang.unit.done minus the end of sending the packet holding the "
        "unit's last audio (the short last unit from the input end); a unit misses when its lag "
        "exceeds one unit. Native profiles only.",
        "- first audio: turn-based, from response.created to the reply's first audio; native, from "
        "the input of the unit that carried it (the last unit done before it) being ready to its "
        "receipt.",
        "- buffer needed: the smallest startup buffer with which a reply plays without a gap; "
        f"underrun replies would pause with a {reserve:g} ms playback reserve.",
        "- RTF p90: (last - first audio arrival) / audio before the last chunk, turn-based only.",
        "- client behind: sessions in which the load generator's own event loop fell behind while "
        "it sent input; client-limited marks a level whose pacing violations coincide with that "
        "lag (or with a client CPU of at least 90% of one core): the load generator, "
        "not the server, was the limit, so "
        'the level does not count against the server and the capacity reads "at least".',
        "- client CPU: CPU time of the level's client process over its wall time "
        "(100% = one core busy).",
        "- With repeats, the columns pool every repeat's sessions (mean open and client CPU: the "
        "mean and the highest of the repeats'), and a level meets the targets only if every "
        "repeat does.",
        "",
        "These are client-side times on the client's host: they include the network to the server "
        "and leave out the player's device and the acoustics.",
    ]
    limited = [str(r.concurrency) for r in rows if r.client_limited]
    lines += [
        "",
        "Load-generator limited levels: " + (", ".join(limited) if limited else "none") + ".",
    ]
    found = warnings(rows) + list(extra_warnings or [])
    if found:
        lines += ["", "## Warnings", ""] + [f"- {line}." for line in found]
    return "\n".join(lines) + "\n"


PLOTS = (
    ("unit lag (ms)", "unit_lag_p50_ms", "unit_lag_p95_ms", None),
    ("first audio (ms)", "first_audio_p50_ms", "first_audio_p95_ms", None),
    ("reply RTF p90", "rtf_p90", None, 1.0),
)


def plot_png(rows: list[ServingRow]) -> bytes:
    """serving.png: unit lag p50/p95, first audio p50/p95 and reply RTF p90 against concurrency;
    a level that misses the targets is drawn as a red cross, a column no level has says so."""
    # lazy: matplotlib is slow to import; only the plots need it
    import matplotlib

    matplotlib.use("Agg")
    # lazy: matplotlib is slow to import; only the plots need it
    from matplotlib.figure import Figure

    ordered = sorted(rows, key=lambda r: r.concurrency)
    figure = Figure(figsize=(11, 3.4), dpi=100)
    for k, (title, main, upper, target) in enumerate(PLOTS):
        axes = figure.add_subplot(1, 3, k + 1)
        axes.set_title(title)
        axes.set_xlabel("sessions at once")
        points = [
            (r.concurrency, getattr(r, main), getattr(r, upper) if upper else None, r.meets_targets)
            for r in ordered
        ]
        shown = [p for p in points if p[1] is not None]
        if not shown:
            axes.text(
                0.5,
                0.5,
                "not measured\n(not a column of this profile)",
                ha="center",
                va="center",
                transform=axes.transAxes,
            )
            axes.set_xticks([])
            axes.set_yticks([])
            continue
        axes.plot(
            [p[0] for p in shown],
            [p[1] for p in shown],
            "o-",
            color="#4c72b0",
            label="p50" if upper else "p90",
        )
        highs = [p for p in shown if p[2] is not None]
        if highs:
            axes.plot(
                [p[0] for p in highs], [p[2] for p in highs], "s--", color="#dd8452", label="p95"
            )
        misses = [p for p in shown if not p[3]]
        if misses:
            axes.plot(
                [p[0] for p in misses],
                [p[1] for p in misses],
                "x",
                color="red",
                markersize=10,
                label="misses",
            )
        if target is not None:
            axes.axhline(target, color="grey", linewidth=1, linestyle=":", label="target")
        axes.set_xscale("log", base=2)
        axes.minorticks_off()
        axes.set_xticks([p[0] for p in points], [str(p[0]) for p in points])
        axes.legend(fontsize=8)
    return figure_png(figure)
