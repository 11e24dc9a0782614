"""`python -m fdb score v15` on small v1.5 trees fdb builds itself (a VAD that finds the nonzero
audio): --limit resumes, --only narrows, a session that cannot be read is named and exits 1 with
the summary still written, `declared` is the dataset's size (--dataset-root or the run's
dataset, else n/a), and the refusals are one line with the fix."""

from __future__ import annotations

import pytest

from benchmarks.support.treebuild import FixedSegments, bursts
from fdb.errors import FdbError
from fdb.io import atomic_write_json, dumps_json, read_json
from fdb.layout import RunPaths
from fdb.records import ExportManifest
from fdb.run_manifest import DatasetUse, RunManifest, ServerUse
from reports.v15_tree import load_scores
from tests.scorers.test_cli_score import cli
from tests.scorers.test_v15_timing import write_pair

# an unusual length: no other test's files share these bytes (the span cache is per process)
T = 7.3


@pytest.fixture(autouse=True)
def fixed_vad(monkeypatch):
    monkeypatch.setattr("fdb.models.vad.SileroVad", FixedSegments)


def tree(root):
    """Two eligible user_interruption pairs (the second's output.wav changed after the export)
    and one ineligible talking_to_other pair."""
    audio = {
        "input.wav": bursts(T, (1.0, 3.0)),
        "output.wav": bursts(T, (2.0, 4.1)),
        "clean_input.wav": bursts(T, (1.0, 3.0)),
        "clean_output.wav": bursts(T, (3.7, 5.0)),
    }
    samples = [
        write_pair(root, "user_interruption", "1", audio),
        write_pair(root, "user_interruption", "2", audio),
        write_pair(root, "talking_to_other", "1", {}, eligible=False),
    ]
    atomic_write_json(
        root / "reference-manifest.json", ExportManifest(dataset="v1.5", samples=samples).dump()
    )
    (root / "user_interruption" / "2" / "output.wav").write_bytes(b"RIFF broken")
    return root


def dataset(root, sizes):
    for category, n in sizes.items():
        for i in range(1, n + 1):
            (root / category / str(i)).mkdir(parents=True)
    return root


def score(capsys, verb, *args) -> tuple[int, str]:
    code, out, err = cli(["score", "v15", verb, *args], capsys)
    return code, out + err


def test_limit_resumes_and_a_failed_session_is_named_not_dropped(tmp_path, capsys):
    root, out = tree(tmp_path / "t"), tmp_path / "scores"
    args = ("--tree", f"a={root}", "--out", str(out))
    assert score(capsys, "timing", *args, "--limit", "1") == (
        0,
        "a: timed 1 pair(s); 1 left: rerun to continue\n",
    )
    assert not (out / "a" / "timing" / "summary.json").exists()
    code, text = score(capsys, "timing", *args, "--limit", "1")
    assert (
        code == 1
        and "a (overlap session): user_interruption/2: " in text
        and "output.wav: unreadable WAV" in text
    )
    ui = read_json(out / "a" / "timing" / "summary.json")["categories"]["user_interruption"]
    assert (ui["pairs"], ui["timed_overlap_sessions"], ui["failed_sessions"]) == (2, 1, 1)
    assert ui["stop_latency"]["mean_s"] == pytest.approx(1.0)
    code, text = score(capsys, "summarize", *args)
    assert code == 0 and "user_interruption/2 not evaluated: overlap session failed" in text
    cohort = read_json(out / "summary.json")["cohorts"]["a"]
    assert set(cohort["not_evaluated"]) == {"talking_to_other/1", "user_interruption/2"}
    assert cohort["populations"]["all"] == {
        "declared": None,
        "selected": 3,
        "eligible": 2,
        "ineligible": 1,
    }
    code, text = score(capsys, "report", "--scores", str(out))
    assert code == 0 and "Not evaluated: talking_to_other/1: ineligible: verdict fail" in text
    assert "| user_interruption | 2 | 1 | 1.000 ± 0.000 |" in text


def test_only_narrows_every_phase_and_must_match(tmp_path, capsys):
    root, out = tree(tmp_path / "t"), tmp_path / "scores"
    args = ("--tree", str(root), "--out", str(out))  # a bare DIR is the cohort `model`
    only = ("--only", "user_interruption/1")
    assert score(capsys, "timing", *args, *only)[0] == 0
    assert read_json(out / "model" / "timing" / "summary.json")["categories"]["all"]["pairs"] == 1
    code, text = score(capsys, "summarize", *args)
    assert code != 0 and "times 1 pair(s), the selection has 3" in text and "same --only" in text
    assert score(capsys, "summarize", *args, *only)[0] == 0
    code, text = score(capsys, "timing", *args, "--only", "user_interruption/9")
    assert code != 0 and "holds no sample user_interruption/9" in text


