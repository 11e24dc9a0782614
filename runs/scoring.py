"""Which ASR, MOS and speaker backends one `fdb asr` uses, and where their outputs go.

The first `fdb asr` of a run records its choice in run.json (``scoring``); every later one loads
that choice again unless told otherwise, so its receipts match and finished work is kept. A run
scored before fdb recorded choices counts as scored with the embedded defaults. Asking for
another backend than the run's is refused, unless ``--side-by-side``: then the outputs of that
backend set go to ``repeat-N/scoring/<asr>+<mos>+<speaker>/`` (``v10/reference/`` and
``reference-audio/`` with the export's files hard-linked, ``listening/``, ``scoring.json``),
beside the run's own, which stay where they are and are what RESULTS.md reads. Whatever the
mode, an output already on disk from another model (an ``asr.json``, a listening summary) is
never overwritten: the call stops and names it.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from fdb.errors import FdbError
from fdb.io import atomic_write_json
from fdb.layout import RepeatPaths, RunPaths
from fdb.models.scoring import (
    FLAGS,
    KINDS,
    BackendChoice,
    ScoringBackends,
    load_backend,
    same_model,
)
from fdb.records import ExportManifest, asr_backend
from fdb.records.listening import ListeningSummary
from fdb.run_manifest import load_manifest, save_manifest

SIDE_SCHEMA = "fdb-scoring-1"


@dataclass(frozen=True)
class Target:
    """Where one repeat's backend-dependent outputs go (``out``): the repeat itself, or a side
    directory laid out like one (its v10_reference, reference_audio and listening)."""

    rep: RepeatPaths
    out: RepeatPaths
    side: bool = False

    @property
    def root(self) -> Path:
        return self.out.root


@dataclass
class Scoring:
    choice: ScoringBackends
    backends: dict[str, object]  # kind -> loaded backend (None: a default one that is unavailable)
    target: Target
    notes: list[str] = field(default_factory=list)

    def identity(self, kind: str) -> dict | None:
        backend = self.backends.get(kind)
        return None if backend is None else backend.identity.model_dump(mode="json")


def resolve(
    run: RunPaths,
    asked: dict[str, BackendChoice],
    side_by_side: bool = False,
    device: str | None = None,
) -> ScoringBackends:
    """The run's choice (else the defaults) with the kinds the user asked for; another model than
    the run's recorded one is refused without ``side_by_side``."""
    manifest = load_manifest(run)
    recorded = manifest.scoring if manifest is not None else None
    choice = (recorded or ScoringBackends()).model_copy(update=asked)
    if device and choice.asr.name == "parakeet":
        choice = choice.model_copy(update={"asr": choice.asr.model_copy(update={"device": device})})
    differs = (recorded or ScoringBackends()).differences(choice)
    if recorded is not None and differs and not side_by_side:
        raise FdbError(
            f"run {run.name} is scored with other backends ({run.manifest} scoring): "
            f"{'; '.join(differs)}",
            f"add --side-by-side to write them under repeat-N/scoring/{choice.tag()}/ beside the "
            "run's, leave the option out to use the run's, or score into a new --run-name",
        )
    if (
        side_by_side and not differs
    ):  # a run with no choice recorded yet is (or will be) scored with the defaults
        raise FdbError(
            f"--side-by-side with the run's own backends ({choice.tag()}) would score {run.name} "
            "twice",
            "leave --side-by-side out, or pass the backend you want beside the run's",
        )
    return choice


def load(kind: str, wanted: BackendChoice, notes: list[str]):
    """One backend, loaded. A chosen one that fails to load stops the call; the embedded default
    MOS or speaker backend, when its extra is missing, leaves its metrics null with a note."""
    try:
        return load_backend(kind, wanted)
    except Exception as exc:
        if kind == "asr" or wanted != getattr(ScoringBackends(), kind):
            raise
        notes.append(f"{kind}: backend unavailable ({exc}); its metrics are null")
        return None


def prepare(
    run: RunPaths,
    rep: RepeatPaths,
    asked: dict[str, BackendChoice],
    side_by_side: bool = False,
    device: str | None = None,
) -> Scoring:
    """Resolve, load and check the backends of one call (each kind checked against the outputs on
    disk as soon as it is loaded); records a new run's choice in run.json and, side by side,
    writes the side directory's scoring.json and its export links."""
    choice = resolve(run, asked, side_by_side, device)
    scoring = Scoring(choice, {}, _target(rep, choice, side_by_side))
    on_disk = [
        (t, existing_outputs(t))
        for t in (_target(other, choice, side_by_side) for other in run.repeats())
    ]
    for kind in KINDS:
        scoring.backends[kind] = load(kind, getattr(choice, kind), scoring.notes)
        for target, outputs in on_disk:
            check_outputs(target, outputs, kind, scoring.identity(kind))
    if side_by_side:
        _prepare_side(scoring)
    else:
        _record(run, choice)
    return scoring


