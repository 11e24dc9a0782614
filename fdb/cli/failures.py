"""How `python -m fdb` ends when a command fails: ONE line on stderr that says what went wrong
and what to do, and exit code 2. Tracebacks never reach the terminal unless `--log-level debug`
is given; the traceback of every unexpected failure is appended to the debug log,
$FDB_WORK/logs/fdb-debug.log (or fdb-debug-UID.log in the temp directory when that cannot be
written), with the values of secret-looking environment variables removed (fdb/io.py).
"""

from __future__ import annotations

import sys

import click
import typer.exceptions

from fdb.errors import FdbError
from fdb.io import append_debug_log, describe_failure, format_traceback, one_line, redact_secrets

EXIT_ERROR = 2  # the exit code of every failed command (bad input or an unexpected failure)


def wants_debug(argv: list[str]) -> bool:
    """True when the command line asks for `--log-level debug` (the verbs that take it)."""
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        if arg == "--log-level" and i + 1 < len(argv) and argv[i + 1].lower() == "debug":
            return True
        if arg.lower() == "--log-level=debug":
            return True
    return False


def _exception_modules() -> list:
    """typer >= 0.24 raises its vendored click's exceptions (typer._click); plain click's too."""
    found = [typer.exceptions]
    try:
        # lazy: typer._click exists only in typer >= 0.24
        from typer._click import exceptions as vendored

        found.append(vendored)
    except ImportError:
        pass
    return [*found, click.exceptions]


def click_kind(exc: BaseException) -> str | None:
    """exit, abort, help (no arguments given), usage, click, or None for any other exception."""
    for module in _exception_modules():
        for name, kind in (
            ("Exit", "exit"),
            ("Abort", "abort"),
            ("NoArgsIsHelpError", "help"),
            ("UsageError", "usage"),
            ("ClickException", "click"),
        ):
            cls = getattr(module, name, None)
            if cls is not None and isinstance(exc, cls):
                return kind
    return None


def usage_line(exc) -> str:
    """A click usage error (unknown option, bad value, missing option) as one line."""
    ctx = getattr(exc, "ctx", None)
    path = ctx.command_path if ctx is not None else "python -m fdb"
    return f"ERROR: {one_line(exc.format_message())} (see `{path} --help`)"


def fdb_error_line(exc: FdbError, argv: list[str], debug: bool) -> str:
    """An FdbError is the expected way to fail: its line; at debug also its traceback (and the
    log)."""
    if debug:
        sys.stderr.write(format_traceback(exc))
        append_debug_log(exc, argv)
    return f"ERROR: {one_line(redact_secrets(exc.one_line()), 1000)}"


def unexpected_line(exc: BaseException, argv: list[str], debug: bool) -> str:
    """The one line for an exception no verb turned into an FdbError; appends to the debug log."""
    log = append_debug_log(exc, argv)
    where = (
        f"full traceback: {log}"
        if log
        else "the debug log could not be written; rerun with --log-level debug"
    )
    if debug:
        sys.stderr.write(format_traceback(exc))
    text, hint = describe_failure(exc)
    return f"ERROR: {text} ({hint + '; ' if hint else ''}{where})"
