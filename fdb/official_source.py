"""The user's Full-Duplex-Bench checkout: the ONE table of pinned files and their sha256, and the
check every reader of the checkout goes through (the judges' behavior and relevance prompts, the
original v1.0 evaluator, the ICC ground truth of the backchannel JSD).

fdb never vendors these files (CC BY-NC 4.0); it reads them from the checkout at run time.

The hashes are the ones an independent reimplementation pinned to 3e799c4 publishes. The
public history of DanielLin94144/Full-Duplex-Bench does not hold 3e799c4, and every revision of
it that can be read has an ``eval_backchannel.py`` whose sha256 differs from the pin (the other
files match). So a checkout may differ from the pin, and then ``verify_checkout`` names each
differing file with its expected and actual sha256. The user may accept the checkout's own
revision deliberately (``--accept-revision REV``): the checkout must then be a git work tree at
exactly REV, without local changes to the pinned files, and every output records the accepted
revision and the accepted differences (``CheckoutCheck``).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from pydantic import BaseModel, Field

from fdb.errors import FdbError
from fdb.io import Record, sha256_file

PINNED_REVISION = "3e799c45a045256f47d5f1c9cda90157e2d2ec9e"
EVALUATION_DIR = "v1_v1.5/evaluation"
BEHAVIOR_PROMPT = f"{EVALUATION_DIR}/instruction/behavior.txt"
RELEVANCE_SCORER = f"{EVALUATION_DIR}/eval_user_interruption.py"
ICC_GT = f"{EVALUATION_DIR}/icc_gt_distribution.json"
PINNED_FILES: dict[str, str] = {
    f"{EVALUATION_DIR}/evaluate.py": (
        "ae362d718f80428a6fe73d8a87e9e3b8935e86008267f0b2e34d1cc7573f1d4e"
    ),
    f"{EVALUATION_DIR}/eval_pause_handling.py": (
        "1e86519b4f4543f2f667ce60b9bea2f6148a3bc4255bb20c1ea111b45e0adbb5"
    ),
    f"{EVALUATION_DIR}/eval_smooth_turn_taking.py": (
        "cb7d6b987cd415e1b71b6eea06e67ea8fdc77a1167107e5c0552105bac05b2df"
    ),
    RELEVANCE_SCORER: "e701c14579c1477577b262265cfff75b28ac2e057beee5ba82572afa2a35963a",
    f"{EVALUATION_DIR}/eval_backchannel.py": (
        "36371e3efb4a25e6b5afe317d70c81ad8f8815b95ef025baa06b11c378ecd0d9"
    ),
    ICC_GT: "92bcd0ff27246aaa9a0136737b476afd456cd393f003944c3394c140e590f2a8",
    BEHAVIOR_PROMPT: "19e5477dac9a9a1e11de126783a0b820b3ecb70db5e91181824fa944e1947977",
}
EVALUATOR_FILES = tuple(p for p in PINNED_FILES if p != BEHAVIOR_PROMPT)  # what evaluate.py runs on
CHECKOUT_SCHEMA = "fdb-reference-checkout-1"


class FileDifference(BaseModel):
    path: str  # relative to the checkout root
    expected_sha256: str
    actual_sha256: str | None  # None: the file is missing

    def line(self) -> str:
        if self.actual_sha256 is None:
            return f"{self.path} is missing"
        return f"{self.path} has sha256 {self.actual_sha256}, expected {self.expected_sha256}"


class CheckoutCheck(Record):
    """What was verified of a checkout, recorded in every output that used it."""

    schema_: str = Field(CHECKOUT_SCHEMA, alias="schema")
    checkout: str
    pinned_revision: str = PINNED_REVISION
    accepted_revision: str | None = None  # --accept-revision, resolved to the full commit
    checkout_revision: str | None = None  # the checkout's git HEAD, when it is a git work tree
    files: dict[str, str] = Field(
        default_factory=dict
    )  # path -> actual sha256 of each checked file
    differences: list[FileDifference] = Field(
        default_factory=list
    )  # accepted differences from the pins

    model_config = {"populate_by_name": True}

    @property
    def revision(self) -> str:
        """The revision the files are vouched for: the pinned one, or the one the user accepted."""
        return (
            self.accepted_revision
            if self.differences and self.accepted_revision
            else self.pinned_revision
        )

    def label(self) -> str:
        """``Full-Duplex-Bench 3e799c4``, or the accepted revision and what differs from the pin."""
        if not self.differences:
            return f"Full-Duplex-Bench {self.pinned_revision[:7]} (pinned)"
        names = ", ".join(Path(d.path).name for d in self.differences)
        return (
            f"Full-Duplex-Bench {self.revision[:7]} (accepted with --accept-revision; differs "
            f"from the pinned {self.pinned_revision[:7]} in {names})"
        )


def pinned_places(rel: str) -> list[str]:
    """Where the pinned file ``rel`` may lie under a source: the checkout root, its ``v1_v1.5``
    directory, or the evaluation directory itself."""
    parts = EVALUATION_DIR.split("/")
    stripped = [
        rel.removeprefix("/".join(parts[:depth]) + "/") for depth in range(1, len(parts) + 1)
    ]
    return list(dict.fromkeys([rel, *stripped]))


def pinned_path(source: str | Path, rel: str) -> Path:
    """Where the pinned file ``rel`` lies under ``source`` (``pinned_places``); ``source/rel``
    when ``source`` holds the evaluation directory or no place holds the file."""
    source = Path(source).expanduser()
    if (source / EVALUATION_DIR).is_dir():
        return source / rel
    return next((source / p for p in pinned_places(rel)[1:] if (source / p).exists()), source / rel)


def _git(source: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(source), *args],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def checkout_revision(source: str | Path) -> str | None:
    """The checkout's git HEAD (None when it is not a git work tree)."""
    return _git(Path(source), "rev-parse", "HEAD")


