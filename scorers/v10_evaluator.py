"""Run the original Full-Duplex-Bench v1.0 evaluator from a user's checkout (never vendored).

``--reference-source PATH`` points at a checkout of DanielLin94144/Full-Duplex-Bench. Before
anything runs, the sha256 of every file the v1.0 evaluation uses is checked against the one pin
table (``fdb.official_source.PINNED_FILES``, revision 3e799c4); a missing or changed file stops
with each path and its expected and actual sha256, unless the user accepted the checkout's own
revision (``accept_revision``, ``--accept-revision``), which evaluator.json then records with the
accepted differences (``checkout_check``).

Each subset whose task needs no LLM (pause handling, smooth turn-taking, backchannel) is run
as ``<python> evaluate.py --task <task> --root_dir <staging>/<subset>`` with the working
directory ``v1_v1.5/evaluation`` (the scripts read ``./icc_gt_distribution.json``). The staging
directory is a temporary tree of symlinks to the eligible samples' output.wav, output.json and
annotation, so the evaluator sees one folder per sample and never writes into the export.
User interruption needs the relevance judge (an LLM) and is left to the judge phase.

The output goes to ``logs/evaluate-<subset>.log``; the numbers of the printed ``[Result]``
block (``Label: value`` or ``Label - Mean: m ± s``) are stored per subset in
``evaluator.json`` (``fdb-v1.0-evaluator-2``) with the hashes of manifest.json and asr.json.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from fdb.datasets.types import V10_ANNOTATION, V10_TASK
from fdb.errors import FdbError
from fdb.io import atomic_write_json, atomic_write_text
from fdb.official_source import (
    EVALUATION_DIR,
    EVALUATOR_FILES,
    PINNED_FILES,
    verify_checkout,
)
from fdb.provenance import current
from fdb.records.v10_reference import EvaluatorSubset, EvaluatorSummary
from scorers.v10_tree import check_fresh, id_key, load_tree, subset_key

EVALUATOR_TASK = {
    "pause_handling": "pause_handling",
    "turn_taking": "smooth_turn_taking",
    "backchannel": "backchannel",
    "user_interruption": "user_interruption",
}
NEEDS_JUDGE = frozenset({"user_interruption"})
_RESULT_LINE = re.compile(r"^\s*(?P<label>[^:]+?)\s*:\s*(?P<value>.+?)\s*$")
_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def _number(text: str) -> float | None:
    match = _NUMBER.search(text)
    return float(match.group(0)) if match else None


def parse_result(output: str) -> dict[str, float | None]:
    """Numbers of the last ``[Result]`` block: ``Label: v`` -> {Label: v}; ``Label - Mean: m ± s``
    -> {"Label mean": m, "Label std": s}; ``N/A`` -> None; lines without a colon are skipped and
    a line of dashes ends the block."""
    if "[Result]" not in output:
        return {}
    block = output.rsplit("[Result]", 1)[1]
    result: dict[str, float | None] = {}
    for line in block.splitlines():
        if line.strip().startswith("---"):
            break
        match = _RESULT_LINE.match(line)
        if not match:
            continue
        label, value = match.group("label"), match.group("value")
        if label.endswith(" - Mean") and "±" in value:
            mean, std = value.split("±", 1)
            base = label[: -len(" - Mean")]
            result[f"{base} mean"], result[f"{base} std"] = _number(mean), _number(std)
        else:
            result[label] = None if value.strip().upper().startswith("N/A") else _number(value)
    return result


def stage_subset(inputs, samples, staging: Path) -> int:
    """Symlink each eligible sample's files into ``staging/<id>/``; returns how many."""
    staged = 0
    for sample in samples:
        check_fresh(inputs, sample)
        folder = inputs.root / sample.subset / sample.id
        annotation = V10_ANNOTATION[V10_TASK[sample.subset]]
        target = staging / sample.id
        target.mkdir(parents=True)
        for name in ("output.wav", "output.json") + ((annotation,) if annotation else ()):
            (target / name).symlink_to((folder / name).resolve())
        staged += 1
    return staged


