"""RESULTS.md and results.json for a run: reads phase outputs only, never audio."""

from __future__ import annotations

from fdb.io import atomic_write_json, atomic_write_text
from fdb.layout import RunPaths
from fdb.models.scoring import KINDS, same_model
from fdb.provenance import current
from fdb.records import asr_backend
from fdb.run_manifest import RunManifest, ServerReport, load_manifest, load_repeat_server
from fdb.tables import Table, write_tables
from reports.exports import Section, write_plots
from reports.listening import listening_section
from reports.server_header import code, report_lines, revisions_line
from reports.v10 import official_section, replies_section, unified_section
from reports.v15 import v15_section

RESULTS_SCHEMA = "fdb-results-1"


def _header(run: RunPaths, manifest: RunManifest | None, repeats: list) -> list[str]:
    lines = [f"# fdb results: {run.name}", ""]
    lines.append(f"Repeats: {', '.join(f'repeat-{r.number}' for r in repeats) or 'none yet'}.")
    if manifest:
        server = manifest.server
        target = server.url or f"bundled system `{server.system}` (started by generate)"
        lines.append(
            f"Server: {target}; profile `{server.profile}`; turn detection "
            f"`{server.turn_detection}`; shards {manifest.num_shards}."
        )
        lines.append(revisions_line(server.server_revision, server.model_revision))
        lines += report_lines(server.reported)
        lines += _repeat_servers(server.reported, repeats)
        for name, use in sorted(manifest.datasets.items()):
            declared = (
                f", declared revision {code(use.declared_revision)}"
                if use.declared_revision
                else ""
            )
            lines.append(
                f"Dataset {name}: {use.source} tree `{use.root}`, revision "
                f"`{(use.revision or 'n/a')[:16]}`{declared}, {len(use.sample_ids)} selected."
            )
        lines.append(scoring_line(manifest))
        lines += mixed_asr_lines(repeats)
        prov = manifest.provenance
        lines.append(f"fdb {prov.get('fdb_version')} at revision `{prov.get('fdb_revision')}`.")
    lines += [
        "",
        "Every number below comes from the recorded audio of these repeats: the observation "
        "windows the recorder exported, their ASR transcripts and VAD spans. `n/a` means no data; "
        "`not measured` means fdb has no producer for that column yet.",
        "",
    ]
    return lines


def scoring_line(manifest: RunManifest) -> str:
    """The run's scoring backends as run.json records them (the embedded defaults before it did)."""
    if manifest.scoring is None:
        return (
            "Scoring backends: none recorded in run.json yet (a run scored before fdb recorded "
            "them used the embedded faster-whisper, dnsmos and resemblyzer)."
        )
    return (
        "Scoring backends (run.json): "
        + ", ".join(f"{kind} `{getattr(manifest.scoring, kind).describe()}`" for kind in KINDS)
        + "."
    )


def mixed_asr_lines(repeats: list) -> list[str]:
    """A warning when the repeats' transcripts come from different ASR models (a run scored
    before fdb recorded its backends, or by hand with `score transcribe --replace`): the v1.0
    and v1.5 cells then average over them."""
    found = []
    for rep in repeats:
        for tree in (rep.v10_reference, rep.reference_audio):
            ident = asr_backend(tree)
            if ident:
                found.append((f"repeat-{rep.number}/{tree.relative_to(rep.root)}", ident))
    if all(same_model(found[0][1], ident) for _, ident in found[1:]):
        return []
    names = ", ".join(f"{where} {ident.get('name')}" for where, ident in found)
    return [
        f"**Warning**: the transcripts come from different ASR models ({names}); cells over these "
        "repeats mix them: score every repeat with one backend (fdb asr --help)."
    ]


def _dump(record) -> dict | None:
    return None if record is None else record.model_dump(mode="json", by_alias=True)


def _repeat_servers(first: ServerReport | None, repeats: list) -> list[str]:
    """A line for each repeat whose server reported another identity than the run's first repeat
    (a server changed between repeats is worth knowing when reading their mean)."""
    lines = []
    for repeat in repeats:
        record = load_repeat_server(repeat)
        for report in record.servers if record else []:
            if first is not None and report.identity() != first.identity():
                lines += report_lines(report, f"In repeat-{repeat.number}, the server")
    return lines


def build_report(run: RunPaths) -> tuple[str, dict, list[Table]]:
    """RESULTS.md's text, results.json's data and the tables the text shows, in its order."""
    manifest = load_manifest(run)
    repeats = run.repeats()
    lines = _header(run, manifest, repeats)
    data: dict = {
        "schema": RESULTS_SCHEMA,
        "run": run.name,
        "repeats": [r.number for r in repeats],
        "server": manifest.server.model_dump(mode="json", by_alias=True) if manifest else None,
        "scoring": manifest.scoring.model_dump(mode="json")
        if manifest and manifest.scoring
        else None,
        "repeat_servers": {f"repeat-{r.number}": _dump(load_repeat_server(r)) for r in repeats},
    }
    tables: list[Table] = []

    def show(section: Section, key: str | None = None) -> None:
        lines.extend(section.lines)
        tables.extend(section.tables)
        if key is not None and section.data is not None:
            data[key] = section.data

    datasets = manifest.datasets if manifest else {}
    if "v1.5" in datasets or not manifest:
        show(v15_section(repeats), "v1.5")
    if "v1.0" in datasets or not manifest:
        show(unified_section(repeats), "v1.0_unified")
        show(official_section(repeats), "v1.0_official_rules")
        if repeats:
            show(replies_section(repeats[-1]))
    show(listening_tables(repeats), "listening")
    data["provenance"] = current().model_dump(mode="json")
    return "\n".join(lines).rstrip() + "\n", data, tables


def build_results(run: RunPaths) -> tuple[str, dict]:
    """RESULTS.md's text and results.json's data (without the files and tables write_results
    adds)."""
    text, data, _ = build_report(run)
    return text, data


def listening_tables(repeats: list) -> Section:
    """The listening-quality section (reports/listening.py)."""
    return listening_section(repeats)


def write_results(run: RunPaths) -> tuple[str, dict]:
    """Write RESULTS.md, results.json, tables/*.csv and plots/*.png; returns the first two.

    The CSVs and results.json's "tables" are rendered from the same Table objects as RESULTS.md's
    tables. results.json and the tables are written before RESULTS.md, so a RESULTS.md on disk
    always has its tables beside it."""
    text, data, tables = build_report(run)
    data["tables"] = [t.dump() for t in tables]
    data["files"] = {
        "tables": [p.name for p in write_tables(run.root / "tables", tables)],
        "plots": [p.name for p in write_plots(run, run.repeats())],
    }
    atomic_write_json(run.results_json, data)
    atomic_write_text(run.results_md, text)
    return text, data
