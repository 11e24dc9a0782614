"""What a server says about itself, for the provenance of a run (generate), a sweep and a tts-bench.

Three GETs against the server's base URL, each best effort and each recorded as it went:
``/v1/realtime/capabilities`` (fdb's and SGLang-Omni's deployment description: ``system``,
``model``, ``service_nodes``, ``max_sessions``), ``/v1/models`` (the OpenAI model list) and
``/health``. A server without an endpoint is measured all the same: that probe is ``absent`` and
what it would have said is null; a probe that got no usable answer is ``failed`` with a one-line
reason. Nothing here can fail a run.

Secrets never reach the record: the URL loses its query secrets and any user:password, keys
whose names look secret (key, token, secret, password, authorization) are replaced by
<redacted> anywhere in a body, string values lose secret environment values, ``sk-…`` tokens,
the caller's own secrets and URL query secrets. Values that change with every start of the same
server (``created`` in /v1/models, ``sessions`` and ``uptime`` in /health) are left out, so the
record is the same for the same server.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from fdb.io import REDACTED, one_line, redact_url, redact_values, secret_values
from fdb.run_manifest import Probe, ServerReport
from runs.gpus import max_sessions_of

CAPABILITIES = "/v1/realtime/capabilities"
MODELS = "/v1/models"
HEALTH = "/health"
PROBES = (CAPABILITIES, MODELS, HEALTH)
ABSENT = frozenset({404, 405, 501})  # the server does not have the endpoint
TIMEOUT_S = 5.0
VOLATILE = {
    MODELS: ("created",),
    HEALTH: ("sessions", "uptime", "uptime_s"),
}  # per start, not per server
_SECRET_KEY = re.compile(
    r"(^|[_\-])(api_?key|apikey|key|token|secret|password|passwd|authorization|credentials?"
    r"|bearer)($|[_\-])",
    re.IGNORECASE,
)
_URL = re.compile(r"\b(?:https?|wss?)://[^\s\"'<>]+")


def base_url(url: str) -> str:
    """The HTTP base of a server URL: ws(s):// becomes http(s)://, the path from /v1/ on, the
    query and the fragment go (``ws://h:8097/v1/realtime?x=1`` -> ``http://h:8097``)."""
    parts = urlsplit(url.strip())
    scheme = {"ws": "http", "wss": "https"}.get(parts.scheme.lower(), parts.scheme.lower())
    path = parts.path.split("/v1/", 1)[0] if "/v1/" in parts.path + "/" else parts.path
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    return urlunsplit((scheme, parts.netloc, path.rstrip("/"), "", ""))


def probe_server(
    url: str,
    headers: Mapping[str, str] | None = None,
    secrets: Iterable[str] = (),
    timeout_s: float = TIMEOUT_S,
    paths: tuple[str, ...] = PROBES,
) -> ServerReport:
    """Ask the server at ``url`` (its realtime or base URL) what it is. ``headers`` go with each GET
    (a bearer token, the profile's headers); ``secrets`` are values to keep out of the record."""
    base = base_url(url)
    hidden = sorted(
        {*secret_values(), *(s for s in secrets if s), *_header_secrets(headers)},
        key=len,
        reverse=True,
    )
    probes = [_get(base, path, dict(headers or {}), hidden, timeout_s) for path in paths]
    return summarize(redact_url(base), probes)


def summarize(url: str, probes: list[Probe]) -> ServerReport:
    """The report of ``probes``: the fields each one says, null where none does."""
    found = {p.path: p.body for p in probes if p.status == "ok" and isinstance(p.body, dict)}
    caps, health = found.get(CAPABILITIES) or {}, found.get(HEALTH) or {}
    nodes, backends = caps.get("service_nodes"), health.get("backends")
    return ServerReport(
        url=url,
        system=_text(caps.get("system")) or _text(health.get("system")),
        model=_text(caps.get("model")) or _text(health.get("model")),
        service_nodes=nodes if isinstance(nodes, dict) else None,
        models=_model_ids(found.get(MODELS)),
        backends=backends if isinstance(backends, dict) and backends else None,
        max_sessions=_max_sessions(caps),
        probes=probes,
    )


def _get(
    base: str, path: str, headers: dict[str, str], hidden: list[str], timeout_s: float
) -> Probe:
    try:
        reply = httpx.get(base + path, headers=headers, timeout=timeout_s, follow_redirects=False)
    except httpx.TimeoutException:
        return Probe(path=path, status="failed", reason=f"no answer within {timeout_s:g} s")
    except (httpx.HTTPError, ValueError, OSError) as exc:
        reason = one_line(redact_values(str(exc) or type(exc).__name__, hidden), 160)
        return Probe(path=path, status="failed", reason=f"{type(exc).__name__}: {reason}")
    status = reply.status_code
    if status in ABSENT:
        return Probe(
            path=path,
            status="absent",
            http_status=status,
            reason=f"HTTP {status}: the server has no {path}",
        )
    if status != 200:
        return Probe(
            path=path,
            status="failed",
            http_status=status,
            reason=f"HTTP {status}" + _error_text(reply, hidden),
        )
    try:
        body = reply.json()
    except ValueError:
        kind = reply.headers.get("content-type", "no content type").split(";")[0]
        return Probe(
            path=path,
            status="failed",
            http_status=status,
            reason=(
                f"HTTP 200 but the body is not JSON ({one_line(kind, 60)}, "
                f"{len(reply.content)} bytes)"
            ),
        )
    return Probe(
        path=path, status="ok", http_status=status, body=_clean(_drop_volatile(path, body), hidden)
    )


def _error_text(reply: httpx.Response, hidden: list[str]) -> str:
    """``: message`` from a JSON error body (OpenAI's {"error": {"message"}} or FastAPI's
    {"detail"}), never raw bytes."""
    try:
        body = reply.json()
    except ValueError:
        return ""
    error = body.get("error") if isinstance(body, dict) else None
    message = (
        (error.get("message") if isinstance(error, dict) else error)
        if error
        else (body.get("detail") if isinstance(body, dict) else None)
    )
    if not isinstance(message, str) or not message.strip():
        return ""
    return ": " + one_line(_clean_text(message, hidden), 160)


def _drop_volatile(path: str, body: Any) -> Any:
    keys = VOLATILE.get(path, ())
    if not keys or not isinstance(body, dict):
        return body
    if path == MODELS and isinstance(body.get("data"), list):
        return {
            **body,
            "data": [
                {k: v for k, v in entry.items() if k not in keys}
                if isinstance(entry, dict)
                else entry
                for entry in body["data"]
            ],
        }
    return {k: v for k, v in body.items() if k not in keys}


def _secret_key(key: str) -> bool:
    """A key whose string value is a credential (``api_key``, ``token``, ``Authorization``); the
    NAME of a variable holding one (``api_key_env``) is not."""
    return bool(_SECRET_KEY.search(key)) and not key.lower().endswith("_env")


def _clean(value: Any, hidden: list[str]) -> Any:
    if isinstance(value, dict):
        return {
            str(k): REDACTED
            if isinstance(v, str) and v and _secret_key(str(k))
            else _clean(v, hidden)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_clean(v, hidden) for v in value]
    if isinstance(value, str):
        return _clean_text(value, hidden)
    return value


def _clean_text(text: str, hidden: list[str]) -> str:
    return redact_values(_URL.sub(lambda m: redact_url(m.group(0)), text), hidden)


def _header_secrets(headers: Mapping[str, str] | None) -> list[str]:
    """Header values that are credentials (and the token inside ``Bearer …``)."""
    found = []
    for name, value in (headers or {}).items():
        if _SECRET_KEY.search(name) and value:
            found.append(value)
            if " " in value:
                found.append(value.split(" ", 1)[1])
    return found


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value.strip() else None


def _model_ids(body: Any) -> list[str] | None:
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        return None
    return [
        entry["id"]
        for entry in data
        if isinstance(entry, dict) and isinstance(entry.get("id"), str)
    ]


def _max_sessions(caps: dict) -> int | None:
    return max_sessions_of(caps) if caps else None


def describe(report: ServerReport | None) -> str:
    """One line for the console: what the server reported, or which probes said nothing."""
    if report is None:
        return "not probed"
    said = [f"{k} {v}" for k, v in (("system", report.system), ("model", report.model)) if v]
    if report.service_nodes:
        said.append("service nodes " + ", ".join(sorted(report.service_nodes)))
    if report.backends:
        said.append("backends " + ", ".join(sorted(report.backends)))
    if report.models is not None:
        said.append(
            f"/v1/models: {', '.join(report.models[:3]) or 'none'}"
            + (" …" if len(report.models) > 3 else "")
        )
    quiet = [f"{p.path} {p.status}" for p in report.probes if p.status != "ok"]
    return "; ".join(said + quiet) or "nothing reported"
