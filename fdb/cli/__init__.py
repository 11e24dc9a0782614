"""`python -m fdb`: one typer app, one module per verb.

Verb modules import the packages that do the work lazily inside the command, so `--help` is
fast and a missing optional dependency only affects the verb that needs it.
"""

from __future__ import annotations

import importlib
import logging
import sys

import typer

from fdb.cli import failures
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
VERB_MODULES = [
    "setup",
    "serve",
    "serve_model",
    "serve_judge",
    "generate",
    "asr",
    "judge",
    "aggregate",
    "env",
    "score",
    "dataset",
    "conformance",
    "sweep",
    "tts_bench",
    "baseline",
    "gate",
]
VERB_MODULES += ["compare"]


_REGISTERED: list[bool] = []


def _register() -> None:
    """Add every verb to ``app``, once per process (in-process callers run main many times)."""
    if _REGISTERED:
        return
    for name in VERB_MODULES:
        importlib.import_module(f"fdb.cli.{name}").register(app)
    _REGISTERED.append(True)


def main(argv: list[str] | None = None) -> None:
    """Run a verb. Every failure ends in one line on stderr and exit code 2 (fdb/cli/failures.py):
    an FdbError with its fix, a usage error with the verb's --help, anything unexpected with its
    type, message and the debug log that holds the traceback (printed too with --log-level
    debug)."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        _register()
        rc = app(args=args, standalone_mode=False)  # a verb's typer.Exit(n) comes back as n
    except SystemExit:
        raise
    except KeyboardInterrupt:
        typer.secho("interrupted", err=True)
        sys.exit(130)
    except BaseException as exc:  # noqa: BLE001  (the one place a command's failure is reported)
        sys.exit(_fail(exc, args))
    sys.exit(rc if isinstance(rc, int) else 0)


def _fail(exc: BaseException, args: list[str]) -> int:
    debug = failures.wants_debug(args)
    kind = failures.click_kind(exc)
    if isinstance(exc, FdbError):
        line = failures.fdb_error_line(exc, args, debug)
    elif kind == "exit":
        return exc.exit_code
    elif kind == "abort":
        typer.secho("aborted", err=True)
        return 1
    elif kind == "help":  # `python -m fdb VERB` without arguments: its help, as click would
        exc.show()
        return failures.EXIT_ERROR
    elif kind == "usage":
        line = failures.usage_line(exc)
    elif kind == "click":
        line = f"ERROR: {failures.one_line(exc.format_message())}"
    elif isinstance(exc, Exception):
        line = failures.unexpected_line(exc, args, debug)
    else:  # GeneratorExit and the like: not ours to report
        raise exc
    typer.secho(line, fg=typer.colors.RED, err=True)
    return failures.EXIT_ERROR


def configure_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
