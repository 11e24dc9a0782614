"""`fdb compare`: the cross-system table (denominators, not measured, the noise note), the paired
view of two runs, one Table behind Markdown and CSV, refusals with exit code 2, determinism.

Run trees are fabricated on disk with the outputs' own records and the scorers' pure aggregators
(category_timing, pause_metrics, turn_metrics, summarize_behavior, summarize_semantic)."""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from fdb.cli.compare import register
from fdb.io import atomic_write_json, atomic_write_jsonl, read_json, sha256_file
from fdb.records import ExportManifest, ExportSample
from fdb.records.judge import JudgeSummary
from fdb.records.listening import GroupSummary, ListeningSummary
from fdb.records.serving import SweepCapacity, SweepReport
from fdb.records.v10 import (
    Counts,
    PauseRow,
    SubsetResult,
    TurnRow,
    UnifiedInputs,
    UnifiedResult,
)
from fdb.records.v15 import SessionIntervals, TimingSummary, TimingVad
from fdb.run_manifest import DatasetUse, RunManifest, ServerUse
from judges.behavior import summarize_behavior
from judges.inputs import TRANSCRIPTS, PairInput
from judges.semantic.run import summarize_semantic
from judges.store import SampleResult
from reports.compare import noise_points
from scorers.v10_pause import pause_metrics
from scorers.v10_turn import turn_metrics
from scorers.v15_timing import category_timing

CATEGORIES = ("user_interruption", "user_backchannel", "talking_to_other", "background_speech")
PAIRS = 5  # per v1.5 category
V10 = 4  # per v1.0 subset


@dataclass
class Rep:
    """One repeat's behavior: labels[category] = how many of the pairs get the expected label."""

    expected: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CATEGORIES, 5))
    stop_s: float = 1.0  # every overlap session's stop latency (+ 0.02 x pair index)
    response_s: float = 2.0
    intrusions: tuple[int, int] = (1, 2)  # synthetic / candor pause samples that intrude
    turn_latency: tuple[float | None, ...] = (0.5, 1.0, 3.0, None)
    semantic: bool = False
    listening: bool = False
    mos: str = "utmos"


def _pair_ids(n: int = PAIRS) -> list[str]:
    return [f"{c}/{i}" for c in CATEGORIES for i in range(1, n + 1)]


def _manifest(root: Path, v15: list[str], v10: list[str]) -> None:
    def use(dataset: str, ids: list[str]) -> DatasetUse:
        return DatasetUse(
            dataset=dataset,
            root=f"/data/{dataset}",
            source="synthetic",
            revision="rev-1",
            selection={},
            sample_ids=ids,
        )

    manifest = RunManifest(
        run_name=root.name,
        datasets={"v1.5": use("v1.5", v15), "v1.0": use("v1.0", v10)},
        server=ServerUse(url=None, system="cascade", model=None, turn_detection=None),
        num_shards=1,
    )
    atomic_write_json(root / "run.json", manifest.model_dump(mode="json", by_alias=True))


def _session(sample: str, variant: str, stop: float, response: float) -> SessionIntervals:
    category, sid = sample.split("/")
    return SessionIntervals(
        sample_id=sample,
        category=category,
        id=sid,
        variant=variant,
        status="ok",
        stop_intervals=[(0.0, stop)],
        response_intervals=[(0.0, response)],
        stop_latencies_s=[stop],
        response_latencies_s=[response],
    )


