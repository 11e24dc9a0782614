"""A real sweep against the bundled server (levels 1 and 2 on one synthetic v1.5 pair, record
options after ``--``), then the report subcommand over the recorded levels; and the sweep's
refusals."""

from __future__ import annotations

import json
import os

import pytest

from runs.sweep import level_concurrency, parse_levels
from tests.conftest import free_port
from tests.runs.conftest import fdb, synthetic_copy


@pytest.fixture(scope="module")
def sweep_env(tmp_path_factory, synthetic_work) -> dict:
    root = synthetic_copy(synthetic_work, tmp_path_factory.mktemp("sweepwork"))
    env = dict(os.environ, FDB_WORK=str(root), SERVER_PORT=str(free_port()), COLUMNS="200")
    for name in ("CUDA_VISIBLE_DEVICES", "GPU", "FDB_DATASET", "FDB10_DATASET"):
        env.pop(name, None)
    return env


def test_sweep_records_levels_and_reports_capacity(sweep_env, tmp_path):
    out = tmp_path / "sweep"
    done = fdb(
        [
            "sweep",
            "--output",
            str(out),
            "--concurrency",
            "1,2",
            "--",
            "--sample-id",
            "user_interruption/1",
            "--timeout",
            "60",
        ],
        sweep_env,
        timeout=150,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads((out / "serving.json").read_text())
    rows = {row["concurrency"]: row for row in data["rows"]}
    assert set(rows) == {1, 2}
    for level, row in rows.items():
        assert row["sessions"] == 2 and row["profile"] == "turn-based"
        assert row["first_audio_p50_ms"] is not None and row["first_audio_p50_ms"] > 0
        assert row["unit_lag_p50_ms"] is None  # native-only column
        assert row["meets_targets"] == (not row["missed_targets"])
        assert len(list((out / f"concurrency-{level}").rglob("session.json"))) == 2
    assert rows[2]["mean_open"] > rows[1]["mean_open"]
    assert (
        "max_sessions: 2" in (out / "logs" / "launch.yaml").read_text()
    )  # the bundled server admits the top level
    for level in (1, 2):
        spec = json.loads((out / f"concurrency-{level}" / "level.json").read_text())
        assert (
            spec["timeout_s"] == 60
            and spec["max_sessions"] == 2
            and spec["record_args"][-2:] == ["--timeout", "60"]
        )
        client = json.loads((out / f"concurrency-{level}" / "client.json").read_text())
        assert 0 < client["cpu_share"] < 1.5 and rows[level]["client_cpu"] == client["cpu_share"]
    assert data["warnings"] == [] and data["client_limited_levels"] == []
    for (
        level,
        row,
    ) in rows.items():  # one repeat: its own row is the level's (less the server's max_sessions)
        (alone,) = data["repeat_rows"][str(level)]
        assert alone == {**row, "server_max_sessions": None}
    assert (out / "serving.png").read_bytes().startswith(b"\x89PNG")
    text = (out / "SERVING.md").read_text()
    assert data["capacity"]["line"] in text and "client-side times" in text
    assert text.count("\n| 1 | 2 |") == 1 and text.count("\n| 2 | 2 |") == 1
    assert "Load-generator limited levels: none." in text
    assert "Capacity:" in done.stderr

    again = fdb(
        [
            "sweep",
            "report",
            "--run",
            str(out / "concurrency-2"),
            "--run",
            str(out / "concurrency-1"),
            "--output",
            str(tmp_path / "again" / "serving.json"),
        ],
        sweep_env,
        timeout=60,
    )
    assert again.returncode == 0, again.stderr[-3000:]
    redone = json.loads((tmp_path / "again" / "serving.json").read_text())
    assert redone["rows"] == data["rows"] and redone["capacity"] == data["capacity"]
    assert (tmp_path / "again" / "serving.png").read_bytes() == (out / "serving.png").read_bytes()
    assert data["capacity"]["line"] in (tmp_path / "again" / "SERVING.md").read_text()

    refused = fdb(
        [
            "sweep",
            "run",
            "--output",
            str(out),
            "--concurrency",
            "1",
            "--",
            "--sample-id",
            "user_interruption/1",
            "--url",
            "ws://127.0.0.1:9/v1/realtime",
        ],
        sweep_env,
        timeout=60,
    )
    assert refused.returncode == 2 and "already holds a recording" in refused.stderr


def test_levels_parse_and_name(tmp_path):
    assert parse_levels("1,2,4") == [1, 2, 4]
    for bad in ("", "2,1", "0,1", "a"):
        with pytest.raises(Exception, match="--concurrency"):
            parse_levels(bad)
    (tmp_path / "concurrency-8").mkdir()
    assert level_concurrency(tmp_path / "concurrency-8") == 8


def test_serving_json_keeps_each_repeats_row(tmp_path):
    from runs.sweep import report
    from tests.runs.test_sweep_search import _level

    _level(tmp_path / "concurrency-1", 1, 2, 0.1)
    _level(tmp_path / "concurrency-2" / "repeat-1", 2, 2, 0.2)
    _level(tmp_path / "concurrency-2" / "repeat-2", 2, 2, 0.3, slow=True)
    data = report(
        [tmp_path / "concurrency-2", tmp_path / "concurrency-1"], tmp_path / "out" / "serving.json"
    )
    assert sorted(data["repeat_rows"]) == ["1", "2"] and len(data["repeat_rows"]["1"]) == 1
    first, second = data["repeat_rows"]["2"]
    assert (first["client_cpu"], second["client_cpu"]) == (0.2, 0.3)
    assert first["meets_targets"] and not second["meets_targets"]
    assert second["missed_targets"] == ["reply RTF p90 3.0 not < 1"]  # its own, not named by repeat
    pooled = data["rows"][1]
    assert pooled["repeats"] == 2 and pooled["sessions"] == first["sessions"] + second["sessions"]
    assert (
        json.loads((tmp_path / "out" / "serving.json").read_text())["repeat_rows"]
        == data["repeat_rows"]
    )


def test_serving_csv_and_json_tables_are_serving_md_tables(tmp_path):
    """tables/*.csv next to SERVING.md and serving.json "tables" come from the Table SERVING.md
    shows: each CSV's rows are the cells of the Markdown table at its position."""
    from runs.sweep import report
    from tests.runs.test_sweep_search import _level
    from tests.runs.test_tts_bench import csv_tables, markdown_tables

    _level(tmp_path / "concurrency-1", 1, 2, 0.1)
    _level(tmp_path / "concurrency-2" / "repeat-1", 2, 2, 0.2)
    _level(tmp_path / "concurrency-2" / "repeat-2", 2, 2, 0.3, slow=True)
    out = tmp_path / "out"
    (out / "tables").mkdir(parents=True)
    (out / "tables" / "09-stale.csv").write_text("a\n")  # from an earlier report: removed
    data = report([tmp_path / "concurrency-2", tmp_path / "concurrency-1"], out / "serving.json")
    shown, written = markdown_tables((out / "SERVING.md").read_text()), csv_tables(out / "tables")
    assert [name for name, _ in written] == ["01-serving.csv"]
    assert [rows for _, rows in written] == shown and len(shown[0]) == 3
    assert shown[0][2][:2] == ["2", "2 (2 repeats)"]
    (table,) = data["tables"]
    assert table["name"] == "serving" and [table["headers"]] == shown[0][:1]
    assert [r["concurrency"] for r in table["rows"]] == [1, 2] and table["rows"][1][
        "client_cpu"
    ] == 0.3
    assert table["rows"][0]["unit_lag_ms"] is None  # shown as "-": missing, not 0
    assert json.loads((out / "serving.json").read_text())["tables"] == data["tables"]