def _accepted(source: Path, revision: str, paths: list[str]) -> tuple[str, str | None]:
    """(the accepted revision as a full commit, HEAD); refuses anything but a clean checkout of
    it."""
    head = checkout_revision(source)
    if head is None:
        raise FdbError(
            f"--accept-revision {revision}: {source} is not a git work tree, so its revision "
            "cannot be checked",
            "clone Full-Duplex-Bench with git and check out the revision you accept",
        )
    full = _git(source, "rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}")
    if full != head:
        raise FdbError(
            f"--accept-revision {revision}: the checkout {source} is at {head}, not at "
            f"{full or revision + ' (unknown to it)'}",
            f"run git -C {source} checkout {revision}, or accept {head[:12]} instead",
        )
    changed = _git(source, "status", "--porcelain", "--", *paths)
    if changed:
        raise FdbError(
            f"--accept-revision {revision}: {source} has local changes in pinned files: "
            + "; ".join(changed.splitlines()),
            f"undo them (git -C {source} checkout -- .)",
        )
    return full, head


def verify_checkout(
    source: str | Path,
    paths: list[str] | tuple[str, ...] | None = None,
    accept_revision: str | None = None,
    pins: dict[str, str] = PINNED_FILES,
) -> CheckoutCheck:
    """Check the files ``paths`` (default: every pinned file) of ``source`` against ``pins``.

    A missing file always stops. A differing file stops with the path, expected and actual
    sha256 of every difference, unless the user accepted the checkout's revision
    (``accept_revision``: a clean git checkout at exactly that revision); the differences are
    then recorded in the returned ``CheckoutCheck``."""
    root = Path(source).expanduser()
    if not root.is_dir():
        raise FdbError(
            f"the Full-Duplex-Bench checkout {root} is not a directory",
            f"clone DanielLin94144/Full-Duplex-Bench and check out {PINNED_REVISION[:7]}, then "
            "pass its path",
        )
    paths = list(pins if paths is None else paths)
    files, differences = {}, []
    for rel in sorted(paths):
        path = pinned_path(root, rel)
        actual = sha256_file(path) if path.is_file() else None
        if actual is not None:
            files[rel] = actual
        if actual != pins[rel]:
            differences.append(
                FileDifference(path=rel, expected_sha256=pins[rel], actual_sha256=actual)
            )
    missing = [d for d in differences if d.actual_sha256 is None]
    if missing or (differences and accept_revision is None):
        raise FdbError(
            f"{root} is not the pinned Full-Duplex-Bench {PINNED_REVISION[:7]}: "
            + _listed(differences),
            _fix(root, bool(missing)),
        )
    accepted, head = (
        _accepted(root, accept_revision, [str(pinned_path(root, p)) for p in paths])
        if accept_revision
        else (None, checkout_revision(root))
    )
    return CheckoutCheck(
        checkout=str(root),
        accepted_revision=accepted,
        checkout_revision=head,
        files=files,
        differences=differences,
    )


def _listed(differences: list[FileDifference], shown: int = 2) -> str:
    """Each difference with both full hashes, the first ``shown`` of them (missing files first);
    the rest by name, so the one-line error (the CLI keeps 1000 characters) still ends with its
    fix."""
    ordered = sorted(differences, key=lambda d: d.actual_sha256 is not None)  # missing files first
    text = "; ".join(d.line() for d in ordered[:shown])
    rest = [d.path + (" (missing)" if d.actual_sha256 is None else "") for d in ordered[shown:]]
    return text + (f"; and {len(rest)} more: " + ", ".join(rest) if rest else "")


def _fix(root: Path, missing: bool) -> str:
    fix = f"run git -C {root} checkout {PINNED_REVISION} (and undo local changes)"
    if missing:
        return fix
    head = checkout_revision(root)
    return (
        f"{fix}, or accept this checkout's revision deliberately with --accept-revision "
        f"{head or 'REV'} (recorded in the outputs)"
    )
