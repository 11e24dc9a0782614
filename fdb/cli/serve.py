"""`python -m fdb serve`: host a system on /v1/realtime (foreground, Ctrl-C stops it)."""

from __future__ import annotations

from pathlib import Path

import typer

from fdb.cli import configure_logging
from fdb.settings import load_settings


def print_kinds(value: bool) -> None:
    """``--kinds``: every backend kind of the registry, one line each, then exit 0."""
    if not value:
        return
    # lazy: keeps `fdb --help` fast; loaded when the flag is given
    from serving.graph.registry import describe

    typer.echo(describe())
    raise typer.Exit()


def serve(
    ctx: typer.Context,
    system: str = typer.Option(
        "embedded-cascade", help="The system to host (see serving/systems.py)."
    ),
    config: Path | None = typer.Option(
        None, help="A launch.yaml describing the system instead of --system."
    ),
    profile: str | None = typer.Option(
        None,
        help="A shipped launch profile instead of --config: SGLang services on GPUs behind fdb's "
        "VAD, turn taking and dialog (serving/profiles/NAME.yaml; docs/sglang.md). Set its "
        "vars with --vars.NAME VALUE, e.g. --vars.sglang_python /opt/sglang/bin/python.",
    ),
    host: str = typer.Option(
        "127.0.0.1", help="Bind address; loopback unless you mean to expose it."
    ),
    port: int = typer.Option(
        0, min=0, max=65535, help="Port (default: SERVER_PORT, or 8097 + 10 x GPU)."
    ),
    next_free_port: bool = typer.Option(
        False, help="If the port is busy, serve on the next free one instead of failing."
    ),
    log_level: str = typer.Option("info", help="debug, info, warning or error."),
    kinds: bool = typer.Option(
        False,
        "--kinds",
        is_eager=True,
        callback=print_kinds,
        help="List every backend kind a system can use (role, kind, where it runs, what it is; "
        "serving/graph/registry.py) and exit.",
    ),
) -> None:
    """Serve a system on /v1/realtime, /v1/realtime/capabilities, /v1/models and /health.

    Any launch setting can be overridden after the options, one leaf value per flag:
    --max_sessions 8, --vad.silence_duration_ms 800, --backends.llm.base_url http://h:9000/v1,
    --services.tts.port 8106 (services by name), --vars.llm_model /models/qwen3-4b (a profile's
    vars), or path=value. The result is validated like a launch file (docs/formats.md, "Launch
    file").

    --profile NAME serves a shipped GPU cascade (sglang-qwen3-1gpu, sglang-qwen3-2gpu): SGLang
    recognizer, language model and speech model as services on CUDA_VISIBLE_DEVICES with their
    memory shares, fdb's Silero VAD, Smart Turn and dialog in front (docs/sglang.md).

    The default, embedded-cascade, is fdb's offline CPU system: Silero VAD ends the user's
    turn, Whisper tiny.en transcribes it, SmolLM2-135M writes a short reply and Piper speaks it,
    streamed as response.output_audio.delta (24 kHz PCM16) over the turn-based session protocol.
    duplex-baseline is fdb's native full-duplex baseline on the same components: the native
    session protocol (profile minicpmo-native-pr2377, 1 s units), deciding per unit when to
    speak, yield and backchannel (serving/duplex/policy.py).
    """
    # lazy: keeps `fdb --help` fast; loaded when the command runs
    from serving.launcher import serve as run_server
    from serving.overrides import parse_override_args

    configure_logging(log_level)
    overrides = parse_override_args(ctx.args)
    run_server(
        system=system,
        host=host,
        port=port or load_settings().server_port,
        config=config,
        next_free_port=next_free_port,
        log_level=log_level,
        overrides=overrides,
        profile=profile,
    )


def register(app: typer.Typer) -> None:
    app.command(
        "serve",
        short_help="Host a system (default: the embedded offline cascade) on /v1/realtime.",
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    )(serve)
