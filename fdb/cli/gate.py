"""`python -m fdb gate`: does the candidate regress against the baseline? An exit code CI trusts."""

from __future__ import annotations

import re
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from fdb.errors import FdbError
from fdb.settings import load_settings

HELP = (
    "Compare a candidate output with a baseline and decide with statistics, never with a single "
    "difference. BASELINE and CANDIDATE are run directories or names ($FDB_WORK/runs/NAME, all "
    "repeats), sweep outputs (serving.json), tts-bench outputs (tts.json) or a frozen baseline "
    "(`fdb baseline freeze`); both of one kind. The reward (tts: audio-s/s per level; sweep: "
    "capacity) is reported as candidate / baseline with its interval; each guard (latency, RTF, "
    "failures, WER, behavior shares, …; gate.yaml, defaults per kind) is pass, regressed, "
    "improved or inconclusive. A candidate that breaks a guard earns no reward. Writes "
    "OUT/GATE.md (fits a PR comment), OUT/gate.json, OUT/tables/*.csv and, with --junit, JUnit "
    "XML. Exit: 0 pass, 1 a guard regressed or the reward is below --require-gain, 2 not "
    "comparable or bad input, 3 an inconclusive guard under --strict. Guide: docs/gating.md."
)


def gate(
    baseline: str = typer.Option(
        ..., help="Baseline: run dir/name, sweep or tts-bench output, or frozen baseline."
    ),
    candidate: str = typer.Option(
        ..., help="Candidate: an output of the same kind as the baseline."
    ),
    config: Path | None = typer.Option(
        None, help="gate.yaml (schema fdb-gate-1); default: the kind's defaults."
    ),
    out: Path | None = typer.Option(
        None, help="Where GATE.md/gate.json go (default $FDB_WORK/gates/B-vs-C)."
    ),
    junit: Path | None = typer.Option(
        None, help="Also write JUnit XML here: one test case per guard series."
    ),
    require_gain: float | None = typer.Option(
        None, help="Fail unless the reward is at least this ratio, e.g. 1.05."
    ),
    strict: bool = typer.Option(False, help="An inconclusive guard fails the gate (exit 3)."),
) -> None:
    """Gate a candidate against a baseline."""
    # lazy: keeps `fdb --help` fast; loaded when the command runs
    from fdb.provenance import current
    from reports.baseline import observe
    from reports.gate import gate as decide_gate
    from reports.gate_config import load_config
    from reports.gate_render import headline, write

    console = Console(stderr=True)
    with console.status("reading the baseline and the candidate …"):
        base, cand = observe(baseline), observe(candidate)
    settings = load_config(config, base.kind)
    result = decide_gate(base, cand, settings, require_gain=require_gain, strict=strict)
    result = result.model_copy(update={"provenance": current().model_dump(mode="json")})
    folder = out or load_settings().work / "gates" / f"{_name(baseline)}-vs-{_name(candidate)}"
    path = write(result, folder, junit)
    console.print(summary(result))
    console.print(headline(result).replace("**", ""))
    console.print(f"wrote {path}")
    raise typer.Exit(result.exit_code)


def _name(source: str) -> str:
    path = Path(source)
    stem = path.stem if path.suffix else path.name
    return re.sub(r"[^A-Za-z0-9._-]+", "_", stem)[:60] or "output"


def summary(result):
    # lazy: keeps `fdb --help` fast; loaded when the command runs
    from reports.gate_render import MARK, change_text

    table = Table("Guard", "Change", "Verdict", title=f"fdb gate ({result.kind})")
    for row in result.guards:
        table.add_row(
            row.series, change_text(row.effect, row.unit, result.series_alpha), MARK[row.verdict]
        )
    return table


def print_default(kind: str = typer.Argument(..., help="tts, sweep or run.")) -> None:
    """Print the default gate.yaml of a kind of output, to copy and edit."""
    # lazy: keeps `fdb --help` fast; loaded when the command runs
    import yaml

    from reports.gate_config import DEFAULTS

    if kind not in DEFAULTS:
        raise FdbError(f"unknown kind {kind!r}", f"use one of {', '.join(DEFAULTS)}")
    typer.echo(yaml.safe_dump(DEFAULTS[kind].dump(), sort_keys=False))


def register(app: typer.Typer) -> None:
    app.command(
        "gate",
        help=HELP,
        short_help="Gate a candidate against a baseline (exit 0 pass, 1 regressed).",
    )(gate)
    app.command("gate-default", short_help="Print the default gate.yaml of an output kind.")(
        print_default
    )