def _timing(rep_root: Path, pairs: list[str], rep: Rep) -> None:
    from fdb.records import ExportSample

    rows = {}
    for index, sample in enumerate(pairs):
        bump = 0.02 * index
        rows[(sample, "overlap")] = _session(
            sample, "overlap", rep.stop_s + bump, rep.response_s + bump
        )
        rows[(sample, "clean")] = _session(sample, "clean", 9.0, 9.0)
    exports = [
        ExportSample(sample_id=s, subset=s.split("/")[0], id=s.split("/")[1], eligible=True)
        for s in pairs
    ]
    categories = {"all": category_timing("all", exports, rows)}
    for category in CATEGORIES:
        categories[category] = category_timing(
            category, [e for e in exports if e.subset == category], rows
        )
    summary = TimingSummary(
        definitions={},
        manifest_sha256="0" * 64,
        categories=categories,
        vad=TimingVad(name="silero", version=None, model_sha256=None, settings={}),
    )
    atomic_write_json(rep_root / "scores" / "summary.json", summary.dump())
    atomic_write_jsonl(rep_root / "scores" / "intervals.jsonl", list(rows.values()))


def _labels(pairs: list[str], rep: Rep) -> dict[str, str]:
    labels = {}
    for sample in pairs:
        category, sid = sample.split("/")
        expected = "C_RESPOND" if category == "user_interruption" else "C_RESUME"
        other = "C_RESUME" if expected == "C_RESPOND" else "C_RESPOND"
        labels[sample] = expected if int(sid) <= rep.expected[category] else other
    return labels


def _result(sample: str, value: dict) -> SampleResult:
    return SampleResult(
        sample_id=sample,
        outcome="valid",
        value=value,
        attempts=1,
        request_sha256="0" * 64,
        finished_utc="2025-01-01T00:00:00Z",
    )


def _judge(rep_root: Path, pairs: list[str], rep: Rep) -> None:
    inputs = [
        PairInput(
            sample_id=s,
            category=s.split("/")[0],
            id=s.split("/")[1],
            eligible=True,
            transcripts={t: {"text": "x", "chunks": []} for t in TRANSCRIPTS},
        )
        for s in pairs
    ]
    behavior = summarize_behavior(
        inputs, {s: _result(s, {"label": label}) for s, label in _labels(pairs, rep).items()}
    )
    semantic = None
    if rep.semantic:  # interaction handling accepted on every other pair, grounding on all but one
        grades = {
            s: _result(
                s,
                {
                    "axes": {
                        "interaction_handling": {"status": "accept" if k % 2 == 0 else "fail"},
                        "relevance": {"status": "accept"},
                        "grounding": {"status": "fail" if k == 0 else "accept"},
                    },
                    "joint": "accept",
                },
            )
            for k, s in enumerate(pairs)
        }
        semantic = summarize_semantic(inputs, grades)
    summary = JudgeSummary(
        repeat_dir=str(rep_root),
        judge={"model": "judge-test"},
        dirs={},
        behavior=behavior,
        semantic=semantic,
        relevance=None,
        ok=True,
    )
    atomic_write_json(rep_root / "judge.json", summary.dump())


def _pause_row(sample: str, intrudes: bool) -> PauseRow:
    return PauseRow(
        sample_id=sample,
        subset=sample.split("/")[0],
        task="pause_handling",
        eligible=True,
        T_s=10.0,
        words=3,
        first_pause_s=2.0,
        pauses=1,
        pause_s=1.0,
        pause_intrusion=intrudes,
        inside_pause_onset=intrudes,
        pre_pause_speech=False,
        carry_in=False,
        any_speech=True,
        intrusion_words=int(intrudes),
        intruded_pauses=int(intrudes),
        intrusion_s=0.5 * intrudes,
    )


def _turn_row(sample: str, latency: float | None) -> TurnRow:
    return TurnRow(
        sample_id=sample,
        subset="candor_turn_taking",
        task="turn_taking",
        eligible=True,
        T_s=20.0,
        E_s=10.0,
        words=0 if latency is None else 4,
        first_word_s=None if latency is None else 10 + latency,
        outcome="no_response" if latency is None else "response",
        latency_s=latency,
        observable_s=10.0,
    )


