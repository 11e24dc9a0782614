"""Atomic writes, hashing and JSON helpers. A killed writer leaves the old file or the new one."""

from __future__ import annotations

import datetime
import errno
import hashlib
import json
import os
import re
import tempfile
import traceback
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from pydantic import BaseModel, ValidationError

from fdb.errors import FdbError
from fdb.settings import debug_log_path, work_dir

_UMASK = os.umask(0)
os.umask(_UMASK)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write to a temp file in the same directory, fsync, then rename over ``path``.

    The file gets the ordinary permissions (0666 less the umask), not mkstemp's 0600. A failure
    of the file system (read-only, full, a path through a file) is a :class:`WriteError` that
    names the path and the fix; the old file, if any, is left as it was.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _remove_stale_leftovers(path)
        fd, tmp = tempfile.mkstemp(
            prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp", dir=path.parent
        )
    except OSError as exc:
        raise write_error(path, exc) from exc
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~_UMASK)
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(exc, OSError):
            raise write_error(path, exc) from exc
        raise
    return path


# The temp file of a write is ".NAME.PID.RANDOM.tmp" next to NAME. A writer killed before its
# rename (kill -9, a power cut) leaves one behind; it is never read (readers open NAME), and the
# next write of NAME removes it once its writer is gone, so a recovered run holds no partial file.
_LEFTOVER = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)\.[A-Za-z0-9_]+\.tmp$")


def is_write_leftover(name: str) -> bool:
    """True for the name of an atomic write's temp file (committed writes never have one)."""
    return _LEFTOVER.match(name) is not None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def _stale(entry: Path, name: str | None = None) -> bool:
    found = _LEFTOVER.match(entry.name)
    return (
        found is not None
        and (name is None or found["name"] == name)
        and int(found["pid"]) != os.getpid()
        and not _pid_alive(int(found["pid"]))
    )


def _remove_stale_leftovers(path: Path) -> None:
    """Remove the temp files of earlier writes of ``path`` whose writer process is gone (a write
    in progress, in this process or another live one, is left alone)."""
    for entry in path.parent.glob(f".{glob_escape(path.name)}.*.tmp"):
        if _stale(entry, path.name):
            entry.unlink(missing_ok=True)


def remove_stale_leftovers(directory: str | os.PathLike) -> list[Path]:
    """Remove the temp files that killed writers left directly in ``directory`` (whatever file
    they were writing); returns them. For a phase that checks a directory's contents before it
    writes there (an export refusing a directory that holds anything but its own files)."""
    removed = []
    for entry in Path(directory).glob(".*.tmp"):
        if entry.is_file() and _stale(entry):
            entry.unlink(missing_ok=True)
            removed.append(entry)
    return removed