def test_declared_from_the_dataset_root_or_the_run_else_na(tmp_path, capsys):
    run = RunPaths(tmp_path / "work" / "runs" / "r1")
    data = dataset(tmp_path / "data", {"user_interruption": 5, "talking_to_other": 4})
    use = DatasetUse(
        dataset="v1.5",
        root=str(data),
        source="user",
        revision=None,
        selection={},
        sample_ids=["user_interruption/1", "user_interruption/2", "talking_to_other/1"],
    )
    run.root.mkdir(parents=True)
    atomic_write_json(
        run.manifest,
        RunManifest(
            run_name="r1",
            datasets={"v1.5": use},
            num_shards=1,
            server=ServerUse(url=None, system=None, model=None, turn_detection=None),
        ).model_dump(mode="json", by_alias=True),
    )
    inside, outside, out = (
        tree(run.repeat(1).reference_audio),
        tree(tmp_path / "t"),
        tmp_path / "scores",
    )
    args = ("--tree", f"run={inside}", "--tree", f"copy={outside}", "--out", str(out))
    assert score(capsys, "timing", *args)[0] == 1  # the changed output.wav
    assert score(capsys, "summarize", *args)[0] == 0
    cohorts = read_json(out / "summary.json")["cohorts"]
    declared = {name: p["declared"] for name, p in cohorts["run"]["populations"].items()}
    assert declared == {"all": 9, "user_interruption": 5, "talking_to_other": 4}
    assert {p["declared"] for p in cohorts["copy"]["populations"].values()} == {None}
    assert score(capsys, "summarize", *args, "--dataset-root", str(data))[0] == 0
    assert read_json(out / "summary.json")["cohorts"]["copy"]["populations"]["all"]["declared"] == 9
    small = dataset(tmp_path / "small", {"user_interruption": 1, "talking_to_other": 1})
    code, text = score(capsys, "summarize", *args, "--dataset-root", str(small))
    assert (
        code != 0 and "does not hold 1 sample(s) of the tree (first: user_interruption/2)" in text
    )


def test_refusals_name_the_problem_and_the_fix(tmp_path, capsys):
    root, out = tree(tmp_path / "t"), tmp_path / "scores"
    code, text = score(capsys, "timing", "--tree", f"a b={root}", "--out", str(out))
    assert code != 0 and "engine name 'a b' is not allowed" in text
    code, text = score(capsys, "timing", "--tree", f"summary.json={root}", "--out", str(out))
    assert code != 0 and "engine name 'summary.json' is not allowed" in text
    code, text = score(
        capsys, "timing", "--tree", f"a={root}", "--tree", f"a={root}", "--out", str(out)
    )
    assert code != 0 and "engine a is given twice" in text
    code, text = score(capsys, "summarize", "--tree", f"a={root}", "--out", str(out))
    assert code != 0 and "the cohort has not been timed" in text and "score v15 timing" in text
    code, text = score(capsys, "report", "--scores", str(out))
    assert code != 0 and "summary.json is missing" in text and "score v15 summarize" in text
    assert score(capsys, "timing", "--tree", f"a={root}", "--out", str(out))[0] == 1
    assert score(capsys, "summarize", "--tree", f"a={root}", "--out", str(out))[0] == 0
    code, text = score(capsys, "report", "--scores", str(out), "--engine", "b")
    assert code != 0 and "summary.json has no cohort b (it has a)" in text


def test_summary_reads_back_through_its_record_byte_for_byte(tmp_path, capsys):
    """OUT/summary.json is written and read through TreeScores: the record dumps the same bytes,
    and a file of another schema is refused with the file and the fix."""
    root, out = tree(tmp_path / "t"), tmp_path / "scores"
    assert score(capsys, "timing", "--tree", f"a={root}", "--out", str(out))[0] == 1
    assert score(capsys, "summarize", "--tree", f"a={root}", "--out", str(out))[0] == 0
    path = out / "summary.json"
    before = path.read_bytes()
    assert dumps_json(load_scores(out).dump()).encode("utf-8") == before
    atomic_write_json(path, {**read_json(path), "schema": "fdb-v1.5-timing-1"})
    with pytest.raises(FdbError, match=r"summary.json: schema: Input should be") as err:
        load_scores(out)
    assert "score v15 summarize" in err.value.hint
    code, text = score(capsys, "report", "--scores", str(out))
    assert code != 0 and "summary.json: schema" in text and "score v15 summarize" in text
