"""Three repeats -> mean ± sd cells; CSV tables and PNG plots; unavailable unified artifacts."""

from __future__ import annotations

import csv
import json
import re

import pytest

from fdb.errors import FdbError
from fdb.io import atomic_write_jsonl, sha256_file
from fdb.layout import RunPaths
from fdb.records.judge import (
    OUTCOMES,
    BehaviorCell,
    BehaviorSample,
    BehaviorSummary,
    JudgeSummary,
    Share,
)
from fdb.records.v15 import SessionIntervals
from fdb.stats import wilson
from reports.results import build_results, write_results
from tests.reports.test_results_tables import _summary


def _judge(share_respond: float) -> dict:
    """judge.json of two pairs judged, a share ``share_respond`` of them C_RESPOND,
    the rest C_RESUME."""
    respond = round(2 * share_respond)
    counts = {
        "C_RESPOND": respond,
        "C_RESUME": 2 - respond,
        "C_UNCERTAIN_HANDLING": 0,
        "C_UNKNOWN": 0,
    }
    cell = BehaviorCell(
        selected=2,
        eligible=2,
        outcomes=dict.fromkeys(OUTCOMES, 0) | {"valid": 2},
        judged=2,
        labels={k: Share(count=n, share=n / 2, ci95=wilson(n, 2)) for k, n in counts.items()},
    )
    labels = ["C_RESPOND"] * respond + ["C_RESUME"] * (2 - respond)
    samples = [
        BehaviorSample(
            sample_id=f"user_interruption/{i}",
            category="user_interruption",
            outcome="valid",
            label=label,
            attempts=1,
        )
        for i, label in enumerate(labels, 1)
    ]
    judge = {"model": "qwen-test"}
    behavior = BehaviorSummary(
        status="complete",
        judge=judge,
        categories={"user_interruption": cell},
        all=cell,
        attempts=2,
        samples=samples,
    )
    return JudgeSummary(
        repeat_dir="repeat",
        judge=judge,
        dirs={"behavior": "judge-qwen-test"},
        behavior=behavior,
        semantic=None,
        relevance=None,
        ok=True,
    ).dump()


def _three_repeats(tmp_path) -> RunPaths:
    run = RunPaths.of(tmp_path, "three")
    for n, (stop, respond) in enumerate([(1.0, 0.5), (2.0, 1.0), (3.0, 0.0)], start=1):
        rep = run.repeat(n)
        rep.scores.mkdir(parents=True)
        (rep.scores / "summary.json").write_text(json.dumps(_summary(stop, 2.0)))
        pair = {
            "sample_id": "user_interruption/1",
            "category": "user_interruption",
            "id": "1",
            "status": "ok",
        }
        rows = [
            SessionIntervals(
                **pair,
                variant="overlap",
                stop_latencies_s=[stop, stop + 0.5],
                response_latencies_s=[2.0],
            ),
            SessionIntervals(**pair, variant="clean", stop_latencies_s=[9.0]),
        ]
        atomic_write_jsonl(rep.scores / "intervals.jsonl", rows)
        (rep.root / "judge.json").write_text(json.dumps(_judge(respond)))
    return run


def test_three_repeats_give_mean_and_sd_cells(tmp_path):
    text, _ = build_results(_three_repeats(tmp_path))
    row = next(
        line for line in text.splitlines() if line.startswith("| user_interruption | 2 | 2 |")
    )
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[3] == "2.000 ± 1.000"  # stop latency over repeats 1, 2, 3
    assert cells[4] == "2.000 ± 0.000"
    assert cells[5] == "50.0 ± 50.0%" and cells[6] == "50.0 ± 50.0%" and cells[9] == "2"


def test_aggregate_writes_csv_tables_and_png_plots(tmp_path):
    run = _three_repeats(tmp_path)
    (run.root / "tables").mkdir()
    (run.root / "tables" / "99-stale.csv").write_text("old")
    _, data = write_results(run)
    tables = sorted(p.name for p in (run.root / "tables").glob("*.csv"))
    assert "99-stale.csv" not in tables and tables == data["files"]["tables"]
    v15 = (run.root / "tables" / tables[0]).read_text().splitlines()
    assert v15[0].startswith("Category,Pairs,Timed overlap sessions,Stop latency (s)")
    assert any(line.startswith("user_interruption,2,2,2.000 ± 1.000") for line in v15)
    plots = sorted(p.name for p in (run.root / "plots").glob("*.png"))
    assert plots == ["v15-response-latency.png", "v15-stop-latency.png"]
    first = {p: (run.root / "plots" / p).read_bytes() for p in plots}
    assert all(b.startswith(b"\x89PNG") for b in first.values())
    write_results(run)
    assert {p: (run.root / "plots" / p).read_bytes() for p in plots} == first, (
        "plots are byte-stable"
    )
    assert "## Listening quality" in (run.root / "RESULTS.md").read_text()


