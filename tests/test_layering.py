"""The dependency direction of DESIGN.md, as the import-linter contracts in pyproject.toml
([tool.importlinter]): they hold on the tree, and each one breaks when an import crosses its
boundary (shown on a copy of the tree, never on the real one)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ROOTS = (
    "fdb",
    "serving",
    "recorders",
    "scorers",
    "judges",
    "runs",
    "reports",
    "benchmarks",
    "tests",
)


def lint_imports(cwd: Path) -> subprocess.CompletedProcess:
    """lint-imports of this interpreter's environment, run in cwd (it reads cwd/pyproject.toml
    and puts cwd first on sys.path, so a copy of the tree is linted as the copy)."""
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from importlinter.cli import lint_imports_command as cli; sys.exit(cli())",
            "--no-cache",
            "--no-logo",
        ],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
    )  # one contract name per line, unwrapped


def broken(result: subprocess.CompletedProcess) -> set[str]:
    return set(re.findall(r"^(.+) BROKEN(?: \(.*\))?$", result.stdout, re.MULTILINE))


def test_the_dependency_contracts_hold():
    result = lint_imports(REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout, result.stdout


@pytest.fixture(scope="module")
def tree_copy(tmp_path_factory) -> Path:
    """The Python files of the packages, benchmarks and tests, and pyproject.toml."""
    root = tmp_path_factory.mktemp("tree")

    def not_python(folder: str, names: list[str]) -> list[str]:
        return [
            n
            for n in names
            if n == "__pycache__" or (not n.endswith(".py") and not (Path(folder) / n).is_dir())
        ]

    for package in ROOTS:
        shutil.copytree(REPO / package, root / package, ignore=not_python)
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    return root


# (module written into the copy, its code, the contracts the crossing must break).
# The imports sit inside functions: lazy imports count as much as top-level ones.
CROSSINGS = {
    "ground-floor-imports-scorers": (
        "fdb/_crossing.py",
        "from scorers import v10_common",
        {"the ground floor (fdb minus fdb.cli) imports no other package of the project"},
    ),
    "ground-floor-imports-the-cli": (
        "fdb/_crossing.py",
        "import fdb.cli",
        {"the CLI is the top layer: only fdb.__main__ (and the tests) import fdb.cli"},
    ),
    "scorers-import-judges": (
        "scorers/_crossing.py",
        "from judges import behavior",
        {"recorders, scorers, judges and serving do not import each other"},
    ),
    "serving-imports-reports": (
        "serving/_crossing.py",
        "import reports.gate",
        {"recorders, scorers, judges and serving import neither runs, reports nor the CLI"},
    ),
    "reports-import-runs": (
        "reports/_crossing.py",
        "from runs import generate",
        {
            "reports never imports runs",  # and, through runs, recorders:
            "reports reads records through the ground floor: it imports neither "
            "scorers, judges, recorders nor serving",
        },
    ),
    "reports-import-scorers": (
        "reports/_crossing.py",
        "from scorers import serving",
        {
            "reports reads records through the ground floor: it imports neither "
            "scorers, judges, recorders nor serving"
        },
    ),
    "runs-imports-serving": (
        "runs/_crossing.py",
        "from serving import app",
        {"runs starts serving as a subprocess, never imports it"},
    ),
    "judges-import-tests": (
        "judges/_crossing.py",
        "from tests import conftest",
        {"the packages import neither benchmarks nor tests"},
    ),
    "benchmarks-import-tests": (
        "benchmarks/_crossing.py",
        "from tests.serving import conftest",
        {"benchmarks use the packages, never tests"},
    ),
}


@pytest.mark.parametrize("case", CROSSINGS, ids=list(CROSSINGS))
def test_a_crossing_import_breaks_its_contract(tree_copy, case):
    where, statement, contracts = CROSSINGS[case]
    module = tree_copy / where
    module.write_text(f'"""A crossing import."""\n\n\ndef cross():\n    {statement}\n')
    try:
        result = lint_imports(tree_copy)
    finally:
        module.unlink()
    print(result.stdout)
    assert result.returncode != 0, result.stdout + result.stderr
    assert broken(result) == contracts, result.stdout
    crossing = where.removesuffix(".py").replace("/", ".")
    assert f"{crossing} -> " in result.stdout, result.stdout  # the report names the import


def test_an_import_cycle_in_fdb_breaks_the_acyclic_contract(tree_copy):
    """Two modules of the ground floor that import each other (one lazily: that counts too)."""
    first, second = tree_copy / "fdb" / "_cycle_a.py", tree_copy / "fdb" / "_cycle_b.py"
    first.write_text('"""One side."""\n\nimport fdb._cycle_b  # noqa: F401\n')
    second.write_text('"""The other."""\n\n\ndef back():\n    import fdb._cycle_a  # noqa: F401\n')
    try:
        result = lint_imports(tree_copy)
    finally:
        first.unlink()
        second.unlink()
    assert result.returncode != 0, result.stdout + result.stderr
    assert broken(result) == {
        "no import cycles among the modules of fdb, serving, recorders, scorers, judges, runs and "
        "reports"
    }, result.stdout
    assert "._cycle_" in result.stdout, result.stdout  # the report names the import to cut


def test_an_import_cycle_in_serving_breaks_the_acyclic_contract(tree_copy):
    """The protocol layer importing the native engine built on it (lazily: that counts too):
    serving.duplex imports serving.realtime, so serving.realtime never imports serving.duplex."""
    module = tree_copy / "serving" / "realtime" / "_cycle.py"
    module.write_text(
        '"""A cycle."""\n\n\ndef back():\n    from serving.duplex import session  # noqa: F401\n'
    )
    try:
        result = lint_imports(tree_copy)
    finally:
        module.unlink()
    assert result.returncode != 0, result.stdout + result.stderr
    assert broken(result) == {
        "no import cycles among the modules of fdb, serving, recorders, scorers, judges, runs and "
        "reports"
    }, result.stdout
    assert ".realtime -> .duplex" in result.stdout, result.stdout  # the import to cut
