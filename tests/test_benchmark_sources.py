"""benchmarks/sources_sha.py: the sources sha256 the GPU scripts record is recomputable from a
commit's files, with a listing that names the file two runs differ in."""

from __future__ import annotations

import hashlib
import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "sources_sha.py"


def _module():
    spec = importlib.util.spec_from_file_location("sources_sha", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tree(root: Path) -> None:
    for rel, text in {
        "fdb/a.py": "A = 1\n",
        "fdb/sub/b.py": "B = 2\n",
        "fdb/sub/__pycache__/b.cpython-312.py": "stale\n",
        "fdb/notes.txt": "not a source\n",
        "benchmarks/run.py": "print('x')\n",
        "tests/test_a.py": "not among the folders\n",
    }.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def test_the_sha256_is_the_listing_of_the_sources_and_names_a_changed_file(tmp_path, capsys):
    sources = _module()
    _tree(tmp_path)
    listing = sources.listing(tmp_path)
    assert [line.split("  ")[1] for line in listing.splitlines()] == [
        "benchmarks/run.py",
        "fdb/a.py",
        "fdb/sub/b.py",
    ]
    digest = sources.main(["--root", str(tmp_path), "--list", str(tmp_path / "list.txt")])
    assert capsys.readouterr().out.strip() == digest
    assert (
        digest == hashlib.sha256(listing.encode()).hexdigest() == sources.sources_sha256(tmp_path)
    )
    assert (tmp_path / "list.txt").read_text() == listing
    (tmp_path / "fdb" / "sub" / "b.py").write_text("B = 3\n")
    changed = sources.listing(tmp_path)
    assert sources.sources_sha256(tmp_path) != digest
    differ = [a for a, b in zip(changed.splitlines(), listing.splitlines(), strict=True) if a != b]
    assert len(differ) == 1 and differ[0].endswith("  fdb/sub/b.py")


@pytest.mark.skipif(shutil.which("sha256sum") is None, reason="needs coreutils' sha256sum")
def test_it_equals_the_shell_pipeline_the_gpu_scripts_used_in_the_c_locale(tmp_path):
    """The earlier pipeline (find | sort -z | xargs sha256sum | sha256sum) in the C locale, here:
    the same value, so this repository's earlier figures stay comparable where it reproduces."""
    sources = _module()
    _tree(tmp_path)
    shutil.rmtree(tmp_path / "fdb" / "sub" / "__pycache__")
    shell = subprocess.run(
        "find fdb benchmarks -name '*.py' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum "
        "| sha256sum",
        shell=True,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()[0]
    assert sources.sources_sha256(tmp_path, ("fdb", "benchmarks")) == shell
