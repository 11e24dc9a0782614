"""`python -m fdb conformance`: run protocol scenarios against a /v1/realtime server."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from fdb.dialects import dialects_help


def conformance(
    url: str = typer.Option(
        ..., help="The server's WebSocket URL, e.g. ws://127.0.0.1:8097/v1/realtime."
    ),
    profile: str = typer.Option(
        "turn-based",
        help=f"Protocol profile (dialect): {dialects_help()}.",
    ),
    turn_detection: str = typer.Option(
        "",
        help='JSON turn detection. Default: {"type": "server_vad", "silence_duration_ms": 500} for '
        "turn-based and the legacy/OpenAI profiles; the native profile takes none. The barge-in "
        "scenarios set interrupt_response themselves, the commit scenario sends null.",
    ),
    model: str = typer.Option(
        "", help="Model id to request in session.update (left out when empty)."
    ),
    question: Path | None = typer.Option(
        None,
        help="A WAV of a spoken question (default: fdb's own, synthesized by its Piper voice and "
        "cached under $FDB_WORK/cache/conformance).",
    ),
    timeout: float = typer.Option(60.0, help="Deadline of the recorded session in seconds."),
    legacy_tail: float = typer.Option(
        1.0, help="Seconds after the input before the no-op session.update (legacy/OpenAI)."
    ),
    reply_timeout: float = typer.Option(
        30.0, help="Seconds a scenario waits for the reply to its question."
    ),
) -> None:
    """Check how a server's /v1/realtime follows a protocol profile, rule by rule.

    The battery records one paced session of a spoken question (fdb's own by default, or your
    --question WAV) and splits the protocol oracle's verdict into rules: handshake, paced append,
    input receipts and units (session-protocol profiles), end -> drained -> close or the legacy
    tail, response lifecycle, no error event, client pacing, whether the question was answered,
    and (24 kHz profiles) whether the input is read at 24 kHz. Probes on fresh connections check
    that invalid JSON, an out-of-order seq (profiles that send seq) and a model mismatch
    (GA-shaped sessions) are answered with an error event. Scenarios on fresh connections
    (profiles with turn detection) check barge-in with interrupt_response on (the reply is
    cancelled) and off (it is not), response.cancel, conversation.item.truncate, and commit +
    response.create with turn_detection null.

    Each rule is pass, fail, or "not exercised" when its scenario did not happen (no reply to
    barge into, a failed handshake): that is not a pass, and such rules are listed at the end.
    Exits 1 if any rule fails.
    """
    # lazy: keeps `fdb --help` fast; loaded when the command runs
    from fdb.audio import read_wav
    from recorders.conformance import run_conformance
    from recorders.eventloop import run as run_loop

    audio = read_wav(question, "--question") if question else None
    rows = run_loop(
        run_conformance(
            url,
            profile,
            turn_detection or None,
            model or None,
            audio,
            timeout_s=timeout,
            tail_s=legacy_tail,
            reply_timeout_s=reply_timeout,
        )
    )
    table = Table(title=f"conformance: {profile} at {url}")
    for column in ("rule", "status", "what it checks", "detail"):
        table.add_column(column, overflow="fold")
    colors = {"pass": "green", "fail": "red", "not exercised": "yellow"}
    for row in rows:
        table.add_row(
            row.rule, f"[{colors[row.status]}]{row.status}[/]", row.description, row.detail
        )
    console = Console()
    console.print(table)
    failed = [r.rule for r in rows if r.status == "fail"]
    idle = [r.rule for r in rows if r.status == "not exercised"]
    passed = len(rows) - len(failed) - len(idle)
    console.print(
        f"{passed} of {len(rows)} rules passed"
        + (f"; failed: {', '.join(failed)}" if failed else "")
        + (f"; not exercised: {', '.join(idle)}" if idle else "")
    )
    if failed:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command(
        "conformance",
        short_help="Check a /v1/realtime server against a protocol profile, rule by rule.",
    )(conformance)