def _unified(rep_root: Path, v10: list[str], rep: Rep) -> None:
    ref = rep_root / "v10" / "reference"
    samples = [
        ExportSample(sample_id=s, subset=s.split("/")[0], id=s.split("/")[1], eligible=True)
        for s in v10
    ]
    atomic_write_json(ref / "manifest.json", ExportManifest(dataset="v1.0", samples=samples).dump())
    atomic_write_json(ref / "asr.json", {"backend": {"name": "test-asr"}})
    rows: list = []
    subsets = {}
    for subset, intruding in zip(
        ("synthetic_pause_handling", "candor_pause_handling"), rep.intrusions, strict=True
    ):
        ids = [s for s in v10 if s.startswith(subset + "/")]
        pause = [_pause_row(s, k < intruding) for k, s in enumerate(ids)]
        subsets[subset] = SubsetResult(
            subset=subset,
            task="pause_handling",
            coverage=1.0,
            counts=Counts(declared=len(ids), selected=len(ids), eligible=len(ids), ineligible=0),
            metrics=pause_metrics(pause, len(ids)),
        )
        rows += pause
    ids = [s for s in v10 if s.startswith("candor_turn_taking/")]
    turn = [_turn_row(s, latency) for s, latency in zip(ids, rep.turn_latency, strict=False)]
    subsets["candor_turn_taking"] = SubsetResult(
        subset="candor_turn_taking",
        task="turn_taking",
        coverage=1.0,
        counts=Counts(declared=len(ids), selected=len(ids), eligible=len(ids), ineligible=0),
        metrics=turn_metrics(turn, len(ids)),
    )
    rows += turn
    inputs = UnifiedInputs(
        manifest_sha256=sha256_file(ref / "manifest.json"),
        asr_sha256=sha256_file(ref / "asr.json"),
        asr_backend={"name": "test-asr"},
    )
    atomic_write_json(
        ref / "unified.json", UnifiedResult(inputs=inputs, vad=None, subsets=subsets).dump()
    )
    atomic_write_jsonl(ref / "unified-samples.jsonl", rows)


def _group(
    dataset: str, omitted: int, words: int, mos: float, voice: float, n: int
) -> GroupSummary:
    return GroupSummary(
        dataset=dataset,
        category="all",
        replies=n,
        short_replies=0,
        compared_replies=n,
        cancelled_replies=0,
        reference_words=words,
        omitted_words=omitted,
        omission_rate=omitted / words,
        wer=None,
        wer_reference_words=0,
        mos_n=n,
        mos_mean=mos,
        mos_p10=None,
        voice_n=n,
        voice_mean=voice,
        voice_p10=None,
    )


def _listening(rep_root: Path, mos: str) -> None:
    summary = ListeningSummary(
        definitions={},
        notes=[],
        datasets={
            "v1.5": {"all": _group("v1.5", 3, 100, 4.0, 80.0, 6)},
            "v1.0": {"all": _group("v1.0", 1, 100, 3.0, 70.0, 2)},
        },
        backends={
            "asr": {"name": "asr"},
            "mos": {"kind": "mos", "name": mos},
            "speaker": {"kind": "speaker", "name": "ecapa"},
        },
    )
    atomic_write_json(rep_root / "listening" / "summary.json", summary.dump())


def make_run(root: Path, repeats: list[Rep], v10_per_subset: int = V10) -> Path:
    pairs = _pair_ids()
    v10 = [
        f"{sub}/{i}"
        for sub in ("synthetic_pause_handling", "candor_pause_handling", "candor_turn_taking")
        for i in range(1, v10_per_subset + 1)
    ]
    _manifest(root, pairs, v10)
    for number, rep in enumerate(repeats, start=1):
        rep_root = root / f"repeat-{number}"
        _timing(rep_root, pairs, rep)
        _judge(rep_root, pairs, rep)
        _unified(rep_root, v10, rep)
        if rep.listening:
            _listening(rep_root, rep.mos)
    return root


