"""`fdb gate` and `fdb baseline freeze`: verdicts, exit codes, refusals, JUnit and the tables."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from xml.etree import ElementTree as ET

import numpy as np
import pytest

from fdb.cli import main
from tests.reports.gate_trees import read, run_output, sweep_output, tts_output


def _gate(*args: str) -> int:
    with pytest.raises(SystemExit) as exit_info:
        main(["gate", *args])
    return exit_info.value.code


def _verdicts(out: Path) -> dict[str, str]:
    return {g["series"]: g["verdict"] for g in read(out / "gate.json")["guards"]}


def test_unchanged_candidate_passes(tmp_path):
    base, cand = tts_output(tmp_path / "b", seed=1), tts_output(tmp_path / "c", seed=2)
    code = _gate("--baseline", str(base), "--candidate", str(cand), "--out", str(tmp_path / "g"))
    assert code == 0
    verdicts = _verdicts(tmp_path / "g")
    assert verdicts["ttfa_p50_ms@c1"] in ("pass", "improved")
    assert "regressed" not in verdicts.values()
    text = (tmp_path / "g" / "GATE.md").read_text()
    assert text.splitlines()[2].startswith("**PASS**")


def test_slower_candidate_fails_and_names_the_guard(tmp_path, capsys):
    base, cand = (
        tts_output(tmp_path / "b", seed=1),
        tts_output(tmp_path / "c", seed=2, ttfa_ms=300.0),
    )
    code = _gate("--baseline", str(base), "--candidate", str(cand), "--out", str(tmp_path / "g"))
    assert code == 1
    result = read(tmp_path / "g" / "gate.json")
    assert "ttfa_p50_ms@c1" in result["regressed"] and "ttfa_p50_ms@c4" in result["regressed"]
    assert result["reward"]["earned"] is None  # a guard regressed: no reward
    assert "FAIL" in (tmp_path / "g" / "GATE.md").read_text().splitlines()[2]


def test_faster_candidate_shows_the_reward_with_its_interval(tmp_path):
    base, cand = (
        tts_output(tmp_path / "b", seed=1),
        tts_output(tmp_path / "c", seed=2, throughput=14.4),
    )
    assert (
        _gate("--baseline", str(base), "--candidate", str(cand), "--out", str(tmp_path / "g")) == 0
    )
    reward = read(tmp_path / "g" / "gate.json")["reward"]
    levels = {lv["key"]: lv["effect"] for lv in reward["levels"]}
    assert levels["c1"]["low"] < levels["c1"]["estimate"] < levels["c1"]["high"]
    assert reward["earned"] == pytest.approx(1.44, rel=0.05)
    md = (tmp_path / "g" / "GATE.md").read_text()
    assert "1.4" in md and "×" in md
    assert (
        _gate(
            "--baseline",
            str(base),
            "--candidate",
            str(cand),
            "--out",
            str(tmp_path / "h"),
            "--require-gain",
            "2.0",
        )
        == 1
    )


def test_cold_round_is_left_out(tmp_path):
    from reports.baseline import observe

    obs = observe(tts_output(tmp_path / "b", rounds=3))
    assert len(obs.series["ttfa_p50_ms@c1"].values) == 3
    assert max(obs.series["ttfa_p50_ms@c1"].values) < 400  # the cold round's 1000 ms is not there


def test_inconclusive_with_one_round_and_strict_exit_3(tmp_path):
    base = tts_output(tmp_path / "b", rounds=1, seed=1)
    cand = tts_output(tmp_path / "c", rounds=1, seed=2, ttfa_ms=300.0)
    assert (
        _gate("--baseline", str(base), "--candidate", str(cand), "--out", str(tmp_path / "g")) == 0
    )
    assert _verdicts(tmp_path / "g")["ttfa_p50_ms@c1"] == "inconclusive"
    assert (
        _gate(
            "--baseline",
            str(base),
            "--candidate",
            str(cand),
            "--out",
            str(tmp_path / "h"),
            "--strict",
        )
        == 3
    )


def test_stop_condition_violation_is_a_ceiling(tmp_path):
    base, cand = tts_output(tmp_path / "b"), tts_output(tmp_path / "c", seed=3, stop_violations=1)
    assert (
        _gate("--baseline", str(base), "--candidate", str(cand), "--out", str(tmp_path / "g")) == 1
    )
    assert _verdicts(tmp_path / "g")["stop_violations@c1"] == "regressed"


def test_frozen_baseline_decides_like_the_live_output(tmp_path):
    base, cand = (
        tts_output(tmp_path / "b", seed=1),
        tts_output(tmp_path / "c", seed=2, ttfa_ms=260.0),
    )
    with pytest.raises(SystemExit) as done:
        main(["baseline", "freeze", str(base), "--out", str(tmp_path / "base.json")])
    assert done.value.code in (0, None)
    frozen = read(tmp_path / "base.json")
    assert frozen["schema"] == "fdb-baseline-1" and len(frozen["content_sha256"]) == 64
    live = _gate("--baseline", str(base), "--candidate", str(cand), "--out", str(tmp_path / "g1"))
    cold = _gate(
        "--baseline",
        str(tmp_path / "base.json"),
        "--candidate",
        str(cand),
        "--out",
        str(tmp_path / "g2"),
    )
    assert live == cold == 1
    assert _verdicts(tmp_path / "g1") == _verdicts(tmp_path / "g2")


def test_refusals_exit_2_with_one_line(tmp_path, capsys):
    base = tts_output(tmp_path / "b")
    other = tts_output(tmp_path / "o", list_sha256="different")
    assert (
        _gate("--baseline", str(base), "--candidate", str(other), "--out", str(tmp_path / "g")) == 2
    )
    err = capsys.readouterr().err
    assert "not comparable: dataset.list_sha256" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "g").exists()  # nothing written
    # a side that never finished
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "run.json").write_text(json.dumps({"schema": "fdb-tts-bench-1"}))
    assert _gate("--baseline", str(base), "--candidate", str(tmp_path / "half")) == 2
    assert "tts.json is missing" in capsys.readouterr().err
    # a half-written report
    (tmp_path / "half" / "tts.json").write_text('{"schema": "fdb-tts-bench-1", "rows": [')
    assert _gate("--baseline", str(base), "--candidate", str(tmp_path / "half")) == 2
    # another kind
    assert _gate("--baseline", str(base), "--candidate", str(sweep_output(tmp_path / "s", 4))) == 2
    assert "same kind" in capsys.readouterr().err
    # a missing side
    assert _gate("--baseline", str(base), "--candidate", str(tmp_path / "nothing-here")) == 2


def test_frozen_baseline_with_a_wrong_hash_is_refused(tmp_path, capsys):
    base = tts_output(tmp_path / "b")
    with pytest.raises(SystemExit):
        main(["baseline", "freeze", str(base), "--out", str(tmp_path / "base.json")])
    data = read(tmp_path / "base.json")
    data["series"]["ttfa_p50_ms@c1"]["values"][0] = 1.0
    (tmp_path / "base.json").write_text(json.dumps(data))
    assert _gate("--baseline", str(tmp_path / "base.json"), "--candidate", str(base)) == 2
    assert "does not match its content" in capsys.readouterr().err


@pytest.mark.parametrize(
    "body, message",
    [
        (
            "schema: fdb-gate-1\nkind: tts\nguards:\n  - metric: ttfa_p99_ms\n",
            "unknown metric 'ttfa_p99_ms'",
        ),
        (
            "schema: fdb-gate-1\nkind: tts\nguards:\n  - metric: ttfa_p50_ms\n    allowed: -1\n",
            "allowed",
        ),
        ("schema: fdb-gate-1\nkind: sweep\nguards: []\n", "a gate for sweep outputs"),
        ("schema: fdb-gate-9\nkind: tts\nguards: []\n", "schema"),
        ("guards: [\n", "not valid YAML"),
    ],
)
def test_bad_gate_yaml_is_refused(tmp_path, capsys, body, message):
    base = tts_output(tmp_path / "b")
    (tmp_path / "gate.yaml").write_text(body)
    assert (
        _gate(
            "--baseline",
            str(base),
            "--candidate",
            str(base),
            "--config",
            str(tmp_path / "gate.yaml"),
        )
        == 2
    )
    assert message in capsys.readouterr().err


def test_a_config_overrides_the_defaults(tmp_path):
    base, cand = (
        tts_output(tmp_path / "b", seed=1),
        tts_output(tmp_path / "c", seed=2, ttfa_ms=300.0),
    )
    (tmp_path / "gate.yaml").write_text(
        "schema: fdb-gate-1\nkind: tts\nguards:\n"
        "  - {metric: ttfa_p50_ms, allowed: 0.8, keys: [c1]}\n"
    )
    assert (
        _gate(
            "--baseline",
            str(base),
            "--candidate",
            str(cand),
            "--config",
            str(tmp_path / "gate.yaml"),
            "--out",
            str(tmp_path / "g"),
        )
        == 0
    )
    assert list(_verdicts(tmp_path / "g")) == ["ttfa_p50_ms@c1"]


def test_junit_has_one_case_per_guard_series(tmp_path):
    base, cand = (
        tts_output(tmp_path / "b", seed=1),
        tts_output(tmp_path / "c", seed=2, ttfa_ms=300.0),
    )
    assert (
        _gate(
            "--baseline",
            str(base),
            "--candidate",
            str(cand),
            "--out",
            str(tmp_path / "g"),
            "--junit",
            str(tmp_path / "junit.xml"),
        )
        == 1
    )
    suite = ET.parse(tmp_path / "junit.xml").getroot()
    cases = suite.findall("testcase")
    assert len(cases) == len(read(tmp_path / "g" / "gate.json")["guards"])
    failed = {c.get("name") for c in cases if c.find("failure") is not None}
    assert "ttfa_p50_ms@c1" in failed and suite.get("failures") == str(len(failed))


def test_gate_markdown_and_csv_come_from_one_table(tmp_path):
    base, cand = tts_output(tmp_path / "b", seed=1), tts_output(tmp_path / "c", seed=2)
    _gate("--baseline", str(base), "--candidate", str(cand), "--out", str(tmp_path / "g"))
    md = (tmp_path / "g" / "GATE.md").read_text().splitlines()
    for path in sorted((tmp_path / "g" / "tables").glob("*.csv")):
        rows = list(csv.reader(io.StringIO(path.read_text())))
        start = md.index("| " + " | ".join(rows[0]) + " |")
        shown = [
            [c.strip().replace("\\|", "|") for c in line.strip().strip("|").split(" | ")]
            for line in md[start + 2 : start + 1 + len(rows)]
        ]
        assert shown == rows[1:]
    again = tmp_path / "g2"
    _gate("--baseline", str(base), "--candidate", str(cand), "--out", str(again))
    strip = lambda p: {k: v for k, v in read(p).items() if k != "provenance"}  # noqa: E731
    assert strip(tmp_path / "g" / "gate.json") == strip(again / "gate.json")


def test_sweep_capacity_drop_regresses(tmp_path):
    base, cand = sweep_output(tmp_path / "b", 4), sweep_output(tmp_path / "c", 2, seed=1)
    assert (
        _gate("--baseline", str(base), "--candidate", str(cand), "--out", str(tmp_path / "g")) == 1
    )
    result = read(tmp_path / "g" / "gate.json")
    assert "capacity_sessions@all" in result["regressed"] and result["reward"][
        "ratio"
    ] == pytest.approx(0.5)
    same = sweep_output(tmp_path / "d", 4, seed=2)
    assert (
        _gate("--baseline", str(base), "--candidate", str(same), "--out", str(tmp_path / "h")) == 0
    )


def test_run_paired_latency_and_mcnemar(tmp_path):
    rng = np.random.default_rng(0)
    ids = [f"candor_turn_taking/{i:03d}" for i in range(30)]
    base = {s: float(rng.uniform(0.5, 1.5)) for s in ids}
    slow = {s: v + 0.8 for s, v in base.items()}  # 0.8 s later everywhere; many cross 2 s
    b, c = run_output(tmp_path / "b", base), run_output(tmp_path / "c", slow)
    assert _gate("--baseline", str(b), "--candidate", str(c), "--out", str(tmp_path / "g")) == 1
    verdicts = _verdicts(tmp_path / "g")
    assert verdicts["v10.latency_s@candor_turn_taking"] == "regressed"
    guards = {g["series"]: g for g in read(tmp_path / "g" / "gate.json")["guards"]}
    assert guards["v10.response_2s@candor_turn_taking"]["effect"]["test"] == "mcnemar-exact"
    same = run_output(tmp_path / "s", {s: v + float(rng.normal(0, 0.01)) for s, v in base.items()})
    assert _gate("--baseline", str(b), "--candidate", str(same), "--out", str(tmp_path / "h")) == 0
    other = run_output(tmp_path / "o", base, revision="rev2")
    assert _gate("--baseline", str(b), "--candidate", str(other)) == 2
    backend = run_output(tmp_path / "p", base, asr="parakeet")
    assert _gate("--baseline", str(b), "--candidate", str(backend)) == 2


def test_run_still_recording_is_refused(tmp_path, capsys):
    b = run_output(tmp_path / "b", {"candor_turn_taking/001": 1.0, "candor_turn_taking/002": 1.1})
    c = run_output(tmp_path / "c", {"candor_turn_taking/001": 1.0, "candor_turn_taking/002": 1.1})
    (c / "repeat-1" / "v10" / "reference" / "unified-samples.jsonl").unlink()
    assert _gate("--baseline", str(b), "--candidate", str(c)) == 2
    assert "unified-samples.jsonl is missing" in capsys.readouterr().err


@pytest.mark.parametrize(
    "damaged",
    ["repeat-1/v10/reference/unified.json", "repeat-1/v10/reference/unified-samples.jsonl"],
)
def test_a_damaged_run_file_is_one_line_naming_it(tmp_path, capsys, damaged):
    """#25: a truncated unified.json ended in `ERROR: JSONDecodeError: ...` without the file."""
    base = run_output(tmp_path / "b", {f"candor_turn_taking/{i}": 1.0 + i / 10 for i in range(4)})
    cand = run_output(tmp_path / "c", {f"candor_turn_taking/{i}": 1.0 + i / 10 for i in range(4)})
    path = cand / damaged
    path.write_bytes(path.read_bytes()[:-7])
    assert (
        _gate("--baseline", str(base), "--candidate", str(cand), "--out", str(tmp_path / "g")) == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        err[-1].startswith(f"ERROR: {path}")
        and "is not valid JSON" in err[-1]
        and "rerun" in err[-1]
    )


def test_run_listening_scores_are_read_through_their_record(tmp_path, capsys):
    rng = np.random.default_rng(1)
    ids = [f"candor_turn_taking/{i:03d}" for i in range(20)]
    latencies = dict.fromkeys(ids, 1.0)
    mos = {s: float(rng.uniform(3.5, 4.0)) for s in ids}
    worse = {s: v - 0.5 for s, v in mos.items()}
    b = run_output(tmp_path / "b", latencies, mos=mos)
    c = run_output(tmp_path / "c", latencies, mos=worse)
    assert _gate("--baseline", str(b), "--candidate", str(c), "--out", str(tmp_path / "g")) == 1
    assert _verdicts(tmp_path / "g")["listening.mos@v1.0"] == "regressed"
    same = run_output(tmp_path / "s", latencies, mos=mos)
    assert _gate("--baseline", str(b), "--candidate", str(same), "--out", str(tmp_path / "h")) == 0
    path = same / "repeat-1" / "listening" / "scores.json"
    path.write_text('{"schema": "fdb-listening-scores-2", "backends": {}}')
    assert _gate("--baseline", str(b), "--candidate", str(same)) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(f"ERROR: {path}: replies: Field required") and "rescore" in err
