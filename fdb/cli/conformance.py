"""`python -m fdb conformance`: run protocol scenarios against a /v1/realtime server."""

from __future__ import annotations

from pathlib import Path

import typer


def conformance(
    url: str = typer.Option(..., help="The server's WebSocket URL, e.g. ws://127.0.0.1:8097/v1/realtime."),
    profile: str = typer.Option(
        "turn-based",
        help="Protocol profile: turn-based, minicpmo-native-pr2377, qwen3-omni-half-duplex, openai-ga, openai-beta.",
    ),
    turn_detection: str = typer.Option(
        "", help='JSON turn detection, required for turn-based and legacy/OpenAI profiles, rejected for native '
                 'ones, e.g. \'{"type": "server_vad", "silence_duration_ms": 500}\'.'),
    model: str = typer.Option("", help="Model id to request in session.update (left out when empty)."),
    question: Path | None = typer.Option(None, help="A WAV of a spoken question; enables 'question-answered'."),
    timeout: float = typer.Option(60.0, help="Deadline of the recorded session in seconds."),
    legacy_tail: float = typer.Option(1.0, help="Seconds after the input before the no-op session.update (legacy/OpenAI)."),
) -> None:
    """Check how a server's /v1/realtime follows a protocol profile, rule by rule.

    The battery records one paced session (your --question WAV, or 2 s of a quiet tone) and
    splits the protocol oracle's verdict into rules: handshake, paced append, input receipts and
    units (session-protocol profiles), end -> drained -> close or the legacy tail, response
    lifecycle (barge-in cancellations included), no error event, client pacing, and whether the
    question was answered. Short probes on fresh connections then check that invalid JSON, an
    out-of-order seq (profiles that send seq) and a model mismatch (GA-shaped sessions) are each
    answered with an error event. It prints a pass/fail/skip table and exits 1 if any rule fails.
    """
    from rich.console import Console
    from rich.table import Table

    from fdb.audio import read_wav
    from recorders.conformance import run_conformance
    from recorders.eventloop import run as run_loop

    audio = read_wav(question, "--question") if question else None
    rows = run_loop(run_conformance(
        url, profile, turn_detection or None, model or None, audio, timeout_s=timeout, tail_s=legacy_tail,
    ))
    table = Table(title=f"conformance: {profile} at {url}")
    for column in ("rule", "status", "what it checks", "detail"):
        table.add_column(column, overflow="fold")
    colors = {"pass": "green", "fail": "red", "skip": "yellow"}
    for row in rows:
        table.add_row(row.rule, f"[{colors[row.status]}]{row.status}[/]", row.description, row.detail)
    console = Console()
    console.print(table)
    failed = [r.rule for r in rows if r.status == "fail"]
    console.print(f"{len(rows) - len(failed)} of {len(rows)} rules did not fail" + (f"; failed: {', '.join(failed)}" if failed else ""))
    if failed:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("conformance", short_help="Check a /v1/realtime server against a protocol profile, rule by rule.")(conformance)
