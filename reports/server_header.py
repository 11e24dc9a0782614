"""The server part of a report's header (RESULTS.md, SERVING.md, TTS.md): the revisions the user
declared and what the server reported about itself (fdb.run_manifest.ServerReport), each value
`not given` / `not reported` when missing, never left out silently."""

from __future__ import annotations

from typing import Any

from fdb.run_manifest import ServerReport

NOT_GIVEN = "not given"
NOT_REPORTED = "not reported"


def code(value: Any) -> str:
    """`value` in backticks, with backticks in it made harmless."""
    return "`" + str(value).replace("`", "'") + "`"


def revisions_line(
    server_revision: str | None,
    model_revision: str | None,
    dataset_revision: str | None = None,
    with_dataset: bool = False,
) -> str:
    parts = [
        "server revision "
        f"{code(server_revision) if server_revision else NOT_GIVEN + ' (--server-revision)'}",
        "model revision "
        f"{code(model_revision) if model_revision else NOT_GIVEN + ' (--model-revision)'}",
    ]
    if with_dataset:
        parts.append(
            "dataset revision "
            f"{code(dataset_revision) if dataset_revision else NOT_GIVEN + ' (--dataset-revision)'}"
        )
    return "Declared: " + "; ".join(parts) + "."


def _node(role: str, value: Any) -> str:
    if isinstance(value, dict):
        said = [
            f"{k} {code(v)}"
            for k, v in value.items()
            if isinstance(v, str | int | float | bool) and v is not None
        ]
        return f"{role} ({', '.join(said)})" if said else role
    return f"{role} ({code(value)})" if value is not None else role


def _backend(role: str, value: Any) -> str:
    """``asr `faster-whisper/whisper-tiny.en` 1.2.1``: a /health backend by its name and version."""
    if not isinstance(value, dict):
        return f"{role} {code(value)}"
    name, version = value.get("name"), value.get("version")
    return f"{role} {code(name) if name else NOT_REPORTED}" + (f" {version}" if version else "")


def report_lines(report: ServerReport | None, label: str = "The server") -> list[str]:
    """What the server said: system, model, service nodes, /v1/models, then each probe that did not
    answer (absent or failed, with its reason)."""
    if report is None:
        return [f"{label} was not asked what it is (recorded before fdb probed servers)."]
    said = [
        f"system {code(report.system) if report.system else NOT_REPORTED}",
        f"model {code(report.model) if report.model else NOT_REPORTED}",
    ]
    if report.service_nodes:
        said.append(
            "service nodes "
            + ", ".join(
                _node(role, report.service_nodes[role]) for role in sorted(report.service_nodes)
            )
        )
    else:
        said.append("service nodes " + (NOT_REPORTED if report.service_nodes is None else "none"))
    if report.backends:
        said.append(
            "backends "
            + ", ".join(_backend(role, report.backends[role]) for role in sorted(report.backends))
        )
    if report.models is None:
        said.append(f"/v1/models {NOT_REPORTED}")
    else:
        said.append("/v1/models " + (", ".join(code(m) for m in report.models) or "lists none"))
    if report.max_sessions is not None:
        said.append(f"max_sessions {report.max_sessions}")
    lines = [f"{label} ({report.url}) reports: " + "; ".join(said) + "."]
    quiet = [
        f"{p.path} {p.status}" + (f" ({p.reason})" if p.reason else "")
        for p in report.probes
        if p.status != "ok"
    ]
    if quiet:
        lines.append("Not answered: " + "; ".join(quiet) + ".")
    return lines