def glob_escape(name: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", name)


class WriteError(FdbError, OSError):
    """A file could not be written. Still an ``OSError``, so callers that catch those keep working;
    ``cause_errno`` is the errno of the failure (``errno`` stays unset so the message reads
    plainly)."""

    def __init__(self, message: str, hint: str | None, cause_errno: int | None):
        super().__init__(message, hint)
        self.cause_errno = cause_errno


_NOT_WRITABLE = {errno.EACCES, errno.EPERM, errno.EROFS}
_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


def write_error(path: str | os.PathLike, exc: OSError, verb: str = "write") -> WriteError:
    """The one-line error for a failed write of ``path``: what happened and what to do."""
    path = Path(path)
    message, hint = os_error_text(path, exc)
    return WriteError(f"cannot {verb} {path}: {message}", hint, exc.errno)


def os_error_text(path: Path, exc: OSError, reading: bool = False) -> tuple[str, str]:
    """(what went wrong, the fix) for an ``OSError`` about ``path``, by its errno."""
    reason = exc.strerror or type(exc).__name__
    work = "" if reading else _work_note(path)
    if reading and exc.errno in _NOT_WRITABLE:
        return reason, f"make {path} readable (chmod u+r {path})"
    if exc.errno in _NOT_WRITABLE:
        folder = _existing_parent(path)
        return (
            f"{reason} ({folder} is not writable)",
            f"make {folder} writable (chmod u+w {folder}){work.format('a writable directory')}",
        )
    if exc.errno in _FULL:
        folder = _existing_parent(path)
        return (
            f"{reason} (the disk holding {folder} is full)",
            f"free space there (df -h {folder}) and rerun the command: finished work is kept"
            f"{work.format('a directory on a disk with free space')}",
        )
    if exc.errno == errno.ENOTDIR or isinstance(exc, NotADirectoryError):
        blocker = _file_in_the_way(path)
        where = f"{blocker} is a file, not a directory" if blocker else reason
        return where, f"move that file away or fix the path{work.format('a directory')}"
    if isinstance(exc, FileExistsError):
        return (
            f"{exc.filename or path} exists and is not a directory",
            f"move it away or fix the path{work.format('a directory')}",
        )
    if exc.errno == errno.ENAMETOOLONG:
        return reason, "use a shorter path or run name"
    if isinstance(exc, FileNotFoundError):
        return f"{reason}: {exc.filename or path}", "check the path"
    return reason, f"check the path and its file system{work.format('another directory')}"


def _existing_parent(path: Path) -> Path:
    """The nearest existing directory at or above ``path`` (where a write would land)."""
    for candidate in (path, *path.parents):
        try:
            if candidate.is_dir():
                return candidate
        except OSError:
            continue
    return path.parent


def _file_in_the_way(path: Path) -> Path | None:
    """The first component of ``path`` that exists but is not a directory."""
    for candidate in reversed((path, *path.parents)):
        try:
            if candidate.exists() and not candidate.is_dir():
                return candidate
        except OSError:
            return candidate
    return None


def _work_note(path: Path) -> str:
    """Under FDB_WORK the usual fix is another workspace; say so (``{}``: what it must be)."""
    work = work_dir()
    try:
        inside = path.absolute().is_relative_to(work.absolute())
    except (OSError, ValueError):
        inside = False
    return ", or export FDB_WORK=<{}>" if inside else ""


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def dumps_json(obj: Any) -> str:
    """Deterministic JSON: sorted keys, 2-space indent, trailing newline, NaN refused."""
    if isinstance(obj, BaseModel):
        obj = obj.model_dump(mode="json")
    return json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n"


def atomic_write_json(path: str | os.PathLike, obj: Any) -> Path:
    return atomic_write_text(path, dumps_json(obj))


def atomic_write_jsonl(path: str | os.PathLike, rows: Iterable[Any]) -> Path:
    lines = []
    for row in rows:
        if isinstance(row, BaseModel):
            row = row.model_dump(mode="json")
        lines.append(json.dumps(row, sort_keys=True, ensure_ascii=False, allow_nan=False))
    return atomic_write_text(path, "".join(line + "\n" for line in lines))


def read_jsonl(
    path: str | os.PathLike, model: type[BaseModel] | None = None, *, partial: bool = False
) -> list:
    """The rows of a JSONL file (lines split at "\\n" only, blank lines skipped): dicts, or
    ``model`` records (each line validated as JSON of it). ``partial``: a file an appender may
    have been killed over, where a missing file is no rows and a line that does not parse (a torn
    write) is left out; otherwise both raise."""
    path = Path(path)
    if partial and not path.exists():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").split("\n"):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line) if model is None else model.model_validate_json(line))
        except ValueError:
            if not partial:
                raise
    return rows


class JsonFileError(json.JSONDecodeError):
    """A ``JSONDecodeError`` that knows its file (``path``); its message is the decoder's, so
    callers that catch ``JSONDecodeError`` or ``ValueError`` see what they always saw."""

    path: Path


def read_json(path: str | os.PathLike) -> Any:
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        error = JsonFileError(exc.msg, exc.doc, exc.pos)
        error.path = Path(path)
        raise error from None


def validation_summary(exc: ValidationError, limit: int = 200) -> str:
    """One line for a pydantic error: the first field and its problem, and how many more."""
    errors = exc.errors(include_url=False)
    if not errors:
        return one_line(str(exc), limit)
    first = errors[0]
    field = ".".join(str(part) for part in first.get("loc", ())) or "the top level"
    text = f"{field}: {first.get('msg', 'invalid')}"
    if first.get("type") not in ("missing", "extra_forbidden") and "input" in first:
        text += f" (got {one_line(repr(first['input']), 60)})"
    if len(errors) > 1:
        text += f"; and {len(errors) - 1} more problem(s)"
    return one_line(text, limit)


def one_line(text: str, limit: int = 300) -> str:
    """``text`` on one line (whitespace runs folded), cut to ``limit`` characters with an
    ellipsis."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def load_record(path: str | os.PathLike, model: type[BaseModel], what: str, hint: str):
    """Read ``path`` as JSON and validate it as ``model``; any problem (unreadable, not JSON,
    wrong types, missing fields) is one :class:`FdbError` naming the file, the field and
    ``hint``. Not ``fdb.records.load_record`` (the result records' ``FileRecord.load``), where a
    missing file is None and the message does not name the record's kind (``what``)."""
    path = Path(path)
    try:
        raw = read_json(path)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise FdbError(
            f"{path} is not a valid {what}: not JSON ({one_line(str(exc), 120)})", hint
        ) from exc
    except IsADirectoryError as exc:
        raise FdbError(f"{path} is a directory, not a {what}", hint) from exc
    except OSError as exc:
        message, fix = os_error_text(path, exc, reading=True)
        raise FdbError(f"cannot read {path}: {message}", fix) from exc
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise FdbError(f"{path} is not a valid {what}: {validation_summary(exc)}", hint) from exc


# --- failures nobody turned into an FdbError: one line for the user, the traceback for the log ---

REDACTED = "<redacted>"
_SECRET_NAME = re.compile(
    r"(^|_)(API_?KEY|KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?)(_|$)", re.IGNORECASE
)
_KEYLIKE = re.compile(r"\b(sk-[A-Za-z0-9_\-*]{6,})")
MAX_DEBUG_LOG_BYTES = 4 << 20  # the debug log moves to fdb-debug.log.1 past this size


def describe_failure(exc: BaseException) -> tuple[str, str | None]:
    """(one line saying what went wrong, the fix where one is known) for any exception: the
    path and the fix for a file-system error, the file for JSON that does not parse, the field
    and its problem for a pydantic validation error, else the type and the message."""
    if isinstance(exc, FdbError):
        return one_line(exc.message, 1000), exc.hint
    if isinstance(exc, ValidationError):
        return f"invalid {exc.title}: {validation_summary(exc)}", None
    if isinstance(exc, JsonFileError):
        return (
            f"{exc.path} is not valid JSON ({one_line(str(exc), 120)})",
            "the file is damaged (cut short?): restore it, or rerun the step that writes it",
        )
    if isinstance(exc, OSError) and exc.filename is not None:
        path = Path(os.fsdecode(exc.filename))
        message, hint = os_error_text(path, exc)
        return f"{type(exc).__name__}: {path}: {message}", hint
    if isinstance(exc, OSError) and exc.errno is not None:
        message, hint = os_error_text(work_dir(), exc)
        return f"{type(exc).__name__}: {message}", hint
    return (
        f"{type(exc).__name__}: {one_line(redact_secrets(str(exc)), 300) or '(no message)'}",
        None,
    )


def secret_values() -> list[str]:
    """Values of environment variables whose names look secret (API keys, tokens, passwords)."""
    return sorted(
        {
            value
            for name, value in os.environ.items()
            if _SECRET_NAME.search(name) and len(value) >= 8
        },
        key=len,
        reverse=True,
    )


def redact_values(text: str, values: Iterable[str], keylike: bool = True) -> str:
    """``text`` with each of ``values`` replaced by <redacted>; ``keylike`` also masks ``sk-...``
    tokens. The one redaction every package uses (judges and service nodes pass their own keys)."""
    for value in values:
        text = text.replace(value, REDACTED)
    return _KEYLIKE.sub(REDACTED, text) if keylike else text


_SECRET_QUERY = ("key", "token", "secret", "password")


def redact_url(url: str) -> str:
    """``url`` as a file or a log may show it: the values of query parameters whose names look
    secret (key, token, secret, password) and any ``user:password@`` are <redacted>; a URL that
    cannot be parsed is <redacted> whole."""
    try:
        parts = urlsplit(url)
        if parts.query:
            query = [
                (k, REDACTED if any(s in k.lower() for s in _SECRET_QUERY) else v)
                for k, v in parse_qsl(parts.query, keep_blank_values=True)
            ]
            parts = parts._replace(query=urlencode(query))
    except ValueError:
        return REDACTED
    if "@" in parts.netloc:
        parts = parts._replace(netloc=f"{REDACTED}@{parts.netloc.rsplit('@', 1)[1]}")
    return urlunsplit(parts)


_URL = re.compile(r"\b(?:https?|wss?)://[^\s\"'<>]+")


def redact_command(argv: list[str]) -> list[str]:
    """Drop values of options that might carry secrets, and the secrets of URLs
    (:func:`redact_url`: query keys/tokens, ``user:password@``). An argument holding a
    URL is only URL-redacted, so a ``?token=`` in it does not hide the next argument."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append("<redacted>")
            hide_next = False
            continue
        if _URL.search(arg):
            out.append(_URL.sub(lambda m: redact_url(m.group(0)), arg))
            continue
        lowered = arg.lower()
        if any(k in lowered for k in ("key", "token", "secret", "password")):
            if "=" in arg:
                out.append(arg.split("=", 1)[0] + "=<redacted>")
            else:
                out.append(arg)
                hide_next = True
            continue
        out.append(arg)
    return out


def redact_secrets(text: str) -> str:
    """``text`` without any secret-looking environment value and without ``sk-...`` tokens."""
    return redact_values(text, secret_values())


def format_traceback(exc: BaseException) -> str:
    return redact_secrets("".join(traceback.format_exception(exc)))


def append_debug_log(exc: BaseException, argv: list[str]) -> Path | None:
    """Append the command and the traceback of ``exc`` (secrets removed) to the debug log,
    $FDB_WORK/logs/fdb-debug.log, or, when that cannot be written, fdb-debug-UID.log in the temp
    directory. One O_APPEND write per entry, so concurrent commands never interleave within one.
    Returns the file written, or None when neither could be."""
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    header = (
        f"=== {stamp} pid {os.getpid()}: python -m fdb {' '.join(redact_command(list(argv)))}\n"
    )
    entry = redact_secrets(header + format_traceback(exc) + "\n").encode("utf-8", "replace")
    fallback = Path(tempfile.gettempdir()) / f"fdb-debug-{os.getuid()}.log"
    for path in (debug_log_path(), fallback):
        try:
            _append(path, entry)
            return path
        except OSError:
            continue
    return None


def _append(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        if path.stat().st_size > MAX_DEBUG_LOG_BYTES:
            os.replace(path, path.with_name(path.name + ".1"))
    except FileNotFoundError:
        pass
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while True:
            block = handle.read(chunk)
            if not block:
                break
            digest.update(block)
    return digest.hexdigest()


class Record(BaseModel):
    """A typed record of an fdb file: :meth:`dump` is what its writer writes (JSON types, the
    fields' aliases, e.g. ``schema``)."""

    def dump(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)