def make_sweep(root: Path, sessions: int, first_miss: int) -> Path:
    capacity = SweepCapacity(
        sessions=sessions, first_miss=first_miss, sentence=f"Capacity: {sessions} sessions"
    )
    report = SweepReport(
        playback_reserve_ms=80.0,
        capacity=capacity,
        client_limited_levels=[],
        warnings=[],
        levels={},
        rows=[],
        repeat_rows={},
        provenance={},
        tables=[],
    )
    atomic_write_json(root / "serving.json", report.dump())
    return root


@pytest.fixture
def runs(tmp_path) -> dict[str, Path]:
    alpha = make_run(
        tmp_path / "alpha",
        [
            Rep(
                expected={**dict.fromkeys(CATEGORIES, 4), "user_interruption": 3},
                stop_s=1.5,
                semantic=True,
                listening=True,
            )
        ],
    )
    beta = make_run(
        tmp_path / "beta", [Rep(stop_s=0.2, intrusions=(0, 1), turn_latency=(0.5, 1.0, 1.5, 1.9))]
    )
    gamma = make_run(
        tmp_path / "gamma",
        [
            Rep(
                expected={**dict.fromkeys(CATEGORIES, 5), "user_interruption": 2},
                listening=True,
                mos="dnsmos-ovrl",
            ),
            Rep(expected={**dict.fromkeys(CATEGORIES, 5), "user_interruption": 4}),
        ],
        v10_per_subset=3,
    )
    return {
        "alpha": alpha,
        "beta": beta,
        "gamma": gamma,
        "sweep": make_sweep(tmp_path / "sweep-alpha", 8, 16),
    }


def cli(args: list[str], tmp_path: Path):
    app = typer.Typer()

    @app.callback()
    def _root() -> None:
        """fdb"""

    register(app)
    return CliRunner().invoke(app, ["compare", *args], env={"FDB_WORK": str(tmp_path / "work")})


def _row(table: dict, metric_start: str) -> list[str]:
    return next(cells for cells in table["cells"] if cells[1].startswith(metric_start))


