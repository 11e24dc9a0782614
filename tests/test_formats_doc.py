"""#26: docs/formats.md's "Session graph" lists (formats, controls, roles, kinds by where they run)
are the registries' own (``serving/graph/streams.py``, ``serving/graph/registry.py``): a kind, role,
format or control added to or removed from a registry and not from the doc (or the other way)
fails here, naming it."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from serving.graph.registry import BACKENDS, ROLES
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


def _backends():
    """The registry's own entries (nothing is imported); a kind a test registers at run time
    (``register()``) is not the product's."""
    return list(BACKENDS)


REGISTERED = {
    "Formats": lambda: set(FORMATS),
    "Controls in": lambda: set(CONTROLS_IN),
    "Controls out": lambda: set(CONTROLS_OUT),
    "Roles": lambda: set(ROLES),
    "Graph node": lambda: {
        b.kind for b in _backends() if b.node is not None and b.role != "native"
    },
    "Native session": lambda: {b.kind for b in _backends() if b.role == "native"},
    "Graph declaration only": lambda: {
        b.kind for b in _backends() if b.options is not None and b.node is None
    },
    "Stage": lambda: {b.kind for b in BACKENDS if b.stage},
    "System backend": lambda: {b.kind for b in _backends() if b.system_options is not None},
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


def test_every_registered_kind_is_in_some_list():
    """A kind that runs nowhere (no node, no options, no system backend) would be in no list."""
    kinds = ("Graph node", "Native session", "Graph declaration only", "Stage", "System backend")
    shown = {name for label in kinds for name in listed(label)}
    assert {b.kind for b in _backends()} <= shown
