"""RESULTS.md listening-quality section: one table per dataset (v1.5 categories, v1.0 subsets),
each cell the mean ± sample deviation over repeats of ``repeat-N/listening/summary.json``."""

from __future__ import annotations

from fdb.datasets.types import V15_CATEGORIES
from fdb.io import read_json
from fdb.layout import RepeatPaths
from reports.cells import count_range, mean_sd, table

HEADER = ("Category", "Replies", "Short replies", "Compared replies", "Omission rate", "WER",
          "MOS mean", "MOS p10", "Voice similarity mean", "Voice similarity p10")


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


def _row(category: str, cells: list[dict]) -> list[str]:
    def values(key):
        return [c.get(key) for c in cells]

    return [category, count_range(values("replies")), count_range(values("short_replies")),
            count_range(values("compared_replies")),
            mean_sd(values("omission_rate"), "{:.1f}", 100.0, "%"), mean_sd(values("wer"), "{:.1f}", 100.0, "%"),
            mean_sd(values("mos_mean")), mean_sd(values("mos_p10")),
            mean_sd(values("voice_mean")), mean_sd(values("voice_p10"))]


def listening_section(repeats: list[RepeatPaths]) -> tuple[list[str], dict]:
    """Markdown lines and the data behind them (per dataset, per category, per repeat)."""
    docs, missing = _load(repeats)
    lines = ["## Listening quality", ""]
    data: dict = {"repeats_missing": missing, "datasets": {}, "backends": [d.get("backends") for d in docs]}
    if not docs:
        return lines + ["No repeat has listening scores yet (run the asr step)."], data
    for d in docs[0].get("backends", {}).items():
        kind, ident = d
        lines.append(f"- {kind}: {ident['name'] if ident else 'unavailable (null)'}"
                     + (f" (sha256 {ident['checkpoint_sha256'][:12]}…)" if ident and ident.get("checkpoint_sha256") else ""))
    lines.append("")
    for dataset in ("v1.5", "v1.0"):
        cats = [c for d in docs for c in d.get("datasets", {}).get(dataset, {})]
        order = sorted(set(cats), key=_order)
        if not order:
            continue
        rows, data["datasets"][dataset] = [], {}
        for cat in order:
            cells = [d["datasets"][dataset][cat] for d in docs if cat in d.get("datasets", {}).get(dataset, {})]
            data["datasets"][dataset][cat] = cells
            rows.append(_row(cat, cells))
        lines += [f"### {dataset}", ""] + table(HEADER, rows) + [""]
    if missing:
        lines.append(f"Not scored yet: {', '.join(missing)}.")
    return lines, data