def test_two_systems_cross_table_and_paired_view(runs, tmp_path):
    out = tmp_path / "out"
    result = cli(
        [
            str(runs["alpha"]),
            str(runs["beta"]),
            "--sweep",
            f"alpha={runs['sweep']}",
            "--out",
            str(out),
        ],
        tmp_path,
    )
    assert result.exit_code == 0, result.output
    assert f"wrote {out / 'COMPARISON.md'}" in result.output.replace("\n", "")
    data = read_json(out / "comparison.json")
    cross = data["tables"][0]
    assert cross["headers"] == ["Dimension", "Metric", "alpha", "beta"]
    assert _row(cross, "Responds when the user interrupts")[2:] == ["60% (3/5)", "100% (5/5)"]
    assert _row(cross, "Keeps talking through a backchannel")[2:] == ["80% (4/5)", "100% (5/5)"]
    assert _row(cross, "Overlap handled appropriately")[2:] == ["50% (10/20)", "not measured"]
    assert _row(cross, "Grounded reply")[2:] == ["95% (19/20)", "not measured"]
    assert _row(cross, "Speaks into a pause")[2:] == [
        "25% (1/4) / 50% (2/4)",
        "0% (0/4) / 25% (1/4)",
    ]
    assert _row(cross, "Takes the turn within 2 s")[2:] == ["50% (2/4)", "100% (4/4)"]
    assert _row(cross, "Stop / response latency")[2:] == [
        "1.69 / 2.19 s (20 / 20 intervals)",
        "0.39 / 2.19 s (20 / 20 intervals)",
    ]
    assert _row(cross, "Concurrent sessions")[2:] == ["8 (16 miss the targets)", "not measured"]
    assert _row(cross, "Omission rate")[2:] == ["2% (4/200 words)", "not measured"]
    assert _row(cross, "UTMOS")[2:] == ["3.75 (n = 8 replies)", "not measured"]
    assert _row(cross, "Voice consistency")[2:] == ["77.5 (n = 8 replies)", "not measured"]
    x, y = noise_points(5), noise_points(4)
    assert round(x) == 62 and round(y) == 69
    assert (
        "Behavior rates come from 5 samples per v1.5 category and 4 per v1.0 subset; differences "
        f"smaller than about {x:.0f} and {y:.0f} points, respectively, are within sampling noise"
    ) in "\n".join(cross["notes"])

    changed = data["tables"][1]
    assert changed["name"] == "changed-outcomes"
    rows = {(r[1], r[2], r[3]) for r in changed["cells"]}
    assert (
        "user_interruption/4",
        "C_RESUME",
        "C_RESPOND",
    ) in rows  # alpha labeled 3 of 5 as responses
    assert ("synthetic_pause_handling/1", "spoke into a pause", "silent in the pauses") in rows
    assert ("candor_turn_taking/4", "no_response", "response") in rows
    assert ("user_interruption/1", "C_RESPOND", "C_RESPOND") not in rows
    # alpha: 1 + 4 x 1 (other categories 4 of 5) behavior changes; pause: 1 + 1; turn: the None
    assert len(changed["rows"]) == 5 + 2 + 1 and data["paired"]["counts"]["paired"] == 20 + 12

    diffs = data["tables"][2]
    stop_all = next(
        c for c in diffs["cells"] if c[0].startswith("stop latency") and c[1] == "v1.5 all"
    )
    assert stop_all[2] == "20" and stop_all[5].startswith("-1.300 s [")
    assert stop_all[7] == "yes: beta better than alpha"
    turn = next(c for c in diffs["cells"] if c[0].startswith("responds within 2 s"))
    assert (
        turn[1] == "v1.0 candor_turn_taking" and turn[7] == "no"
    )  # 2 discordant pairs: within noise
    md = (out / "COMPARISON.md").read_text()
    assert "## Paired view: alpha → beta" in md and "### Samples whose outcome changed" in md


def test_markdown_and_csv_come_from_one_table(runs, tmp_path):
    out = tmp_path / "out"
    assert cli([str(runs["alpha"]), str(runs["beta"]), "--out", str(out)], tmp_path).exit_code == 0
    data = read_json(out / "comparison.json")
    md = (out / "COMPARISON.md").read_text().splitlines()
    assert data["files"]["tables"] == [
        "01-comparison.csv",
        "02-changed-outcomes.csv",
        "03-paired-differences.csv",
    ]
    for name, table in zip(data["files"]["tables"], data["tables"], strict=True):
        rows = list(csv.reader(io.StringIO((out / "tables" / name).read_text())))
        assert rows[0] == table["headers"] and rows[1:] == table["cells"]
        start = md.index("| " + " | ".join(table["headers"]) + " |")
        shown = [
            [c.strip() for c in line.strip("|").split(" | ")]
            for line in md[start + 2 : start + 2 + len(rows) - 1]
        ]
        assert shown == rows[1:], name


