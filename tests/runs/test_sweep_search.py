"""The sweep's pure parts: the capacity search with a fake level runner, the record options after
``--``, and the report (repeats, max_sessions and client-limited warnings, the PNG) over hand-built
level directories."""

from __future__ import annotations

import json

import pytest

from fdb.errors import FdbError
from fdb.io import atomic_write_json
from fdb.session_records import LoopLagStats, PacingStats
from runs.sweep import ClientStats, LevelSpec, report, search_capacity
from runs.sweep_args import parse_record_options
from tests.scorers.test_serving_metrics import _appends, _record, _reply


def _run(passing: set[int] | int):
    """A fake level runner: a level meets the targets up to ``passing`` (or when in the set)."""
    seen: list[int] = []

    def meets(level: int) -> bool:
        seen.append(level)
        return level in passing if isinstance(passing, set) else level <= passing

    return meets, seen


@pytest.mark.parametrize(
    ("capacity", "max_level", "visited"),
    [
        (5, 64, [1, 2, 4, 8, 6, 5]),  # double to the first miss (8), bisect 4..8
        (7, 64, [1, 2, 4, 8, 6, 7]),
        (4, 64, [1, 2, 4, 8, 6, 5]),
        (1, 64, [1, 2]),  # 1 passes, 2 misses: nothing in between
        (0, 64, [1]),  # the first level misses: stop
        (
            100,
            12,
            [1, 2, 4, 8, 12],
        ),  # every level passes up to --max-concurrency, itself recorded last
        (10, 12, [1, 2, 4, 8, 12, 10, 11]),
    ],
)
def test_search_doubles_then_bisects(capacity, max_level, visited):
    meets, seen = _run(capacity)
    assert search_capacity(meets, max_level) == visited == seen
    assert len(set(visited)) == len(visited)  # never records a level twice


def test_search_on_a_non_monotonic_server_bisects_between_last_pass_and_first_miss():
    meets, _ = _run({1, 2, 3, 4, 6})  # 8 misses, 6 passes, 7 misses
    assert search_capacity(meets, 64) == [1, 2, 4, 8, 6, 7]
    with pytest.raises(FdbError, match="--max-concurrency"):
        search_capacity(meets, 0)


def test_record_options_after_the_double_dash():
    opts = parse_record_options(
        [
            "--url",
            "ws://h:1/v1/realtime",
            "--timeout",
            "60",
            "--sample-id",
            "user_interruption/1",
            "--sample-id",
            "user_backchannel/2",
            "--instructions",
            "Be brief.",
        ]
    )
    assert (opts.url, opts.timeout_s, opts.instructions, opts.profile) == (
        "ws://h:1/v1/realtime",
        60.0,
        "Be brief.",
        "turn-based",
    )
    assert opts.choice.sample_ids == ["user_interruption/1", "user_backchannel/2"]
    assert opts.turn_detection == {
        "type": "server_vad",
        "silence_duration_ms": 500,
    }  # the profile's default
    assert opts.args[:2] == ["--url", "ws://h:1/v1/realtime"]
    native = parse_record_options(["--profile", "minicpmo-native-pr2377"])
    assert native.turn_detection is None and native.timeout_s is None
    for bad, named in (
        (["--bogus", "1"], "--bogus is neither"),
        (["--concurrency", "4"], "put it before --"),
        (["--timeout", "abc"], "--timeout"),
        (["--timeout", "0"], "--timeout must be positive"),
        (["--profile", "nope"], "nope"),
        (["stray"], "stray"),
        (
            ["--profile", "minicpmo-native-pr2377", "--turn-detection", "{}"],
            "does not take --turn-detection",
        ),
    ):
        with pytest.raises(FdbError, match=named):
            parse_record_options(bad)


def _session(root, name: str, trace, **record) -> None:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "session.json").write_text(_record(**record).model_dump_json(by_alias=True))
    (folder / "trace.jsonl").write_text("".join(ev.line() + "\n" for ev in trace))


def _level(
    root, level: int, max_sessions: int, cpu: float, *, late: bool = False, slow: bool = False
) -> None:
    root.mkdir(parents=True)
    atomic_write_json(
        root / "level.json",
        LevelSpec(
            concurrency=level,
            url="ws://x",
            dataset="v1.5",
            profile="turn-based",
            max_sessions=max_sessions,
        ).model_dump(),
    )
    atomic_write_json(
        root / "client.json",
        ClientStats(cpu_s=cpu, wall_s=1.0, cpu_share=cpu).model_dump(by_alias=True),
    )
    arrivals = [1.2, 1.5, 1.8] if slow else [1.2, 1.21, 1.22]
    extra = (
        {"pacing": PacingStats(violations=1), "loop_lag": LoopLagStats(client_behind=True)}
        if late
        else {}
    )
    _session(root, "a/1/clean", _appends(10) + _reply("r", 1.0, arrivals), **extra)


