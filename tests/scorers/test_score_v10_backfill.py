"""The documented backfill `python -m fdb score v10 --tree DIR` (#24): `declared` is the dataset's
subset size from the run's own source (run.json's dataset root) or --dataset-root, null (n/a) when
neither is known, never the selected count; and one interruption transcript not cut at R stops
the unified metrics with its name but not official.json, which leaves that sample out, named.
Small trees fdb builds itself (no reference data)."""

from __future__ import annotations

import pytest
from rich.console import Console

from benchmarks.support.treebuild import FixedSegments, V10Tree, interrupt_json, turn_json
from fdb.errors import FdbError
from fdb.io import atomic_write_json, read_json
from fdb.layout import RunPaths
from fdb.run_manifest import DatasetUse, RunManifest, ServerUse
from scorers.v10_official import score_official
from tests.scorers.test_cli_score import cli

SIZES = {
    "candor_turn_taking": 5,
    "synthetic_user_interruption": 3,
}  # the dataset declares 8 samples


@pytest.fixture(autouse=True)
def fixed_vad(monkeypatch):
    monkeypatch.setattr("fdb.models.vad.SileroVad", FixedSegments)


def dataset(root):
    """An official-layout v1.0 root: only folder names are counted."""
    for subset, n in SIZES.items():
        for i in range(1, n + 1):
            (root / subset / str(i)).mkdir(parents=True)
    return root


def tree(root, cut_at_R: bool = True):
    """Two turn-taking and two interruption samples (R = 2.0 s); with ``cut_at_R`` False the
    second interruption transcript has a word at 1.5 s, before R."""
    t = V10Tree(root)
    t.add("candor_turn_taking", "1", 5.0, annotation=turn_json(1.0), words=[(1.5, 1.9), (2.0, 2.6)])
    t.add("candor_turn_taking", "2", 5.0, eligible=False, reasons=["pacing"])
    t.add(
        "synthetic_user_interruption",
        "1",
        5.0,
        annotation=interrupt_json(1.0, 2.0),
        words=[(2.5, 2.9)],
    )
    late = [(1.5, 1.8), (2.5, 2.9)] if not cut_at_R else [(3.0, 3.4)]
    t.add("synthetic_user_interruption", "2", 5.0, annotation=interrupt_json(1.0, 2.0), words=late)
    return t.finish()


def a_run(tmp_path, dataset_root):
    """$FDB_WORK/runs/r1 with run.json naming the v1.0 dataset root,
    and repeat-1's v10/reference."""
    run = RunPaths(tmp_path / "work" / "runs" / "r1")
    use = DatasetUse(
        dataset="v1.0",
        root=str(dataset_root),
        source="user",
        revision=None,
        selection={},
        sample_ids=[
            "candor_turn_taking/1",
            "candor_turn_taking/2",
            "synthetic_user_interruption/1",
            "synthetic_user_interruption/2",
        ],
    )
    manifest = RunManifest(
        run_name="r1",
        datasets={"v1.0": use},
        num_shards=1,
        server=ServerUse(url=None, system=None, model=None, turn_detection=None),
    )
    run.root.mkdir(parents=True)
    atomic_write_json(run.manifest, manifest.model_dump(mode="json", by_alias=True))
    rep = run.repeat(1)
    tree(rep.v10_reference)
    return run, rep


def declared(root) -> dict:
    return {
        name: s["counts"]["declared"]
        for name, s in read_json(root / "unified.json")["subsets"].items()
    }


def test_a_runs_tree_declares_the_runs_dataset_like_the_run_path(tmp_path, capsys, monkeypatch):
    from runs.phases import _v10_scores

    run, rep = a_run(tmp_path, dataset(tmp_path / "dataset"))
    code, out, err = cli(["score", "v10", "--tree", str(rep.v10_reference)], capsys)
    assert code == 0, err
    assert "candor_turn_taking (turn_taking): declared 5, selected 2, eligible 1" in out
    assert declared(rep.v10_reference) == SIZES
    by_score = read_json(rep.v10_reference / "unified.json")["subsets"]
    monkeypatch.setenv("FDB_WORK", str(tmp_path / "work"))
    _v10_scores(
        run, rep.v10_reference, Console(file=None, quiet=True)
    )  # the run path (`fdb asr`'s scoring step)
    by_run = read_json(rep.v10_reference / "unified.json")["subsets"]
    assert by_run == by_score


