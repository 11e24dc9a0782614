"""The one pin table of the Full-Duplex-Bench checkout and its check (the judges' and the
evaluator's tests cover their use of it): where files are found, what an accepted revision
needs, and how the outputs name the revision."""

from __future__ import annotations

import pytest

from fdb.errors import FdbError
from fdb.io import sha256_file
from fdb.official_source import (
    BEHAVIOR_PROMPT,
    EVALUATION_DIR,
    EVALUATOR_FILES,
    PINNED_FILES,
    pinned_path,
    verify_checkout,
)


def _stand_in(root, rels):
    for rel in rels:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(f"# stand-in for {rel}\n")
    return root


def test_one_table_for_the_evaluator_and_the_judges():
    assert set(EVALUATOR_FILES) | {BEHAVIOR_PROMPT} == set(PINNED_FILES)
    assert all(
        rel.startswith(EVALUATION_DIR + "/") and len(sha) == 64 for rel, sha in PINNED_FILES.items()
    )


def test_files_are_found_under_the_root_or_the_evaluation_dir(tmp_path):
    root = _stand_in(tmp_path / "fdb", [BEHAVIOR_PROMPT])
    evaluation = root / EVALUATION_DIR
    assert pinned_path(root, BEHAVIOR_PROMPT) == root / BEHAVIOR_PROMPT
    assert pinned_path(evaluation, BEHAVIOR_PROMPT) == evaluation / "instruction" / "behavior.txt"
    pins = {BEHAVIOR_PROMPT: sha256_file(root / BEHAVIOR_PROMPT)}
    for source in (root, evaluation):
        check = verify_checkout(source, pins=pins)
        assert check.differences == [] and check.label() == "Full-Duplex-Bench 3e799c4 (pinned)"


def test_an_accepted_revision_needs_git_and_never_covers_a_missing_file(tmp_path):
    root = _stand_in(tmp_path / "fdb", [BEHAVIOR_PROMPT])
    with pytest.raises(FdbError, match="is not a git work tree"):
        verify_checkout(root, [BEHAVIOR_PROMPT], accept_revision="abc1234")
    with pytest.raises(FdbError, match="eval_backchannel.py is missing") as err:
        verify_checkout(root, accept_revision="abc1234")
    assert "--accept-revision" not in (
        err.value.hint or ""
    )  # accepting cannot supply a missing file
    more = [f"{p} (missing)" for p in sorted(EVALUATOR_FILES)[2:]] + [
        BEHAVIOR_PROMPT
    ]  # by name: one line, fix kept
    assert err.value.message.endswith(f"and 5 more: {', '.join(more)}")
