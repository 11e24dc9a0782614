"""Launch profiles: the launch files fdb ships for GPU cascades, their ``vars``, and the checks
every launch file passes when it loads.

``python -m fdb serve --profile NAME`` serves ``serving/profiles/NAME.yaml`` (docs/sglang.md).
A launch file may hold ``vars:``, a mapping of names to single values; ``${name}`` in any other
string of the file becomes the value (always as text; a field that wants a number reads the
text), so one variable sets a service's port in its command, its ``port`` and its node's
``base_url`` at once. ``--vars.NAME VALUE`` on the command line sets one (``serving.overrides``);
a var left ``null`` must be set before the file loads.

Checks at load (:func:`check_services`, every launch file): a service command's ``--port`` is
its ``port``; a service's GPUs are its ``env.CUDA_VISIBLE_DEVICES`` (``--tp-size`` of them,
from ``--base-gpu-id``), or the first GPU the server sees when it sets none; the
``--mem-fraction-static`` of the services on one GPU add up to at most 1, and an SGLang command
that shares its GPU sets one (SGLang's default takes most of the GPU). For a profile also
(:func:`check_profile`): every node on a loopback address calls a port of one of its services.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from fdb.errors import FdbError

PROFILE_DIR = Path(__file__).resolve().parent / "profiles"
VAR = re.compile(r"\$\{([^}]*)\}")
VAR_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
LOOPBACK = ("127.0.0.1", "localhost", "::1")  # urlsplit's hostname of [::1] is ::1
INHERITED = "GPU #{} of the server's own CUDA_VISIBLE_DEVICES"


# ------------------------------------------------------------------------------ shipped profiles


def profile_names() -> list[str]:
    """The names of the shipped profiles."""
    return sorted(path.stem for path in PROFILE_DIR.glob("*.yaml"))


def profile_path(name: str) -> Path:
    """The file of the shipped profile ``name``; an unknown name lists the known ones."""
    path = PROFILE_DIR / f"{name}.yaml"
    if "/" in name or not path.is_file():
        raise FdbError(
            f"--profile {name!r}: no such shipped profile (known: {', '.join(profile_names())})",
            "pass one of them, or --config PATH for a launch file of your own",
        )
    return path


# ------------------------------------------------------------------------------------- vars


def substitute_vars(raw: dict[str, Any], source: str) -> dict[str, Any]:
    """``raw`` without its ``vars`` and with every ``${name}`` replaced (see the module's text)."""
    found = raw.get("vars") or {}
    if not isinstance(found, dict):
        raise FdbError(
            f"{source}: vars must be a mapping of names to values", "write vars: {name: value, ...}"
        )
    for name, value in found.items():
        if not VAR_NAME.match(str(name)) or isinstance(value, dict | list):
            raise FdbError(
                f"{source}: vars.{name}: a var is a lowercase name with one value",
                "write vars: {llm_port: 8000}, names of a-z, 0-9 and _",
            )
    rest = {key: value for key, value in raw.items() if key != "vars"}
    return _fill(rest, found, source, "")


def _fill(value: Any, found: dict[str, Any], source: str, where: str) -> Any:
    if isinstance(value, dict):
        return {
            key: _fill(item, found, source, f"{where}.{key}".lstrip("."))
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_fill(item, found, source, f"{where}[{k}]") for k, item in enumerate(value)]
    if isinstance(value, str):
        return VAR.sub(lambda match: _value(match.group(1), found, source, where), value)
    return value


def _value(name: str, found: dict[str, Any], source: str, where: str) -> str:
    if name not in found:
        raise FdbError(
            f"{source}: {where}: ${{{name}}} is not defined under vars (defined: {sorted(found)})",
            f"add {name} under vars:, or pass --vars.{name} VALUE",
        )
    if found[name] is None:
        raise FdbError(f"{source}: {where}: vars.{name} has no value", f"pass --vars.{name} VALUE")
    value = found[name]
    return str(value).lower() if isinstance(value, bool) else str(value)


# ------------------------------------------------------------------------------------ checks


def flag(command: list[str], *names: str) -> str | None:
    """The value of the first of ``names`` in an argv (``--x v`` or ``--x=v``), else None."""
    for k, part in enumerate(command):
        name, eq, value = part.partition("=")
        if name in names:
            if eq:
                return value
            return command[k + 1] if k + 1 < len(command) else None
    return None


def gpus(entry: Any, source: str = "the launch file") -> list[str]:
    """The GPUs a service uses (see the module's text)."""
    tp = _count(entry, source, "--tp-size", "--tp", "--tensor-parallel-size", default=1)
    base = _count(entry, source, "--base-gpu-id", default=0)
    visible = entry.env.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return [INHERITED.format(base + k) for k in range(tp)]
    ids = [part.strip() for part in visible.split(",") if part.strip()]
    return [f"GPU {gpu}" for gpu in ids[base : base + tp]]


def _count(entry: Any, source: str, *names: str, default: int) -> int:
    raw = flag(entry.command, *names)
    if raw is None:
        return default
    if not raw.isdigit():
        raise FdbError(
            f"{source}: services.{entry.name}: {names[0]} {raw!r} is not a whole number",
            "fix its command",
        )
    return int(raw)


def mem_fraction(entry: Any, source: str) -> float | None:
    """The ``--mem-fraction-static`` of a service's command, checked to lie in (0, 1)."""
    raw = flag(entry.command, "--mem-fraction-static")
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0.0 < value < 1.0:
        raise FdbError(
            f"{source}: services.{entry.name}: --mem-fraction-static {raw!r} is not a number in "
            "(0, 1)",
            "set the share of the GPU's memory this service may take, e.g. 0.3",
        )
    return value


def check_services(services: list[Any], source: str) -> None:
    """Ports and GPU memory shares of a launch file's services (see the module's text)."""
    shares: dict[str, list[tuple[str, float | None]]] = {}
    for entry in services:
        port = flag(entry.command, "--port")
        if port is not None and port != str(entry.port):
            raise FdbError(
                f"{source}: services.{entry.name}: its command's --port {port} differs from port "
                f"{entry.port}",
                "the command's --port, port and the node's base_url must agree; "
                "in a profile set them with one var, e.g. --vars.llm_port 9000",
            )
        fraction = mem_fraction(entry, source)
        for gpu in gpus(entry, source):
            shares.setdefault(gpu, []).append((entry.name, fraction))
    for gpu, users in shares.items():
        _check_gpu(gpu, users, services, source)


def _check_gpu(
    gpu: str, users: list[tuple[str, float | None]], services: list[Any], source: str
) -> None:
    total = sum(fraction or 0.0 for _, fraction in users)
    named = ", ".join(f"{name} {fraction}" for name, fraction in users)
    if total > 1.0 + 1e-9:
        raise FdbError(
            f"{source}: {gpu}: the services' --mem-fraction-static add up to {total:.2f} > 1 "
            f"({named})",
            "lower them, or move a service to another GPU with "
            "services.NAME.env.CUDA_VISIBLE_DEVICES",
        )
    if len(users) < 2:
        return
    commands = {entry.name: entry.command for entry in services}
    for name, fraction in users:
        if fraction is None and any("sglang" in part for part in commands[name]):
            raise FdbError(
                f"{source}: services.{name}: runs SGLang on {gpu} beside other services "
                "without --mem-fraction-static (SGLang's default takes most of the GPU)",
                "add --mem-fraction-static F to its command, with the shares on that GPU at most 1",
            )


def check_profile(config: Any, source: str) -> None:
    """A profile's nodes call its own services: a node on a loopback address needs a service on
    that port (one on another host is a service you run elsewhere)."""

    ports = {entry.port: entry.name for entry in config.services}
    for role, node in config.backends.nodes().items():
        url = urlsplit(node.base_url)
        if url.hostname not in LOOPBACK:  # a service you run elsewhere
            continue
        port = url.port or (443 if url.scheme == "https" else 80)
        if port not in ports:
            served = ", ".join(f"{name} :{port}" for port, name in ports.items()) or "none"
            raise FdbError(
                f"{source}: backends.{role}.base_url {node.base_url}: no service of the profile "
                f"serves :{port} (services: {served})",
                "point the node at one of its services' ports, or copy the profile and edit its "
                "services",
            )


def service_port_clash(config: Any, port: int) -> str | None:
    """The name of the service that uses the server's own ``port``, else None."""
    return next((entry.name for entry in config.services if entry.port == port), None)
