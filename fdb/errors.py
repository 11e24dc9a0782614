"""Errors that carry the fix: every user-facing failure says what went wrong and what to do."""

from __future__ import annotations


class FdbError(Exception):
    """A user-facing error. ``hint`` tells the user what to do about it."""

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def one_line(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


class MissingExtraError(FdbError):
    """A lazily imported dependency is not installed."""

    def __init__(self, package: str, extra: str, role: str):
        super().__init__(
            f"{role} needs the Python package '{package}', which is not installed",
            f"install it with: pip install 'fdb[{extra}]' (or run `make demo`, which installs it)",
        )
        self.package = package
        self.extra = extra


class SampleError(FdbError):
    """Bad input for one sample; the run continues with the others where that is meaningful."""

    def __init__(self, sample: str, message: str, hint: str | None = None, path: str | None = None):
        where = f"{sample}: " + (f"{path}: " if path else "")
        super().__init__(where + message, hint)
        self.sample = sample
        self.path = path
