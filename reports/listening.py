"""RESULTS.md listening-quality section: one table per dataset (v1.5 categories, v1.0 subsets),
each cell the mean ± sample deviation over repeats of ``repeat-N/listening/summary.json``.

The MOS and voice-similarity columns are named after the backend that scored them (``UTMOS
mean`` with UTMOS, ``DNSMOS (OVRL) mean`` with DNSMOS; ``Voice similarity (resemblyzer-ge2e)``
for the resemblyzer proxy). A cell never mixes backends: the first scored repeat's backends are
the section's, and a repeat scored with another model (``fdb.models.scoring.same_model``) is left
out of the cells and named under the tables."""

from __future__ import annotations

from functools import partial

from fdb.datasets.types import V15_CATEGORIES
from fdb.layout import RepeatPaths
from fdb.models.scoring import KINDS, mos_label, same_model, voice_label
from fdb.records.listening import GroupSummary, ListeningSummary
from fdb.tables import Column
from reports.cells import count_range, mean_sd
from reports.exports import Section, results_table

SHARE = partial(mean_sd, fmt="{:.1f}", scale=100.0, suffix="%")


# The GroupSummary fields RESULTS.md shows, with their header and cell format; the columns follow
# the record's field order ("{mos}" and "{voice}" name the backends that scored them).
SHOWN = {
    "replies": ("Replies", count_range),
    "short_replies": ("Short replies", count_range),
    "compared_replies": ("Compared replies", count_range),
    "omission_rate": ("Omission rate", SHARE),
    "wer": ("WER", SHARE),
    "mos_mean": ("{mos} mean", mean_sd),
    "mos_p10": ("{mos} p10", mean_sd),
    "voice_mean": ("{voice} mean", mean_sd),
    "voice_p10": ("{voice} p10", mean_sd),
}
FIELDS = [key for key in GroupSummary.model_fields if key in SHOWN]
assert len(FIELDS) == len(SHOWN), "every shown column is a GroupSummary field"


def columns(backends: dict | None) -> list[Column]:
    """The table's columns; each cell holds the per-repeat values, shown as a range or mean ± sd."""
    names = {
        "mos": mos_label((backends or {}).get("mos")),
        "voice": voice_label((backends or {}).get("speaker")),
    }
    return [
        Column("category", "Category"),
        *(Column(key, SHOWN[key][0].format(**names), SHOWN[key][1]) for key in FIELDS),
    ]


NOTE = (
    "A reply is cut where the client's playout stopped, by the export's playout rule for the "
    "session's protocol. Omission rate and WER pool the same compared replies (completed, short "
    "ones included); a reply whose playout was cut is not compared, like a cancelled one, since "
    "its transcript runs past the audio it played."
)


def _order(category: str) -> tuple[int, int, str]:
    known = list(V15_CATEGORIES)
    return (category != "all", known.index(category) if category in known else len(known), category)


def _load(repeats: list[RepeatPaths]) -> tuple[list[ListeningSummary], list[str], list[str]]:
    """The summaries of one backend set (the first scored repeat's), the repeats not scored yet,
    and a line for each repeat left out because another model scored it."""
    docs: list[ListeningSummary] = []
    missing, other = [], []
    for rep in repeats:
        doc = ListeningSummary.load(rep.listening / "summary.json")
        if doc is None:
            missing.append(f"repeat-{rep.number}")
            continue
        differs = [
            k for k in KINDS if docs and not _same(docs[0].backends.get(k), doc.backends.get(k))
        ]
        if differs:
            other.append(
                f"repeat-{rep.number} left out: scored with another {' and '.join(differs)} "
                f"backend ({', '.join(_name(doc, k) for k in differs)}, "
                f"not {', '.join(_name(docs[0], k) for k in differs)})."
            )
        else:
            docs.append(doc)
    return docs, missing, other


def _same(a: dict | None, b: dict | None) -> bool:
    return (
        a is None or b is None or same_model(a, b)
    )  # a metric one repeat did not measure mixes nothing


def _name(doc: ListeningSummary, kind: str) -> str:
    ident = doc.backends.get(kind)
    return ident["name"] if ident else "none"


def _row(category: str, cells: list[GroupSummary]) -> dict:
    return {"category": category} | {key: [getattr(cell, key) for cell in cells] for key in FIELDS}


def _backend_lines(backends: dict) -> list[str]:
    lines = []
    for kind, ident in backends.items():
        sha = (
            f" (sha256 {ident['checkpoint_sha256'][:12]}…)"
            if ident and ident.get("checkpoint_sha256")
            else ""
        )
        lines.append(f"- {kind}: {ident['name'] if ident else 'unavailable (null)'}{sha}")
    return lines + [""]


def listening_section(repeats: list[RepeatPaths]) -> Section:
    """Markdown lines, their tables and the data behind them (per dataset, per category,
    per repeat)."""
    docs, missing, other = _load(repeats)
    data: dict = {
        "repeats_missing": missing,
        "repeats_other_backends": other,
        "datasets": {},
        "backends": [d.backends for d in docs],
    }
    section = Section(["## Listening quality", ""], data)
    lines = section.lines
    if not docs:
        lines.append("No repeat has listening scores yet (run the asr step).")
        return section
    lines += _backend_lines(docs[0].backends)
    lines += ["", NOTE, ""]
    cols = columns(docs[0].backends)
    for dataset in ("v1.5", "v1.0"):
        cats = [c for d in docs for c in d.datasets.get(dataset, {})]
        order = sorted(set(cats), key=_order)
        if not order:
            continue
        table, data["datasets"][dataset] = results_table(dataset, "", cols), {}
        for cat in order:
            cells = [d.datasets[dataset][cat] for d in docs if cat in d.datasets.get(dataset, {})]
            data["datasets"][dataset][cat] = [cell.model_dump(mode="json") for cell in cells]
            table.add(**_row(cat, cells))
        lines += [f"### {dataset}", ""]
        section.show(table)
    lines += other
    if missing:
        lines.append(f"Not scored yet: {', '.join(missing)}.")
    return section