def test_declared_from_dataset_root_else_na_never_selected(tmp_path, capsys):
    root = tree(tmp_path / "tree")
    code, out, err = cli(["score", "v10", "--tree", str(root)], capsys)
    assert code == 0, err
    assert "candor_turn_taking (turn_taking): declared n/a, selected 2" in out
    assert "declared n/a:" in out and "--dataset-root" in out
    assert declared(root) == {"candor_turn_taking": None, "synthetic_user_interruption": None}

    ds = dataset(tmp_path / "dataset")
    code, out, err = cli(["score", "v10", "--tree", str(root), "--dataset-root", str(ds)], capsys)
    assert code == 0, err
    assert "declared 3, selected 2" in out and declared(root) == SIZES and "declared n/a" not in out

    (ds / "synthetic_user_interruption" / "2").rmdir()  # not the dataset the tree came from
    code, _, err = cli(["score", "v10", "--tree", str(root), "--dataset-root", str(ds)], capsys)
    assert (
        code == 2
        and "does not hold 1 sample(s) of the tree (first: synthetic_user_interruption/2)" in err
    )


def test_a_run_without_its_dataset_root_declares_null(tmp_path, capsys):
    ds = dataset(tmp_path / "dataset")
    run, rep = a_run(tmp_path, ds)
    for subset in SIZES:
        for child in sorted((ds / subset).iterdir()):
            child.rmdir()
        (ds / subset).rmdir()
    ds.rmdir()
    code, out, err = cli(["score", "v10", "--tree", str(rep.v10_reference)], capsys)
    assert code == 0, err
    assert "declared n/a" in out and "names no v1.0 dataset root that still exists" in " ".join(
        out.split()
    )
    assert set(declared(rep.v10_reference).values()) == {None}


def test_official_json_is_written_when_one_transcript_was_not_cut_at_R(tmp_path, capsys):
    root = tree(tmp_path / "tree", cut_at_R=False)
    code, out, err = cli(["score", "v10", "--tree", str(root)], capsys)
    assert code == 2
    assert (
        "unified metrics not written: synthetic_user_interruption/2: word 0 starts at 1.5 s, "
        "before R 2.0 s" in err
    )
    assert "not cut at R" in err
    assert not (root / "unified.json").exists()
    doc = read_json(root / "official.json")
    inter, turn = (
        doc["subsets"]["synthetic_user_interruption"],
        doc["subsets"]["candor_turn_taking"],
    )
    assert (inter["selected"], inter["eligible"], inter["evaluated"], inter["takeovers"]) == (
        2,
        2,
        1,
        0,
    )
    assert list(inter["not_evaluated"]) == ["synthetic_user_interruption/2"]
    assert "synthetic_user_interruption/2" in inter["note"]
    assert (turn["evaluated"], turn["takeovers"], turn["latency_s"]) == (1, 1, pytest.approx(0.5))
    flat = " ".join(out.split())
    assert (
        "synthetic_user_interruption official-rule reference: selected 2, eligible 2, evaluated 1"
        in flat
    )
    assert "note: 1 eligible sample(s) not evaluated: synthetic_user_interruption/2" in flat
    assert "official.json" in flat and "unified.json" not in flat


def test_the_official_rules_leave_out_only_the_uncut_transcript(tmp_path):
    summary = score_official(tree(tmp_path / "bad", cut_at_R=False), vad=FixedSegments())
    inter = summary.subsets["synthetic_user_interruption"]
    assert (
        inter.evaluated == 1
        and "before R 2.0 s" in inter.not_evaluated["synthetic_user_interruption/2"]
    )
    good = score_official(tree(tmp_path / "good"), vad=FixedSegments()).subsets[
        "synthetic_user_interruption"
    ]
    assert (good.evaluated, good.takeovers, good.not_evaluated, good.note) == (2, 0, {}, None)
    assert (
        summary.subsets["candor_turn_taking"]
        == score_official(tmp_path / "good").subsets["candor_turn_taking"]
    )


def test_the_run_path_writes_official_json_and_names_the_sample(tmp_path, monkeypatch):
    from runs.phases import _v10_scores

    run, rep = a_run(tmp_path, dataset(tmp_path / "dataset"))
    tree(rep.v10_reference, cut_at_R=False)
    monkeypatch.setenv("FDB_WORK", str(tmp_path / "work"))
    with pytest.raises(
        FdbError, match="unified metrics not written: synthetic_user_interruption/2"
    ):
        _v10_scores(run, rep.v10_reference, Console(quiet=True))
    assert (
        read_json(rep.v10_reference / "official.json")["subsets"]["synthetic_user_interruption"][
            "evaluated"
        ]
        == 1
    )
