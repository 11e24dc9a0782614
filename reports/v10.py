"""The v1.0 sections: unified metrics per repeat, the official-rule reference table, replies."""

from __future__ import annotations

from pathlib import Path

from fdb.io import read_json
from fdb.layout import RepeatPaths
from reports.cells import NA, NOT_MEASURED, count_range, interval, mean_sd, percent, seconds, table

UNIFIED_ORDER = {
    "pause_handling": ["pause_intrusion_rate", "pause_intrusion_per_pause", "intrusion_s_per_pause_s",
                       "inside_pause_onset_rate", "pre_pause_speech_rate", "carry_in_rate", "any_speech_rate"],
    "turn_taking": ["early_start_rate", "response_rate_1s", "response_rate_2s", "response_rate_5s",
                    "no_response_rate", "response_latency_s"],
    "user_interruption": ["exercised_rate", "speaking_at_end_rate", "response_rate_1s", "response_rate_2s",
                          "response_rate_5s", "no_response_rate", "response_latency_s", "stop_latency_s",
                          "speech_s_per_interruption_s", "restart_rate"],
}


def _load(path: Path):
    return read_json(path) if path.exists() else None


def _metric_row(name: str, m: dict) -> list[str]:
    if "wilson95" in m:  # a share of samples
        return [name, percent(m["value"]), interval(m["wilson95"], percent), f"{m['count']}/{m['n']}",
                interval(m["selected_bounds"], percent), m["better"]]
    if "bootstrap95" in m:  # a pooled ratio
        value = NA if m["value"] is None else f"{m['value']:.3f}"
        ci = interval(m["bootstrap95"], lambda v: f"{v:.3f}")
        return [name, value, ci, f"{m['numerator']:.3f}/{m['denominator']:.3f}", NA, m["better"]]
    median = seconds(m["median_s"])
    return [name, f"median {median} s, p90 {seconds(m['p90_s'])} s", interval(m["median_bootstrap95"]),
            f"{m['observed']}/{m['n']} responded", NA, m["better"]]


def unified_section(repeats: list[RepeatPaths]) -> tuple[list[str], dict]:
    lines, data = ["## v1.0 unified metrics", ""], {}
    for rep in repeats:
        if not (rep.v10_reference / "manifest.json").exists() and not rep.v10_recording.exists():
            continue  # this repeat left v1.0 out
        unified = _load(rep.v10_reference / "unified.json")
        problem = unified_problem(rep, unified)
        if problem is not None:
            lines += [f"### repeat-{rep.number}", "", f"Unified metrics unavailable: {problem}. "
                      f"{backfill_hint(rep)}", ""]
            continue
        data[f"repeat-{rep.number}"] = unified
        lines += [f"### repeat-{rep.number}", "", f"Definitions `{unified['definitions']}`; ASR "
                  f"`{unified['inputs']['asr_backend'].get('name')}`; VAD "
                  f"`{(unified.get('vad') or {}).get('name', 'not used')}`.", ""]
        lines += _coverage(unified)
        for name, subset in unified["subsets"].items():
            metrics = subset["metrics"]
            rows = [_metric_row(k, metrics[k]) for k in UNIFIED_ORDER[subset["task"]] if k in metrics]
            lines += [f"**{name}** ({subset['task']})", ""]
            lines += table(["metric", "value", "95% interval", "count", "all-selected bounds", "better"], rows)
            lines.append("")
        for name, why in unified.get("not_scored", {}).items():
            lines += [f"{name}: not scored by the unified metrics ({why}).", ""]
    return lines, data


def unified_problem(rep: RepeatPaths, unified: dict | None) -> str | None:
    """Why a repeat's unified.json cannot be shown (missing, stale, unsupported, incomplete), or None."""
    from fdb.datasets.types import V10_TASK
    from fdb.io import sha256_file
    from scorers.v10_records import UNIFIED_SCHEMA

    tree = rep.v10_reference
    for name in ("manifest.json", "asr.json"):
        if not (tree / name).exists():
            return f"v10/reference/{name} is missing"
    if unified is None:
        return "v10/reference/unified.json is missing"
    if unified.get("schema") != UNIFIED_SCHEMA:
        return f"unified.json has the unsupported version {unified.get('schema')!r} (fdb reads {UNIFIED_SCHEMA})"
    inputs = unified.get("inputs") or {}
    if inputs.get("manifest_sha256") != sha256_file(tree / "manifest.json"):
        return "unified.json is stale: its manifest.json hash differs from the export's"
    if inputs.get("asr_sha256") != sha256_file(tree / "asr.json"):
        return "unified.json is stale: its asr.json hash differs from the ASR receipt's"
    if not (tree / "unified-samples.jsonl").exists():
        return "the output pair is incomplete: v10/reference/unified-samples.jsonl is missing"
    subsets = {s["subset"] for s in (_load(tree / "manifest.json") or {}).get("samples", [])}
    scored = set(unified.get("subsets", {})) | set(unified.get("not_scored", {}))
    missing = sorted(sub for sub in subsets - scored if V10_TASK.get(sub) != "backchannel")
    if missing:
        return f"subset(s) {', '.join(missing)} incomplete in unified.json"
    return None


def backfill_hint(rep: RepeatPaths) -> str:
    return (f"Repair the export or ASR if named, then run the CPU-only backfill `python -m fdb score v10 --tree "
            f"{rep.v10_reference}` (no ASR, no v1.5 work) and rerun aggregate.")


