"""Running the original evaluator from a checkout: the sha256 refusal on a fake checkout, the
[Result] parser, and the staging / subprocess / evaluator.json plumbing with a stand-in
evaluate.py (its hashes passed as the pins, since the real checkout is not available here)."""

from __future__ import annotations

import textwrap

import pytest

from benchmarks.support.treebuild import V10Tree, interrupt_json, pause_json, turn_json
from fdb.errors import FdbError
from fdb.io import atomic_write_json, read_json, sha256_file
from fdb.official_source import EVALUATOR_FILES, PINNED_REVISION
from fdb.records.v10_reference import load_reference
from scorers.v10_evaluator import (
    EVALUATION_DIR,
    PINNED_FILES,
    parse_result,
    run_evaluator,
    verify_checkout,
)
from tests.conftest import git_commit_all

FAKE_EVALUATE = textwrap.dedent("""
    import argparse, os
    parser = argparse.ArgumentParser()
    parser.add_argument("--task")
    parser.add_argument("--root_dir")
    args = parser.parse_args()
    assert os.path.exists("icc_gt_distribution.json"), "cwd is not the evaluation folder"
    ids = sorted(os.listdir(args.root_dir))
    for i in ids:
        assert sorted(os.listdir(os.path.join(args.root_dir, i)))[0].startswith("output")
    if args.task == "pause_handling" and len(ids) > 1:
        raise SystemExit("boom")
    print("per-sample chatter: 1.0")
    print("---------------------------------------------------")
    print("[Result]")
    if args.task == "backchannel":
        print("JSD - Mean: 0.7143 \\u00b1 0.1000")
        print("TOR - Mean: 0.3273 \\u00b1 0.4692")
        print("Frequency - Mean: 0.1584 \\u00b1 0.0100")
        print()
        print("[Raw Counts]")
        print(f"Number of samples: {len(ids)}")
    else:
        print("Average take turn: ", 1.0)
        print("Average latency: ", 1.3499999999999983)
    print("---------------------------------------------------")
""")


def fake_checkout(root, evaluate=FAKE_EVALUATE):
    for rel in PINNED_FILES:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(evaluate if rel.endswith("evaluate.py") else f"# stand-in for {rel}\n")
    return root


def test_refuses_a_checkout_that_is_not_the_pinned_revision(tmp_path):
    checkout = fake_checkout(tmp_path / "Full-Duplex-Bench")
    with pytest.raises(FdbError) as err:
        verify_checkout(checkout)
    message = err.value.one_line()
    assert f"not the pinned Full-Duplex-Bench {PINNED_REVISION[:7]}" in message
    backchannel = "v1_v1.5/evaluation/eval_backchannel.py"
    actual = sha256_file(checkout / backchannel)
    assert (
        f"{backchannel} has sha256 {actual}, expected {PINNED_FILES[backchannel]}" in message
    )  # full hashes
    assert (
        f"git -C {checkout} checkout {PINNED_REVISION}" in message
        and "--accept-revision REV" in message
    )
    (checkout / "v1_v1.5/evaluation/evaluate.py").unlink()
    with pytest.raises(FdbError, match="v1_v1.5/evaluation/evaluate.py is missing"):
        verify_checkout(checkout)
    with pytest.raises(FdbError, match="is not a directory"):
        verify_checkout(tmp_path / "nowhere")
    with pytest.raises(FdbError, match="not the pinned"):
        run_evaluator(tmp_path, checkout)  # verified before the tree is even read


def test_parse_result_block():
    out = (
        "x: 9\n[Result]\nAverage rating: N/A\nAverage take turn:  0.5\n"
        "JSD - Mean: 0.8000 \u00b1 0.0500\n\n"
        "[Raw Counts]\nNumber of samples: 55\n-----\nafter: 3\n"
    )
    assert parse_result(out) == {
        "Average rating": None,
        "Average take turn": 0.5,
        "JSD mean": 0.8,
        "JSD std": 0.05,
        "Number of samples": 55.0,
    }
    assert parse_result("no block here") == {}


def tree_for_evaluator(root):
    tree = V10Tree(root)
    tree.add(
        "synthetic_pause_handling", "1", 5.0, annotation=pause_json((1.0, 2.0)), words=[(0.5, 1.0)]
    )
    tree.add("synthetic_pause_handling", "2", 5.0, annotation=pause_json((1.0, 2.0)), words=[])
    tree.add("candor_turn_taking", "1", 5.0, annotation=turn_json(2.0), words=[(3.35, 4.0)])
    tree.add("synthetic_user_interruption", "1", 5.0, annotation=interrupt_json(1.0, 2.0), words=[])
    tree.add("icc_backchannel", "0", 5.0, words=[])
    tree.add("icc_backchannel", "1", 5.0, words=[])
    tree.add("icc_backchannel", "2", 5.0, eligible=False, reasons=["pacing"])
    return tree.finish()


