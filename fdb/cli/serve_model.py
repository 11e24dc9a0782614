"""`python -m fdb serve-model`: the bundled model server in the foreground, as generate runs it."""

from __future__ import annotations

import typer

from fdb.cli import configure_logging
from fdb.errors import FdbError
from fdb.settings import DEFAULT_SERVER_BASE_PORT, load_settings


def serve_model(
    run_name: str | None = typer.Option(
        None, help="Serve the system this run recorded against (its run.json)."
    ),
    system: str = typer.Option(
        "embedded-cascade", help="The bundled system when no --run-name is given."
    ),
    gpu: int | None = typer.Option(
        None,
        help="GPU index of the server (default: the job GPU); its port is 8097 + 10 x GPU unless "
        "SERVER_PORT is set.",
    ),
    log_level: str = typer.Option("info", help="debug, info, warning or error."),
) -> None:
    """Start the model server generate would start (same system, host 127.0.0.1 and port) in the
    foreground until Ctrl-C, for recording or scoring by hand. The bundled systems run on the
    CPU."""
    # lazy: keeps `fdb --help` fast; loaded when the command runs
    from fdb.layout import RunPaths
    from fdb.run_manifest import load_manifest
    from runs.gpus import parse_gpus
    from serving.launcher import serve

    configure_logging(log_level)
    settings = load_settings()
    if run_name is not None:
        manifest = load_manifest(RunPaths.of(settings.runs_dir, run_name))
        if manifest is None:
            raise FdbError(
                f"no run.json for run {run_name} under {settings.runs_dir}",
                "check --run-name and FDB_WORK",
            )
        if manifest.server.system is None:
            raise FdbError(
                f"run {run_name} recorded against your own server {manifest.server.url}",
                "start that server yourself; serve-model starts only fdb's bundled systems",
            )
        system = manifest.server.system
    index = parse_gpus(str(gpu))[0] if gpu is not None else settings.gpu
    port = settings.server_port if gpu is None else DEFAULT_SERVER_BASE_PORT + 10 * index
    typer.echo(
        f"serving {system} for GPU {index} on ws://127.0.0.1:{port}/v1/realtime (Ctrl-C stops it)",
        err=True,
    )
    serve(system=system, host="127.0.0.1", port=port, log_level=log_level)


def register(app: typer.Typer) -> None:
    app.command(
        "serve-model", short_help="The bundled model server in the foreground, on the run's port."
    )(serve_model)
