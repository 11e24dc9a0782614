"""One registry for every kind of named backend (issue #26).

A :class:`Registry` holds one kind's entries by name, in the order they were added. An entry is
the object itself or a lazy ``"module:Name"`` reference, imported on its first lookup (nothing
heavy is imported until a backend is used); a name is added once (a second ``add`` of it is a
programming error unless it says ``replace``); an unknown name is one :class:`FdbError`,
``unknown <what> 'name'``, whose hint lists the choices.

Each registry of backends is one instance: the ASR and end-of-turn backends
(``fdb.models.asr``, ``fdb.models.turn``), the scoring backends of a run by kind
(``fdb.models.scoring``), the recorder dialects (``fdb.dialects.catalog``) and the serving
backends by kind and stage (``serving.graph.registry``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, TypeVar

from fdb.errors import FdbError

T = TypeVar("T")


def resolve(ref: Any) -> Any:
    """The object a ``"module:Name"`` reference names (imported now), or ``ref`` itself."""
    if not isinstance(ref, str):
        return ref
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


def choose_one_of(names: tuple[str, ...]) -> str:
    """The hint of an unknown name: ``choose one of a, b, c`` (in registration order)."""
    return f"choose one of {', '.join(names)}"


def choose_one_of_sorted(names: tuple[str, ...]) -> str:
    """The hint of an unknown name as a sorted list: ``choose one of ['a', 'b']``."""
    return f"choose one of {sorted(names)}"


def known(plural: str) -> Callable[[tuple[str, ...]], str]:
    """The hint ``known <plural>: a, b`` (sorted), e.g. ``known("profiles")``."""
    return lambda names: f"known {plural}: {', '.join(sorted(names))}"


def where(entry: Any) -> str:
    """Where an entry's code lives: its ``"module:Name"`` reference (not imported), or the
    module and name of the object."""
    if isinstance(entry, str):
        return entry
    module, name = getattr(entry, "__module__", None), getattr(entry, "__qualname__", None)
    return f"{module}:{name}" if module and name else repr(entry)


class Registry(Generic[T]):
    """Named entries of one kind (``what``: the words of its errors, e.g. ``"ASR backend"``).

    ``hint`` turns the names, in order, into the unknown-name error's hint (default:
    :func:`choose_one_of`). An entry is never a plain string: a string is a ``"module:Name"``
    reference."""

    def __init__(
        self,
        what: str,
        entries: Mapping[str, T | str] | None = None,
        *,
        hint: Callable[[tuple[str, ...]], str] = choose_one_of,
    ) -> None:
        self.what = what
        self._hint = hint
        self._entries: dict[str, T | str] = {}
        for name, entry in (entries or {}).items():
            self.add(name, entry)

    def add(self, name: str, entry: T | str, *, replace: bool = False) -> T | str:
        """Add ``entry`` as ``name``; a name already there is refused unless ``replace`` (the
        replaced entry's name then moves to the end)."""
        if name in self._entries:
            if not replace:
                raise ValueError(f"{self.what} {name!r} is already registered")
            del self._entries[name]
        self._entries[name] = entry
        return entry

    def names(self) -> tuple[str, ...]:
        """Every name, in the order added."""
        return tuple(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._entries)

    def unknown(self, name: object) -> FdbError:
        """The error of an unknown ``name``: ``unknown <what> 'name'``, the hint listing the
        choices."""
        return FdbError(f"unknown {self.what} {name!r}", self._hint(self.names()))

    def find(self, name: str) -> T | None:
        """The entry ``name`` (a lazy reference imported now), or None."""
        if name not in self._entries:
            return None
        entry = self._entries[name] = resolve(self._entries[name])
        return entry

    def __getitem__(self, name: str) -> T:
        """The entry ``name`` (a lazy reference imported now); an unknown name raises
        :meth:`unknown`."""
        if name not in self._entries:
            raise self.unknown(name)
        return self.find(name)

    def values(self) -> list[T]:
        """Every entry in order (lazy references imported now)."""
        return [self[name] for name in self._entries]

    def items(self) -> list[tuple[str, T]]:
        """Every (name, entry) in order (lazy references imported now)."""
        return [(name, self[name]) for name in self._entries]

    def describe(self) -> str:
        """One line per entry, in order: its name and where its code lives (nothing imported)."""
        width = max((len(name) for name in self._entries), default=0)
        return "\n".join(f"{name:{width}}  {where(entry)}" for name, entry in self._entries.items())

    def __repr__(self) -> str:
        return f"Registry({self.what!r}, {list(self._entries)})"