def _target(rep: RepeatPaths, choice: ScoringBackends, side: bool) -> Target:
    if not side:
        return Target(rep, rep)
    return Target(rep, RepeatPaths(rep.side_scoring(choice.tag()), rep.number), side=True)


def _record(run: RunPaths, choice: ScoringBackends) -> None:
    manifest = load_manifest(run)
    if manifest is not None and manifest.scoring is None:
        save_manifest(run, manifest.model_copy(update={"scoring": choice}))


def existing_outputs(target: Target) -> list[tuple[Path, str, dict]]:
    """(file, kind, backend identity) of every backend-dependent output already in ``target``."""
    found = [
        (tree / "asr.json", "asr", asr_backend(tree))
        for tree in (target.out.v10_reference, target.out.reference_audio)
    ]
    path = target.out.listening / "summary.json"
    summary = ListeningSummary.load(path)
    if summary is not None:
        found.extend((path, kind, ident) for kind, ident in summary.backends.items())
    return [(path, kind, ident) for path, kind, ident in found if ident]


def check_outputs(
    target: Target, outputs: list[tuple[Path, str, dict]], kind: str, now: dict | None
) -> None:
    """Refuse to score over a ``kind`` output of another model (it would be overwritten or mixed);
    ``outputs``: the target's ``existing_outputs``."""
    for path, found, ident in outputs:
        if found == kind and now is not None and not same_model(ident, now):
            raise FdbError(
                f"{path} holds {kind} results of {ident.get('name')} (sha256 "
                f"{str(ident.get('checkpoint_sha256'))[:12]}), not of {now.get('name')}: "
                f"scoring {target.rep.root} with it would overwrite or mix them",
                "pass the backend that wrote them (fdb asr --help), add --side-by-side to keep "
                "both, or use a new --run-name",
            )


def _prepare_side(scoring: Scoring) -> None:
    target = scoring.target
    target.root.mkdir(parents=True, exist_ok=True)
    atomic_write_json(
        target.root / "scoring.json",
        {
            "schema": SIDE_SCHEMA,
            "scoring": scoring.choice.model_dump(mode="json"),
            "backends": {kind: scoring.identity(kind) for kind in KINDS},
        },
    )
    for source, dest, name in (
        (target.rep.v10_reference, target.out.v10_reference, "manifest.json"),
        (target.rep.reference_audio, target.out.reference_audio, "reference-manifest.json"),
    ):
        if (source / name).exists():
            link_export(source, dest, name)


def link_export(source: Path, dest: Path, manifest_name: str) -> None:
    """The export's manifest and every file it lists, hard-linked (copied across devices) from
    ``source`` into ``dest``, so the scorers run on ``dest`` as on the export itself."""
    fix = (
        "cut the windows again from the recording "
        "(python -m fdb generate --run-name RUN --repeat N --export-only)"
    )
    manifest = ExportManifest.load(source / manifest_name, fix)
    if manifest is None:
        raise FdbError(f"{source / manifest_name} is missing", fix)
    names = [manifest_name] + [f"{s.subset}/{s.id}/{n}" for s in manifest.samples for n in s.files]
    for rel in names:
        src, dst = source / rel, dest / rel
        if not src.exists():
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.unlink(missing_ok=True)
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)


def choice_flags(choice: ScoringBackends) -> str:
    """The fdb asr options that ask for ``choice`` (for a side-by-side rerun command)."""
    flags = []
    for kind, option in (("asr", "--asr"), ("mos", "--mos"), ("speaker", "--speaker")):
        c = getattr(choice, kind)
        flags.append(f"{option} {c.name}")
        path_flag, sha_flag = FLAGS.get(c.name, (None, None))
        if path_flag:
            flags += [f"{path_flag} {c.checkpoint}", f"{sha_flag} {c.sha256}"]
        if c.url:
            flags += [
                f"--asr-url {c.url}",
                f"--asr-model {c.model}",
                f"--api-key-env {c.api_key_env or 'OPENAI_API_KEY'}",
            ]
    return " ".join(flags)