def test_three_systems_mean_over_repeats_and_different_selection(runs, tmp_path):
    out = tmp_path / "out"
    result = cli(
        [
            str(runs["alpha"]),
            str(runs["beta"]),
            str(runs["gamma"]),
            "--names",
            "A,B,C",
            "--out",
            str(out),
        ],
        tmp_path,
    )
    assert result.exit_code == 0, result.output
    data = read_json(out / "comparison.json")
    assert len(data["tables"]) == 1 and data["paired"] is None, "no paired view for three systems"
    cross = data["tables"][0]
    assert cross["headers"][2:] == ["A", "B", "C (mean of 2 repeats)"]
    assert _row(cross, "Responds when the user interrupts")[4] == "60% (3/5)"  # 2/5 and 4/5
    assert _row(cross, "Takes the turn within 2 s")[4] == "66.7% (2/3)"
    assert _row(cross, "Concurrent sessions")[2:] == ["not measured"] * 3
    # numbers of different MOS backends never share a row;
    # C has listening scores in 1 of its 2 repeats
    assert _row(cross, "UTMOS")[2:] == ["3.75 (n = 8 replies)", "not measured", "not measured"]
    assert _row(cross, "DNSMOS (OVRL)")[2:] == [
        "not measured",
        "not measured",
        "3.75 (n = 8 replies) [1 of 2 repeats]",
    ]
    assert _row(cross, "Omission rate")[4] == "2% (4/200 words) [1 of 2 repeats]"
    notes = "\n".join(cross["notes"])
    assert "v1.0: the runs select different samples (A 12, B 12, C 9; 9 in common)" in notes
    assert "C (2)" in notes and "mean over its repeats" in notes
    assert "3-4 per v1.0 subset" in notes and f"{noise_points(3):.0f} points, respectively" in notes
    assert "in points, at the smallest n)" in notes


def test_paired_view_uses_common_ids_only(runs, tmp_path):
    out = tmp_path / "out"
    assert cli([str(runs["beta"]), str(runs["gamma"]), "--out", str(out)], tmp_path).exit_code == 0
    counts = read_json(out / "comparison.json")["paired"]["counts"]
    assert counts == {"paired": 20 + 9, "changed": counts["changed"], "only_a": 3, "only_b": 0}
    assert "3 only in beta" in (out / "COMPARISON.md").read_text()


def test_output_is_byte_identical_on_a_second_run(runs, tmp_path):
    out = tmp_path / "out"
    args = [
        str(runs["alpha"]),
        str(runs["beta"]),
        "--sweep",
        f"alpha={runs['sweep']}",
        "--out",
        str(out),
    ]
    assert cli(args, tmp_path).exit_code == 0
    first = {p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    assert cli(args, tmp_path).exit_code == 0
    assert {
        p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()
    } == first
    assert read_json(out / "comparison.json")["provenance"]["fdb_version"]
    assert read_json(out / "comparison.json")["systems"][0]["inputs"]["run.json"]


def test_default_out_is_under_fdb_work(runs, tmp_path):
    result = cli([str(runs["alpha"]), str(runs["beta"])], tmp_path)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "work" / "comparisons" / "alpha-vs-beta" / "COMPARISON.md").is_file()


@pytest.mark.parametrize(
    "case, needle",
    [
        ("not_a_run", "is not a run directory (no run.json)"),
        ("one_run", "compare needs at least two runs, got 1"),
        ("names", "--names gives 3 name(s) for 2 runs"),
        ("same_run", "the runs share a name (alpha, alpha)"),
        ("sweep_name", "no system is named 'nobody'"),
        ("sweep_missing", "serving.json is missing"),
        ("bad_file", "scores/summary.json: "),
    ],
)
def test_refusals_exit_2_with_one_line(runs, tmp_path, case, needle):
    a, b = str(runs["alpha"]), str(runs["beta"])
    if case == "bad_file":
        (runs["beta"] / "repeat-1" / "scores" / "summary.json").write_text(
            '{"schema": "fdb-v1.5-timing-1"}'
        )
    args = {
        "not_a_run": [a, str(tmp_path)],
        "one_run": [a],
        "names": [a, b, "--names", "x,y,z"],
        "same_run": [a, a],
        "sweep_name": [a, b, "--sweep", f"nobody={runs['sweep']}"],
        "sweep_missing": [a, b, "--sweep", f"alpha={tmp_path / 'nowhere'}"],
        "bad_file": [a, b],
    }[case]
    result = cli(args, tmp_path)
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("ERROR: ") and needle in lines[0]
    assert not (tmp_path / "work" / "comparisons").exists()


def test_noise_points_formula():
    assert math.isclose(noise_points(25), 100 * 1.96 * math.sqrt(0.02))
    assert round(noise_points(10)) == 44
