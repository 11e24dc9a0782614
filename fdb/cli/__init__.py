"""`python -m fdb`: one typer app, one module per verb.

Verb modules import the packages that do the work lazily inside the command, so `--help` is
fast and a missing optional dependency only affects the verb that needs it.
"""

from __future__ import annotations

import logging
import sys

import typer

from fdb.errors import FdbError

app = typer.Typer(
    name="fdb",
    help=(
        "fdb: benchmark real-time spoken dialogue systems on Full-Duplex-Bench v1.0/v1.5.\n\n"
        "Typical use: `python -m fdb generate --run-name NAME --all-stages` records sessions "
        "against a server (the bundled embedded cascade unless --url is given), transcribes and "
        "scores them, and writes $FDB_WORK/runs/NAME/RESULTS.md."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


# One module per verb, in the order `--help` lists them. Each module has register(app).
VERB_MODULES = ["setup", "serve", "serve_model", "serve_judge", "generate", "asr", "judge", "aggregate",
                "env", "score", "dataset", "conformance", "sweep", "tts_bench", "baseline", "gate"]
VERB_MODULES += ["compare"]


def _register() -> None:
    import importlib

    for name in VERB_MODULES:
        importlib.import_module(f"fdb.cli.{name}").register(app)


def main(argv: list[str] | None = None) -> None:
    _register()
    try:
        rc = app(args=argv, standalone_mode=False)  # a verb's typer.Exit(n) comes back as n
        sys.exit(rc if isinstance(rc, int) else 0)
    except FdbError as exc:
        typer.secho(f"ERROR: {exc.one_line()}", fg=typer.colors.RED, err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        typer.secho("interrupted", err=True)
        sys.exit(130)
    except SystemExit:
        raise
    except Exception as exc:  # click usage errors and the like
        import click

        if isinstance(exc, click.exceptions.ClickException):
            exc.show()
            sys.exit(exc.exit_code)
        if isinstance(exc, click.exceptions.Exit):
            sys.exit(exc.exit_code)
        if isinstance(exc, click.exceptions.Abort):
            sys.exit(1)
        raise


def configure_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