def test_report_repeats_warnings_and_plot(tmp_path):
    _level(tmp_path / "concurrency-1", 1, 2, 0.1)
    _level(tmp_path / "concurrency-2" / "repeat-1", 2, 2, 0.2)
    _level(tmp_path / "concurrency-2" / "repeat-2", 2, 2, 0.3, slow=True)
    _level(tmp_path / "concurrency-4", 4, 2, 0.97, late=True)
    levels = [tmp_path / f"concurrency-{n}" for n in (4, 1, 2)]
    data = report(levels, tmp_path / "out" / "serving.json")
    rows = {row["concurrency"]: row for row in data["rows"]}
    assert [row["concurrency"] for row in data["rows"]] == [1, 2, 4]
    assert rows[1]["meets_targets"] and rows[2]["repeats"] == 2 and rows[2]["sessions"] == 2
    assert (
        rows[2]["missed_targets"] == ["repeat 2: reply RTF p90 3.0 not < 1"]
        and rows[2]["client_cpu"] == 0.3
    )
    assert (
        rows[4]["client_limited"]
        and rows[4]["server_max_sessions"] == 2
        and rows[4]["client_cpu"] == 0.97
    )
    assert data["capacity"]["sessions"] == 1 and data["capacity"]["first_miss"] == 2
    assert data["client_limited_levels"] == [4]
    assert [w.split(":")[0].split(",")[0] for w in data["warnings"]] == [
        # per repeat: one session never makes 2 open at once
        "level 2 recorded a cohort of only 1 sessions",
        "level 4 recorded a cohort of only 1 sessions",
        "level 4 exceeds the server's max_sessions 2",
        "level 4 was limited by the load generator",
    ]
    assert "used 97% of a core" in data["warnings"][-1]
    text = (tmp_path / "out" / "SERVING.md").read_text()
    assert "| 2 | 2 (2 repeats) |" in text and "Load-generator limited levels: 4." in text
    assert "## Warnings" in text and "refused with 503 by design" in text and "| 97% |" in text
    png = (tmp_path / "out" / "serving.png").read_bytes()
    assert (
        png.startswith(b"\x89PNG")
        and json.loads((tmp_path / "out" / "serving.json").read_text()) == data
    )
    again = report(levels, tmp_path / "again" / "serving.json")
    assert (tmp_path / "again" / "serving.png").read_bytes() == png and again["rows"] == data[
        "rows"
    ]


def test_sweep_search_with_repeats_records_each_visited_level(tmp_path, monkeypatch):
    """sweep() wiring: --search visits 1, 2, 4, 8, 6, 5 against a fake recorder whose levels above
    5 stream too slowly, every level twice (--repeats 2), then reports the capacity."""
    import runs.sweep as sweep_module
    from runs.sweep import SweepOptions, sweep
    from runs.sweep_args import parse_record_options

    calls: list[tuple[int, int]] = []

    def fake_run_level(spec, directory, console, url=None) -> int:
        calls.append((spec.concurrency, spec.repeat))
        _level(directory, spec.concurrency, 64, 0.1, slow=spec.concurrency > 5)
        return 0

    monkeypatch.setattr(sweep_module, "plan_jobs", lambda opts, console: [])
    monkeypatch.setattr(sweep_module, "run_level", fake_run_level)
    record = parse_record_options(
        ["--url", "ws://127.0.0.1:9/v1/realtime"]
    )  # nothing listens: no max_sessions
    data = sweep(
        SweepOptions(output=tmp_path, record=record, search=True, max_concurrency=16, repeats=2)
    )
    assert calls == [(n, k) for n in (1, 2, 4, 8, 6, 5) for k in (1, 2)]
    assert [row["concurrency"] for row in data["rows"]] == [1, 2, 4, 5, 6, 8]
    assert all(row["repeats"] == 2 for row in data["rows"])
    assert data["capacity"]["sessions"] == 5 and data["capacity"]["first_miss"] == 6
    assert (tmp_path / "concurrency-6" / "repeat-2" / "client.json").is_file() and (
        tmp_path / "SERVING.md"
    ).is_file()
