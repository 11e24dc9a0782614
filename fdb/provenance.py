"""Provenance: what produced an output (fdb revision, package versions, command, inputs)."""

from __future__ import annotations

import functools
import platform
import subprocess
import sys
from pathlib import Path

from pydantic import BaseModel

import fdb
from fdb.io import redact_command
from fdb.models.packages import PROVENANCE_RUNTIMES, package_version

REPO_ROOT = Path(__file__).resolve().parent.parent
CORE_PACKAGES = (
    "numpy",
    "scipy",
    "soundfile",
    "soxr",
    "pydantic",
    "websockets",
    "fastapi",
    "uvicorn",
    *(package.distribution for package in PROVENANCE_RUNTIMES),
    "jiwer",
    "whisper-normalizer",
)


class Provenance(BaseModel):
    fdb_version: str
    fdb_revision: str | None
    python: str
    platform: str
    packages: dict[str, str | None]
    command: list[str]


@functools.lru_cache(maxsize=1)
def git_revision() -> str | None:
    """The fdb git revision, with '+dirty' when the work tree has uncommitted changes."""
    try:
        rev = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
        return rev + ("+dirty" if dirty else "")
    except Exception:
        return None


def current(packages: tuple[str, ...] = CORE_PACKAGES) -> Provenance:
    return Provenance(
        fdb_version=fdb.__version__,
        fdb_revision=git_revision(),
        python=sys.version.split()[0],
        platform=platform.platform(),
        packages={name: package_version(name) for name in packages},
        command=redact_command(list(sys.argv)),
    )