def _coverage(unified: dict) -> list[str]:
    rows = []
    for name, subset in unified["subsets"].items():
        c = subset["counts"]
        reasons = ", ".join(f"{k}: {v}" for k, v in sorted(c["ineligible_reasons"].items())) or "-"
        horizon = subset["metrics"].get("min_observable_s")
        rows.append([name, c["declared"], c["selected"], c["eligible"], c["ineligible"], reasons,
                     seconds(horizon) if "min_observable_s" in subset["metrics"] else NA])
    return table(["subset", "declared", "selected", "eligible", "ineligible", "reasons", "min observable (s)"],
                 rows) + [""]


OFFICIAL_HEADER = ["Subset", "Selected", "Eligible", "Evaluated", "Takeover rate", "Latency (s)",
                   "Relevance (0-5)", "Judge retries", "Backchannel frequency", "Backchannel JSD"]


def _relevance(repeats: list[RepeatPaths]) -> list[dict]:
    found = []
    for rep in repeats:
        judge = _load(rep.root / "judge.json")
        rel = (judge or {}).get("relevance")
        if rel and rel.get("status") not in ("pending", "blocked"):
            found.append(rel)
    return found


def _official_row(name: str, cells: list[dict], relevance: list[dict]) -> list[str]:
    task = cells[0]["task"]
    backchannel = task == "backchannel"
    rel_cells = [NA, NA]
    if task == "user_interruption":
        rel_cells = [mean_sd([r["relevance"] for r in relevance]) if relevance else NOT_MEASURED,
                     count_range([r["retries"] for r in relevance]) if relevance else NA]
    return [
        name, count_range([c["selected"] for c in cells]), count_range([c["eligible"] for c in cells]),
        count_range([c["evaluated"] for c in cells]), mean_sd([c["takeover_rate"] for c in cells]),
        NA if backchannel else mean_sd([c["latency_s"] for c in cells]), *rel_cells,
        mean_sd([c.get("backchannel_frequency") for c in cells]) if backchannel else NA,
        mean_sd([c.get("backchannel_jsd") for c in cells]) if backchannel else NA,
    ]


def official_section(repeats: list[RepeatPaths]) -> tuple[list[str], dict]:
    per_repeat = {r.number: _load(r.v10_reference / "official.json") for r in repeats}
    found = {n: s for n, s in per_repeat.items() if s}
    lines = ["## v1.0 official-rule reference", ""]
    if not found:
        return lines + ["Not evaluated yet (no official.json in any repeat).", ""], {}
    relevance = _relevance(repeats)
    lines += ["Takeover, latency and backchannel numbers by the official evaluator's rules, reimplemented "
              "clean-room (negative latencies clamped to 0, averaged over takeover samples), not the "
              "official evaluator itself. " + _relevance_note(relevance), ""]
    subsets = sorted({k for s in found.values() for k in s["subsets"]})
    rows = []
    for name in subsets:
        cells = [c for c in (s["subsets"].get(name) for s in found.values()) if c]
        rows.append(_official_row(name, cells, relevance))
    missing = [f"repeat-{n}" for n, s in per_repeat.items() if not s]
    lines += table(OFFICIAL_HEADER, rows) + [""]
    if missing:
        lines += [f"Not evaluated yet: {', '.join(missing)}.", ""]
    return lines, {f"repeat-{n}": s for n, s in found.items()}


def replies_section(rep: RepeatPaths, max_words: int = 14) -> list[str]:
    """What the system said in each v1.0 window, as the ASR heard it (latest repeat)."""
    samples = rep.v10_reference / "unified-samples.jsonl"
    manifest = _load(rep.v10_reference / "manifest.json")
    if manifest is None:
        return []
    outcomes = {}
    if samples.exists():
        import json

        for line in samples.read_text().splitlines():
            row = json.loads(line)
            if "outcome" in row:
                outcomes[row["sample_id"]] = row["outcome"]
            elif "pause_intrusion" in row:
                outcomes[row["sample_id"]] = "pause intrusion" if row["pause_intrusion"] else "no intrusion"
    rows = []
    for sample in manifest["samples"]:
        out = _load(rep.v10_reference / sample["subset"] / sample["id"] / "output.json")
        if not sample["eligible"]:
            rows.append([sample["sample_id"], "ineligible: " + ", ".join(sample["reasons"]), NA, NA, ""])
            continue
        words = (out or {}).get("chunks", [])
        text = " ".join(w["text"].strip() for w in words[:max_words]) + (" …" if len(words) > max_words else "")
        first = seconds(min(w["timestamp"][0] for w in words)) if words else NA
        rows.append([sample["sample_id"], outcomes.get(sample["sample_id"], "-"), len(words), first,
                     text or "(no words)"])
    return [f"## v1.0 replies as transcribed (repeat-{rep.number})", ""] + table(
        ["sample", "outcome", "words", "first word (s)", "transcript"], rows) + [""]


def _relevance_note(relevance: list[dict]) -> str:
    if not relevance:
        return "Relevance needs an LLM judge: not measured (no judge ran)."
    labels = sorted({str((r.get("rubric") or {}).get("label")) for r in relevance})
    models = sorted({str((r.get("judge") or {}).get("model")) for r in relevance})
    return (f"Relevance rated by {', '.join(models)} with {', '.join(labels)}; a nonzero Judge retries "
            "means the official loop would have inflated the interruption takeover rate.")