def run_task(
    checkout: Path, python: str, task: str, root_dir: Path, log: Path, timeout_s: float
) -> tuple[int, str]:
    """(return code, combined output) of one evaluate.py run; the output is also written to
    ``log``."""
    cmd = [python, "evaluate.py", "--task", EVALUATOR_TASK[task], "--root_dir", str(root_dir)]
    try:
        proc = subprocess.run(
            cmd,
            cwd=checkout / EVALUATION_DIR,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=os.environ.copy(),
        )
        code, output = (
            proc.returncode,
            proc.stdout + ("\n[stderr]\n" + proc.stderr if proc.stderr else ""),
        )
    except subprocess.TimeoutExpired as exc:
        code, output = -1, f"timed out after {timeout_s} s\n{exc.stdout or ''}"
    atomic_write_text(log, f"$ {' '.join(cmd)}\n{output}")
    return code, output


def _run_subset(
    inputs, checkout: Path, python: str, subset: str, samples: list, staging: Path, timeout_s: float
) -> EvaluatorSubset:
    task = V10_TASK[subset]
    eligible = [s for s in samples if s.eligible]
    base = {
        "subset": subset,
        "task": EVALUATOR_TASK[task],
        "selected": len(samples),
        "eligible": len(eligible),
    }
    if task in NEEDS_JUDGE:
        return EvaluatorSubset(
            **base,
            evaluated=0,
            status="not_run",
            note="needs the relevance judge (an LLM); run it through the judge phase",
        )
    if not eligible:
        return EvaluatorSubset(**base, evaluated=0, status="not_run", note="no eligible sample")
    staged = stage_subset(inputs, eligible, staging / subset)
    log = inputs.root / "logs" / f"evaluate-{subset}.log"
    code, output = run_task(checkout, python, task, staging / subset, log, timeout_s)
    result = parse_result(output)
    ok = code == 0 and bool(result)
    return EvaluatorSubset(
        **base,
        evaluated=staged,
        status="ok" if ok else "failed",
        result=result,
        log=str(log),
        note=None if ok else f"evaluate.py exited {code}; see the log",
    )


def run_evaluator(
    tree: Path,
    checkout: str | Path,
    python: str | None = None,
    timeout_s: float = 3600.0,
    pins: dict[str, str] = PINNED_FILES,
    accept_revision: str | None = None,
) -> EvaluatorSummary:
    """Verify the checkout (``accept_revision``: the revision the user accepted instead of the
    pinned one), run the LLM-free v1.0 evaluations on the eligible samples, write
    ``evaluator.json``. ``python`` is the interpreter with the evaluator's packages (default: this
    one)."""
    tree, checkout = Path(tree), Path(checkout).resolve()
    if not (
        checkout / EVALUATION_DIR
    ).is_dir():  # evaluate.py runs in it (it reads ./icc_gt_distribution.json)
        raise FdbError(
            f"{checkout} is not the root of a Full-Duplex-Bench checkout (no {EVALUATION_DIR}/)",
            "pass the checkout's root directory, not its evaluation folder",
        )
    check = verify_checkout(checkout, EVALUATOR_FILES, accept_revision=accept_revision, pins=pins)
    inputs = load_tree(tree)
    groups: dict[str, list] = {}
    for sample in inputs.manifest.samples:
        groups.setdefault(sample.subset, []).append(sample)
    python = python or sys.executable
    subsets = {}
    with tempfile.TemporaryDirectory(prefix="fdb-evaluator-") as tmp:
        for subset in sorted(groups, key=subset_key):
            samples = sorted(groups[subset], key=lambda s: id_key(s.id))
            subsets[subset] = _run_subset(
                inputs, checkout, python, subset, samples, Path(tmp), timeout_s
            )
    summary = EvaluatorSummary(
        checkout=str(checkout),
        checkout_revision=check.checkout_revision,
        files=check.files,
        checkout_check=check,
        python=python,
        manifest_sha256=inputs.manifest_sha256,
        asr_sha256=inputs.receipt_sha256,
        subsets=subsets,
        provenance=current().model_dump(mode="json"),
    )
    atomic_write_json(tree / "evaluator.json", summary.dump())
    return summary
