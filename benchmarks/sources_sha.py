"""The sources a benchmark run executed, as one sha256 that anyone can recompute from a commit.

    python benchmarks/sources_sha.py [--root DIR] [--list FILE] [DIR ...]

prints the sha256 of the listing ``sha256  path`` of every ``*.py`` file under the DIRs (default:
fdb's packages and benchmarks) of ``--root`` (default: here), one line a file in the order of
their POSIX paths relative to the root, written to FILE with ``--list``. To check a run against a
commit: ``git archive REV fdb serving … | tar -x -C DIR`` and the same command with ``--root
DIR``; two listings show which file differs.

The GPU scripts (gpu_suite.sh, gpu_ab_cascade.sh) used a shell pipeline before
(``find | sort -z | xargs sha256sum | sha256sum``). Its values from the GPU machine did not
reproduce here from the same commit (docs/gpu.md, sixth session), and with no listing nobody could
tell why; this one orders, reads and hashes in Python alone.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

DIRS = ("fdb", "serving", "recorders", "scorers", "runs", "reports", "judges", "benchmarks")


def listing(root: Path, dirs: tuple[str, ...] = DIRS) -> str:
    """``sha256  path`` of every ``*.py`` file under ``dirs`` of ``root`` (caches left out),
    ordered by path."""
    files = sorted(
        path.relative_to(root).as_posix()
        for name in dirs
        if (root / name).is_dir()
        for path in (root / name).rglob("*.py")
        if "__pycache__" not in path.parts and path.is_file()
    )
    return "".join(f"{hashlib.sha256((root / f).read_bytes()).hexdigest()}  {f}\n" for f in files)


def sources_sha256(root: Path, dirs: tuple[str, ...] = DIRS) -> str:
    return hashlib.sha256(listing(root, dirs).encode("utf-8")).hexdigest()


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "dirs", nargs="*", help=f"folders under the root (default: {' '.join(DIRS)})"
    )
    parser.add_argument("--root", type=Path, default=Path("."), help="the tree (default: here)")
    parser.add_argument("--list", type=Path, help="write the listing the sha256 is made of here")
    args = parser.parse_args(argv)
    dirs = tuple(args.dirs) or DIRS
    text = listing(args.root, dirs)
    if args.list is not None:
        args.list.write_text(text, encoding="utf-8")
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    print(digest)
    return digest


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
