"""RESULTS.md listening-quality section: one table per dataset (v1.5 categories, v1.0 subsets),
each cell the mean ± sample deviation over repeats of ``repeat-N/listening/summary.json``."""

from __future__ import annotations

from functools import partial

from fdb.datasets.types import V15_CATEGORIES
from fdb.io import read_json
from fdb.layout import RepeatPaths
from fdb.tables import Column
from reports.cells import count_range, mean_sd
from reports.exports import Section, results_table

SHARE = partial(mean_sd, fmt="{:.1f}", scale=100.0, suffix="%")
# Each cell holds the per-repeat values; the column's formatter shows them as a range or mean ± sd.
COLUMNS = [Column("category", "Category"), Column("replies", "Replies", count_range),
           Column("short_replies", "Short replies", count_range),
           Column("compared_replies", "Compared replies", count_range),
           Column("omission_rate", "Omission rate", SHARE), Column("wer", "WER", SHARE),
           Column("mos_mean", "MOS mean", mean_sd), Column("mos_p10", "MOS p10", mean_sd),
           Column("voice_mean", "Voice similarity mean", mean_sd), Column("voice_p10", "Voice similarity p10", mean_sd)]


NOTE = ("A reply is cut where the client's playout stopped, by the export's playout rule for the "
        "session's protocol. Omission rate and WER pool the same compared replies (completed, short "
        "ones included); a reply whose playout was cut is not compared, like a cancelled one, since "
        "its transcript runs past the audio it played.")


def _order(category: str) -> tuple[int, int, str]:
    known = list(V15_CATEGORIES)
    return (category != "all", known.index(category) if category in known else len(known), category)


def _load(repeats: list[RepeatPaths]) -> tuple[list[dict], list[str]]:
    docs, missing = [], []
    for rep in repeats:
        path = rep.root / "listening" / "summary.json"
        if path.exists():
            docs.append(read_json(path))
        else:
            missing.append(f"repeat-{rep.number}")
    return docs, missing


def _row(category: str, cells: list[dict]) -> dict:
    return {"category": category} | {c.key: [cell.get(c.key) for cell in cells] for c in COLUMNS[1:]}


def listening_section(repeats: list[RepeatPaths]) -> Section:
    """Markdown lines, their tables and the data behind them (per dataset, per category, per repeat)."""
    docs, missing = _load(repeats)
    data: dict = {"repeats_missing": missing, "datasets": {}, "backends": [d.get("backends") for d in docs]}
    section = Section(["## Listening quality", ""], data)
    lines = section.lines
    if not docs:
        lines.append("No repeat has listening scores yet (run the asr step).")
        return section
    for d in docs[0].get("backends", {}).items():
        kind, ident = d
        lines.append(f"- {kind}: {ident['name'] if ident else 'unavailable (null)'}"
                     + (f" (sha256 {ident['checkpoint_sha256'][:12]}…)" if ident and ident.get("checkpoint_sha256") else ""))
    lines += ["", NOTE, ""]
    for dataset in ("v1.5", "v1.0"):
        cats = [c for d in docs for c in d.get("datasets", {}).get(dataset, {})]
        order = sorted(set(cats), key=_order)
        if not order:
            continue
        table, data["datasets"][dataset] = results_table(dataset, "", COLUMNS), {}
        for cat in order:
            cells = [d["datasets"][dataset][cat] for d in docs if cat in d.get("datasets", {}).get(dataset, {})]
            data["datasets"][dataset][cat] = cells
            table.add(**_row(cat, cells))
        lines += [f"### {dataset}", ""]
        section.show(table)
    if missing:
        lines.append(f"Not scored yet: {', '.join(missing)}.")
    return section
