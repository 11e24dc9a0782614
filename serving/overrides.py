"""Command-line overrides of a launch file (the guide's "Command-line overrides").

``python -m fdb serve --config launch.yaml --max_sessions 8 --vad.silence_duration_ms 800
--backends.llm.base_url http://127.0.0.1:9000/v1 --services.tts.port 8106``: every flag after
the known options sets one leaf value of the launch file, as ``--<path> <value>``,
``--<path>=<value>`` or ``<path>=<value>``. Paths start at the top of the file. Services are
addressed by name (``--services.tts.port``), never by position. Values are read as YAML
scalars (``800`` is a number, ``true`` a boolean, ``null`` or ``""`` what they say).

An override may add an option the file leaves out; the result is validated like the file (an
option that does not exist fails with "Extra inputs are not permitted"). A path that names a
whole group (``--vad 5``) fails with "addresses a settings group, not a single value"; lists
(a service's command, its env as a whole) and adding or removing a service need an edit of the
file.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import yaml

from fdb.errors import FdbError

HINT = (
    "pass one leaf value per flag, e.g. --vad.silence_duration_ms 800 (see docs/formats.md, "
    "'Launch file')"
)


def parse_override_args(args: Sequence[str]) -> list[tuple[str, Any]]:
    """``[--a.b, v, c.d=w, --e=x]`` as ``[("a.b", v), ("c.d", w), ("e", x)]`` with YAML scalar
    values."""

    pairs: list[tuple[str, str]] = []
    rest = list(args)
    while rest:
        token = rest.pop(0)
        name = token[2:] if token.startswith("--") else token
        if "=" in name:
            path, _, raw = name.partition("=")
        elif token.startswith("--") and rest:
            path, raw = name, rest.pop(0)
        else:
            raise FdbError(f"override {token!r} has no value", HINT)
        if not path or any(not part for part in path.split(".")):
            raise FdbError(f"override {token!r} has an empty path segment", HINT)
        pairs.append((path, raw))
    out: list[tuple[str, Any]] = []
    for path, raw in pairs:
        try:
            value = yaml.safe_load(raw) if raw.strip() else raw
        except yaml.YAMLError:
            value = raw
        if isinstance(value, dict | list):
            raise FdbError(f"--{path}: {raw!r} is a group of values, not a single value", HINT)
        out.append((path, value))
    return out


def _service(services: Any, name: str, path: str) -> dict[str, Any]:
    if not isinstance(services, list):
        raise FdbError(
            f"--{path}: the launch file has no services", "add the service to the file first"
        )
    for entry in services:
        if isinstance(entry, dict) and entry.get("name") == name:
            return entry
    names = [e.get("name") for e in services if isinstance(e, dict)]
    raise FdbError(
        f"--{path}: no service named {name!r} (services: {names})",
        "services are addressed by name; adding one needs an edit of the file",
    )


def apply_override(settings: dict[str, Any], path: str, value: Any) -> None:
    """Set one leaf of the launch mapping ``settings`` in place."""
    parts = path.split(".")
    if parts[0] == "services" and len(parts) <= 2:
        raise FdbError(f"--{path} addresses a settings group, not a single value", HINT)
    node: Any = settings
    for depth, part in enumerate(parts[:-1]):
        if parts[0] == "services" and depth < 2:
            node = settings.get("services") if depth == 0 else _service(node, part, path)
            continue
        child = node.get(part) if isinstance(node, dict) else None
        if child is None:
            child = node[part] = {}
        if isinstance(child, list):
            raise FdbError(
                f"--{path}: {'.'.join(parts[: depth + 1])} is a list",
                "lists need an edit of the file",
            )
        if not isinstance(child, dict):
            raise FdbError(
                f"--{path}: {'.'.join(parts[: depth + 1])} is a single value, not a settings group",
                HINT,
            )
        node = child
    leaf = parts[-1]
    current = node.get(leaf)
    if isinstance(current, dict):
        raise FdbError(f"--{path} addresses a settings group, not a single value", HINT)
    if isinstance(current, list):
        raise FdbError(f"--{path} is a list", "lists need an edit of the file")
    node[leaf] = value


def apply_overrides(
    settings: dict[str, Any], overrides: Sequence[tuple[str, Any]], groups: Sequence[str] = ()
) -> dict[str, Any]:
    """A copy of ``settings`` with every override applied. ``groups`` names the fields that are
    settings groups even where the file leaves them out (``--vad 5`` is refused for them)."""

    out = copy.deepcopy(settings)
    for path, value in overrides:
        if "." not in path and path in groups:
            raise FdbError(f"--{path} addresses a settings group, not a single value", HINT)
        apply_override(out, path, value)
    return out
