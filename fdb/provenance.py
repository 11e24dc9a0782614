"""Provenance: what produced an output (fdb revision, package versions, command, inputs)."""

from __future__ import annotations

import functools
import platform
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from pydantic import BaseModel

import fdb
from fdb.io import redact_url
from fdb.models.packages import PROVENANCE_RUNTIMES

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


def package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


_URL = re.compile(r"\b(?:https?|wss?)://[^\s\"'<>]+")


def redact_command(argv: list[str]) -> list[str]:
    """Drop values of options that might carry secrets, and the secrets of URLs
    (:func:`fdb.io.redact_url`: query keys/tokens, ``user:password@``). An argument holding a
    URL is only URL-redacted, so a ``?token=`` in it does not hide the next argument."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append("<redacted>")
            hide_next = False
            continue
        if _URL.search(arg):
            out.append(_URL.sub(lambda m: redact_url(m.group(0)), arg))
            continue
        lowered = arg.lower()
        if any(k in lowered for k in ("key", "token", "secret", "password")):
            if "=" in arg:
                out.append(arg.split("=", 1)[0] + "=<redacted>")
            else:
                out.append(arg)
                hide_next = True
            continue
        out.append(arg)
    return out


def current(packages: tuple[str, ...] = CORE_PACKAGES) -> Provenance:
    return Provenance(
        fdb_version=fdb.__version__,
        fdb_revision=git_revision(),
        python=sys.version.split()[0],
        platform=platform.platform(),
        packages={name: package_version(name) for name in packages},
        command=redact_command(list(sys.argv)),
    )