def _markdown_tables(text: str) -> list[list[list[str]]]:
    """The cells of every Markdown table, in order (separator rows left out,
    `\\|` read back as `|`)."""
    tables, current = [], None
    for line in text.splitlines():
        if not line.startswith("|"):
            current = None
            continue
        if current is None:
            current = []
            tables.append(current)
        if not re.fullmatch(r"\|( --- \|)+", line):
            current.append([c.replace("\\|", "|") for c in line[2:-2].split(" | ")])
    return tables


def test_csv_tables_and_results_json_tables_are_the_markdown_tables(tmp_path):
    run = _three_repeats(tmp_path)
    ref = run.repeat(3).v10_reference
    samples = [
        {
            "sample_id": "candor_turn_taking/1",
            "subset": "candor_turn_taking",
            "id": "1",
            "eligible": True,
        },
        {
            "sample_id": "candor_turn_taking/2",
            "subset": "candor_turn_taking",
            "id": "2",
            "eligible": False,
            "reasons": ["missing", "clipped"],
        },
    ]
    (ref / "candor_turn_taking" / "1").mkdir(parents=True)
    (ref / "manifest.json").write_text(json.dumps({"dataset": "v1.0", "samples": samples}))
    words = [
        {"text": " yes|no ", "timestamp": [0.25, 0.5]},
        {"text": "ok", "timestamp": [0.5, 0.75]},
    ]
    transcript = {"text": " ".join(w["text"] for w in words), "chunks": words}
    (ref / "candor_turn_taking" / "1" / "output.json").write_text(json.dumps(transcript))
    text, data = write_results(run)
    shown = _markdown_tables(text)
    files = sorted((run.root / "tables").glob("*.csv"))
    assert [p.name for p in files] == data["files"]["tables"] and len(files) == len(shown) == 5
    assert files[-1].name == "05-v1-0-replies-as-transcribed-repeat-3.csv"
    written = [list(csv.reader(p.open(newline=""))) for p in files]
    assert written == shown, "every CSV holds exactly the cells its Markdown table shows"
    assert ["candor_turn_taking/1", "-", "2", "0.250", "yes|no ok"] in written[-1]
    assert "| yes\\|no ok |" in text, "a | inside a cell is escaped in RESULTS.md"
    dumped = data["tables"]
    assert [t["name"] for t in dumped] == [p.stem.split("-", 1)[1] for p in files]
    assert [t["headers"] for t in dumped] == [rows[0] for rows in written]
    assert json.loads((run.root / "results.json").read_text())["tables"] == dumped
    assert dumped[-1]["rows"][1] == {
        "sample": "candor_turn_taking/2",
        "outcome": "ineligible: missing, clipped",
        "words": None,
        "first_word_s": None,
        "transcript": "",
    }


def test_missing_or_stale_unified_is_labeled_unavailable_with_backfill(tmp_path):
    run = RunPaths.of(tmp_path, "v10")
    rep = run.repeat(1)
    ref = rep.v10_reference
    ref.mkdir(parents=True)
    sample = {
        "sample_id": "candor_turn_taking/1",
        "subset": "candor_turn_taking",
        "id": "1",
        "eligible": False,
        "reasons": ["missing"],
    }
    (ref / "manifest.json").write_text(json.dumps({"dataset": "v1.0", "samples": [sample]}))
    (ref / "asr.json").write_text("{}")
    text, _ = build_results(run)
    assert "Unified metrics unavailable: v10/reference/unified.json is missing" in text
    assert f"python -m fdb score v10 --tree {ref}" in text
    stale = {
        "schema": "fdb-v1.0-unified-4",
        "inputs": {"manifest_sha256": "0" * 64, "asr_sha256": "0" * 64},
    }
    (ref / "unified.json").write_text(json.dumps(stale))
    text, data = build_results(run)
    assert "unified.json is stale: its manifest.json hash differs" in text
    assert data["v1.0_unified"] == {}, "stale numbers are never shown"
    (ref / "unified.json").write_text(json.dumps(dict(stale, schema="fdb-v1.0-unified-1")))
    assert "unsupported version 'fdb-v1.0-unified-1'" in build_results(run)[0]
    # current and fresh but not a UnifiedResult, or not JSON: one error naming it and the backfill
    hashes = {"manifest_sha256": sha256_file(ref / "manifest.json")}
    fresh = dict(stale, inputs=dict(hashes, asr_sha256=sha256_file(ref / "asr.json")))
    (ref / "unified-samples.jsonl").write_text("")
    for text in (json.dumps(fresh), json.dumps(fresh)[:-9]):
        (ref / "unified.json").write_text(text)
        with pytest.raises(FdbError) as err:
            build_results(run)
        line = err.value.one_line()
        assert str(ref / "unified.json") in line and f"score v10 --tree {ref}" in line
