"""One table object for every published table: Markdown, CSV and JSON are rendered from it.

A :class:`Table` holds typed values (a pandas DataFrame, one column per :class:`Column`) and,
per column, the formatter that turns a value into the cell a reader sees. ``markdown()`` and
``csv()`` both render those cells (CSV cells are exactly what the Markdown shows, ``n/a``
included), ``records()`` gives the typed values for JSON (``None`` where a value is missing).
So the three can never disagree, and a new column is added in one place: the column list.

The Markdown renderer is a few lines of our own: pandas' ``to_markdown`` needs ``tabulate``,
and its alignment padding would make a PR comment harder to diff.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from fdb.io import atomic_write_text

NA = "n/a"


def plain(value: Any) -> str:
    """The default cell: ``n/a`` for missing, numbers as Python prints them."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return NA
    return str(value)


@dataclass(frozen=True)
class Column:
    key: str
    header: str
    fmt: Callable[[Any], str] = plain


@dataclass
class Table:
    """``name`` is a file-name slug (CSV ``tables/<name>.csv``), ``title`` its heading."""

    name: str
    title: str
    columns: Sequence[Column]
    rows: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, **values: Any) -> None:
        unknown = set(values) - {c.key for c in self.columns}
        if unknown:
            raise KeyError(f"table {self.name}: unknown columns {sorted(unknown)}")
        self.rows.append(values)

    @property
    def frame(self) -> pd.DataFrame:
        """The typed values, one column per Column, in column order (missing as None)."""
        keys = [c.key for c in self.columns]
        data = {key: pd.Series([row.get(key) for row in self.rows], dtype=object) for key in keys}
        return pd.DataFrame(data, columns=keys)

    def cells(self) -> list[list[str]]:
        """Every row as the strings a reader sees."""
        frame = self.frame
        return [
            [column.fmt(value) for column, value in zip(self.columns, values, strict=True)]
            for values in frame.itertuples(index=False, name=None)
        ]

    def headers(self) -> list[str]:
        return [c.header for c in self.columns]

    def markdown(self, heading: str | None = "###") -> list[str]:
        lines = [f"{heading} {self.title}", ""] if heading else []
        lines += [
            "| " + " | ".join(_escape(h) for h in self.headers()) + " |",
            "|" + "|".join(" --- " for _ in self.columns) + "|",
        ]
        lines += ["| " + " | ".join(_escape(c) for c in row) + " |" for row in self.cells()]
        for note in self.notes:
            lines += ["", note]
        return lines + [""]

    def csv(self) -> str:
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(self.headers())
        writer.writerows(self.cells())
        return buffer.getvalue()

    def records(self) -> list[dict[str, Any]]:
        """The typed values for JSON: None for missing, NaN never."""
        return [{c.key: _json_value(row.get(c.key)) for c in self.columns} for row in self.rows]

    def dump(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "title": self.title,
            "columns": [c.key for c in self.columns],
            "headers": self.headers(),
            "rows": self.records(),
            "notes": list(self.notes),
        }


def _escape(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _json_value(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def write_tables(folder, tables: Sequence[Table]) -> list:
    """``folder/NN-<name>.csv`` for each table, atomically; stale CSVs of an earlier write
    removed."""
    folder = Path(folder)
    written = [
        atomic_write_text(folder / f"{index:02d}-{table.name}.csv", table.csv())
        for index, table in enumerate(tables, start=1)
    ]
    if folder.is_dir():
        for stale in set(folder.glob("*.csv")) - set(written):
            stale.unlink()
    return written
