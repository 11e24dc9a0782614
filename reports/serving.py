"""SERVING.md: one row per concurrency level, the capacity line, the targets, and what the times are."""

from __future__ import annotations

from scorers.serving import Capacity, ServingRow

COLUMNS = ("sessions at once", "sessions", "mean open", "failed", "503", "pacing violations", "client behind",
           "unit miss", "unit lag p50/p95 ms", "first audio p50/p95 ms", "buffer needed p90 ms",
           "underrun replies", "RTF p90", "meets targets")


def _num(value: float | int | None, digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def _pair(a: float | None, b: float | None) -> str:
    return "-" if a is None and b is None else f"{_num(a)} / {_num(b)}"


def _unit_miss(row: ServingRow) -> str:
    if row.unit_miss_rate is None:
        return "-"
    return f"{row.unit_misses}/{row.units} ({row.unit_miss_rate * 100:.2f}%)"


def _underruns(row: ServingRow) -> str:
    if row.underrun_replies is None:
        return "-"
    return f"{row.underrun_replies}/{row.replies - row.empty_replies}"


def row_cells(row: ServingRow) -> list[str]:
    return [str(row.concurrency), str(row.sessions), _num(row.mean_open, 2), str(row.sessions_failed),
            str(row.admission_denied), str(row.pacing_violations), str(row.client_behind), _unit_miss(row),
            _pair(row.unit_lag_p50_ms, row.unit_lag_p95_ms), _pair(row.first_audio_p50_ms, row.first_audio_p95_ms),
            _num(row.buffer_needed_p90_ms), _underruns(row), _num(row.rtf_p90, 2),
            "yes" if row.meets_targets else "no: " + "; ".join(row.missed_targets)]


def render(rows: list[ServingRow], cap: Capacity, title: str = "Serving capacity") -> str:
    reserve = rows[0].playback_reserve_ms if rows else 80.0
    profile = rows[0].profile if rows else "-"
    lines = [f"# {title}", "", f"Profile: {profile}. {cap.line()}.", "",
             "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(row_cells(row)) + " |" for row in sorted(rows, key=lambda r: r.concurrency)]
    behind = [str(r.concurrency) for r in rows if r.client_behind or r.pacing_violations]
    lines += ["", "## Targets", "",
              "A level meets the targets when no session failed, no session was denied admission (503), no input "
              "pacing was violated, and the unit miss rate is at most 1% (native profiles) or the reply RTF p90 is "
              "below 1 (turn-based profiles). The capacity is the highest level below the first one that misses; "
              "when every level meets them it is at least the highest recorded level.", "",
              "## Reading the columns", "",
              "- mean open: sessions open at once, averaged over the level's recording.",
              "- unit lag: receipt of sglang.unit.done minus the end of sending the packet holding the unit's last "
              "audio (the short last unit from the input end); a unit misses when its lag exceeds one unit. "
              "Native profiles only.",
              "- first audio: turn-based, from response.created to the reply's first audio; native, from the "
              "input of the unit that carried it (the last unit done before it) being ready to its receipt.",
              f"- buffer needed: the smallest startup buffer with which a reply plays without a gap; underrun "
              f"replies would pause with a {reserve:g} ms playback reserve.",
              "- RTF p90: (last - first audio arrival) / audio before the last chunk, turn-based only.",
              "- client behind: sessions in which the load generator's own event loop fell behind; a level with "
              "pacing violations or client-behind sessions measured the client, not the server.", "",
              "These are client-side times on the client's host: they include the network to the server and leave "
              "out the player's device and the acoustics."]
    if behind:
        lines += ["", f"Load-generator limited levels: {', '.join(behind)}."]
    return "\n".join(lines) + "\n"