def test_runs_the_evaluator_on_a_staged_copy(tmp_path):
    root = tree_for_evaluator(tmp_path / "tree")
    checkout = fake_checkout(tmp_path / "fdb")
    pins = {rel: sha256_file(checkout / rel) for rel in PINNED_FILES}
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    summary = run_evaluator(root, checkout, pins=pins)
    subsets = summary.subsets
    assert subsets["candor_turn_taking"].status == "ok"
    assert subsets["candor_turn_taking"].result == {
        "Average take turn": 1.0,
        "Average latency": 1.3499999999999983,
    }
    bc = subsets["icc_backchannel"]
    assert (bc.status, bc.selected, bc.eligible, bc.evaluated) == ("ok", 3, 2, 2)
    assert bc.result["JSD mean"] == 0.7143 and bc.result["Number of samples"] == 2.0
    assert (
        subsets["synthetic_pause_handling"].status == "failed"
        and "exited 1" in subsets["synthetic_pause_handling"].note
    )
    assert "boom" in (root / "logs/evaluate-synthetic_pause_handling.log").read_text()
    assert subsets["synthetic_user_interruption"].status == "not_run"
    assert "judge" in subsets["synthetic_user_interruption"].note
    after = sorted(p.relative_to(root) for p in root.rglob("*"))
    assert sorted(set(after) - set(before)) == sorted(
        [p.relative_to(root) for p in (root / "evaluator.json", root / "logs")]
        + [
            (root / "logs" / f"evaluate-{s}.log").relative_to(root)
            for s in ("synthetic_pause_handling", "candor_turn_taking", "icc_backchannel")
        ]
    )
    doc = read_json(root / "evaluator.json")
    assert doc["schema"] == "fdb-v1.0-evaluator-2" and doc["pinned_revision"] == PINNED_REVISION
    assert (
        doc["files"] == {rel: pins[rel] for rel in EVALUATOR_FILES}
        and (checkout / EVALUATION_DIR).is_dir()
    )
    assert doc["checkout_check"]["differences"] == [] and summary.revision_label().endswith(
        "3e799c4 (pinned)"
    )
    columns = load_reference(root, doc["manifest_sha256"], doc["asr_sha256"])
    assert columns.evaluator is not None and columns.notes == []
    stale = load_reference(root, doc["manifest_sha256"], "0" * 64)
    assert stale.evaluator is None and stale.notes == [
        "evaluator.json left out: asr.json changed since it was written (rerun it on this tree)"
    ]
    atomic_write_json(root / "official.json", {"schema": "x"})
    assert "official.json left out: it does not parse" in load_reference(root, "a", "b").notes[0]


def test_an_accepted_revision_runs_and_is_recorded(tmp_path):
    """A checkout whose files differ from the pin runs only when the user accepts its git
    revision; evaluator.json then records the revision and every differing file."""
    root = tree_for_evaluator(tmp_path / "tree")
    checkout = fake_checkout(tmp_path / "fdb")
    head = git_commit_all(checkout)
    with pytest.raises(FdbError, match="is at .*, not at"):
        run_evaluator(root, checkout, accept_revision="1" * 40)
    summary = run_evaluator(root, checkout, accept_revision=head[:10])
    check = read_json(root / "evaluator.json")["checkout_check"]
    assert check["accepted_revision"] == head == check["checkout_revision"]
    assert [d["path"] for d in check["differences"]] == sorted(EVALUATOR_FILES)
    assert check["differences"][0]["actual_sha256"] == sha256_file(
        checkout / sorted(EVALUATOR_FILES)[0]
    )
    assert summary.revision_label().startswith(
        f"Full-Duplex-Bench {head[:7]} (accepted with --accept-revision"
    )
    (checkout / "v1_v1.5/evaluation/eval_backchannel.py").write_text("# edited after the commit\n")
    with pytest.raises(FdbError, match="local changes in pinned files"):
        run_evaluator(root, checkout, accept_revision=head)
    with pytest.raises(FdbError, match="not the root of a Full-Duplex-Bench checkout"):
        run_evaluator(root, checkout / EVALUATION_DIR, accept_revision=head)
