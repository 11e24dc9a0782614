"""#26: docs/formats.md's "Session graph" lists (formats, controls, roles, the places a kind runs)
are the registries' own (``serving/graph/streams.py``, ``serving/graph/registry.py``): a role,
format, control or "where it runs" category added to or removed from a registry and not from the
doc (or the other way) fails here, naming it. The kinds themselves are not in the doc: ``python -m
fdb serve --kinds`` prints them from the registry, so a new kind needs no doc line."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from fdb.cli import main
from serving.graph.registry import BACKENDS, ROLES, WHERE, where_it_runs
from serving.graph.streams import CONTROLS_IN, CONTROLS_OUT, FORMATS

DOC = Path(__file__).resolve().parents[1] / "docs" / "formats.md"
SECTION = "## Session graph"
NAME = re.compile(r"[a-z][a-z0-9_]*(?:\.[a-z_]+)?")  # a backticked kind, role, format or control


def _bullets(text: str) -> list[str]:
    """Each bullet of ``text``, its continuation lines joined to it (a nested bullet is its own)."""
    bullets: list[str] = []
    indent = None
    for line in text.splitlines():
        stripped = line.lstrip()
        depth = len(line) - len(stripped)
        if stripped.startswith("- "):
            bullets.append(stripped[2:])
            indent = depth
        elif bullets and indent is not None and stripped and depth > indent:
            bullets[-1] += " " + stripped
        else:
            indent = None
    return bullets


def _section() -> str:
    text = DOC.read_text(encoding="utf-8")
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    return text[start : end if end >= 0 else None]


def listed(label: str) -> list[str]:
    """The backticked names of the section's bullet ``label: ...`` (or ``label (why): ...``), in
    the doc's order."""
    head = re.compile(rf"{re.escape(label)}(?: \([^)]*\))?: (.*)")
    found = [m.group(1) for bullet in _bullets(_section()) if (m := head.fullmatch(bullet))]
    assert len(found) == 1, f"docs/formats.md ({SECTION}) has {len(found)} '{label}:' bullets"
    return [name for name in re.findall(r"`([^`]*)`", found[0]) if NAME.fullmatch(name)]


REGISTERED = {
    "Formats": lambda: set(FORMATS),
    "Controls in": lambda: set(CONTROLS_IN),
    "Controls out": lambda: set(CONTROLS_OUT),
    "Roles": lambda: set(ROLES),
}


@pytest.mark.parametrize("label", list(REGISTERED))
def test_the_docs_list_is_the_registrys(label):
    names = listed(label)
    twice = sorted(name for name, n in Counter(names).items() if n > 1)
    missing = sorted(REGISTERED[label]() - set(names))
    extra = sorted(set(names) - REGISTERED[label]())
    assert not (twice or missing or extra), (
        f"docs/formats.md, {SECTION}, '{label}': missing {missing}, not registered {extra}, "
        f"listed twice {twice}"
    )


def test_the_doc_explains_every_place_a_kind_runs():
    """Each category ``--kinds`` prints in its third column is one bullet `` `name`: what it
    means``; a new category needs its line, a new kind none."""
    explained = [m.group(1) for b in _bullets(_section()) if (m := re.match(r"`([^`]+)`: ", b))]
    twice = sorted(name for name, n in Counter(explained).items() if n > 1)
    missing = sorted(set(WHERE) - set(explained))
    extra = sorted(set(explained) - set(WHERE))
    assert not (twice or missing or extra), (
        f"docs/formats.md, {SECTION}, where a kind runs: missing {missing}, not a category of "
        f"serving.graph.registry.WHERE {extra}, explained twice {twice}"
    )


def test_every_registered_kind_runs_somewhere_and_says_what_it_is():
    """A kind in no category (no node, no options, no system backend) would show no place; one
    without a summary would show no description in ``--kinds``."""
    assert not [b.kind for b in BACKENDS if not where_it_runs(b)]
    assert not [b.kind for b in BACKENDS if not b.summary.strip()]


def test_serve_kinds_lists_every_registered_kind_once(capsys):
    """`python -m fdb serve --kinds`: each kind of ``BACKENDS`` once, with its role and where it
    runs, and exit 0 before anything is served."""
    with pytest.raises(SystemExit) as exit_info:
        main(["serve", "--kinds"])
    out = capsys.readouterr().out
    assert exit_info.value.code == 0, out
    rows = [line.split(maxsplit=2) for line in out.splitlines()]
    kinds = Counter(row[1] for row in rows)
    for b in BACKENDS:
        assert kinds[b.kind] == 1, f"`serve --kinds` lists {b.kind!r} {kinds[b.kind]} times"
        (row,) = [row for row in rows if row[1] == b.kind]
        assert row[0] == b.role
        assert row[2].startswith(", ".join(where_it_runs(b))), row
        assert row[2].endswith(b.summary), row
