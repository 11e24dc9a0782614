"""Function-level imports only where they must be (issue #26): each one inside a function of the
covered packages carries a `# lazy: REASON` comment on its line or the line above (an optional
heavy dependency, a slow import kept off a start-up path, or an import cycle it breaks), or
follows, as the next statement, an import that does (one comment over a run of imports); every
other import sits at the top of its module."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The packages whose function-level imports have been sorted out: every package of the project.
COVERED = ("fdb", "reports", "scorers", "judges", "recorders", "runs", "serving", "benchmarks")
MARK = "# lazy:"


def unmarked(source: str) -> list[int]:
    """The line numbers of the imports inside a function of ``source`` that have no `# lazy:`
    comment on their line or on the line above, nor follow (as the next statement) one that
    has."""
    lines = source.splitlines()
    found = []

    def marked(node: ast.stmt) -> bool:
        above = lines[node.lineno - 2].strip() if node.lineno > 1 else ""
        return MARK in lines[node.lineno - 1] or above.startswith(MARK)

    def visit(node: ast.AST, in_function: bool) -> None:
        covered = False  # the statement before this one is a marked (or covered) import
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if in_function and isinstance(child, (ast.Import, ast.ImportFrom)):
                covered = covered or marked(child)
                if not covered:
                    found.append(child.lineno)
            else:
                covered = False
            visit(child, inner)

    visit(ast.parse(source), False)
    return found


def covered_files(root: Path = ROOT) -> list[Path]:
    return sorted(path for package in COVERED for path in (root / package).rglob("*.py"))


def unmarked_imports(root: Path = ROOT) -> list[str]:
    return [
        f"{path.relative_to(root)}:{line}"
        for path in covered_files(root)
        for line in unmarked(path.read_text(encoding="utf-8"))
    ]


def test_function_level_imports_say_why_they_are_lazy():
    found = unmarked_imports()
    assert not found, (
        "imports inside functions without a '# lazy: REASON' comment (move each to the top of "
        "its module, or say why it must stay lazy): " + ", ".join(found)
    )


def test_the_covered_packages_are_there():
    assert len(covered_files()) > 100


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import os\n\ndef f():\n    return os\n", []),
        ("def f():\n    import torch\n", [2]),
        ("def f():\n    # lazy: torch is optional\n    import torch\n", []),
        ("def f():\n    import torch  # lazy: torch is optional\n", []),
        ("def f():\n    # lazy: torch is optional\n    import torch\n    import numpy\n", []),
        ("class A:\n    def f(self):\n        if True:\n            from x import y\n", [4]),
        (
            "async def f():\n    try:\n        import uvloop\n    except ImportError:\n"
            "        pass\n",
            [3],
        ),
        ("def f():\n    def g():\n        import json\n", [3]),
        ("def f():\n    # lazy:\n\n    import torch\n", [4]),  # the comment must be just above
        ("def f():\n    # lazy: optional\n    import torch\n\n    import onnxruntime\n", []),
        ("def f():\n    # lazy: optional\n    import torch\n    x = 1\n    import json\n", [5]),
        ("def f():\n    import json\n    # lazy: optional\n    import torch\n", [2]),
    ],
)
def test_unmarked_finds_the_imports_without_a_reason(source, expected):
    assert unmarked(source) == expected
