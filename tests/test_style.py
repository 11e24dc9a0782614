"""The code style the repository declares in pyproject.toml ([tool.ruff]): ruff's lint rules,
the 100-column line length (E501) among them, and ruff's formatter. A line over 100 columns or
a file `ruff format .` would change fails the suite, naming the file and line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args], cwd=REPO, capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module", autouse=True)
def has_ruff():
    if ruff("--version").returncode != 0:
        pytest.skip("ruff is not installed (pip install -e '.[dev]')")


def test_ruff_lint_rules_hold_line_length_included():
    result = ruff("check", "--output-format", "concise", ".")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def test_ruff_format_leaves_every_file_unchanged():
    result = ruff("format", "--check", ".")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def test_a_long_line_fails_the_check(tmp_path):
    """The rule bites: a 101-column line in a copy of the configuration is an E501."""
    (tmp_path / "pyproject.toml").write_text((REPO / "pyproject.toml").read_text())
    (tmp_path / "long.py").write_text("X = '" + "x" * 95 + "'\n")
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--output-format", "concise", "."],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1 and "E501" in result.stdout, result.stdout
