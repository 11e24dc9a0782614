"""Loaders for the official Full-Duplex-Bench layouts (v1.0 subsets and v1.5 categories).

Layout (docs/formats.md): ``<root>/<subset>/<ID>/input.wav`` plus the task's annotation for
v1.0, and ``input.wav``, ``clean_input.wav``, ``metadata.json`` for v1.5. IDs are digit-only
(ASCII) folder names sorted numerically. Any other folder (``notes/``, ``__MACOSX/``, ``1a/``) is
skipped, as the official scripts do, but never silently: it is logged as a warning and, with
``strict=False``, reported as a ``SampleProblem`` of kind ``"skipped"``. Hidden folders
(``.name``) and plain files next to the sample folders are ignored.
Only WAV headers are read (rate, length, channels), so loading all 727 v1.0 samples is fast.
A WAV whose data chunk is shorter than its header says (a cut-short copy) is a broken sample,
and so is an input that is not shorter than the session deadline (``max_input_s``, by default
the recorder's cap ``MAX_SESSION_TIMEOUT_S``; ``generate`` passes the dataset's deadline): its
session could never finish, so it is refused before it costs a recording.

``strict=True`` (the default) raises the first ``SampleError``; ``strict=False`` returns the
loadable samples together with a list of ``SampleProblem`` so a run can continue and report.
A missing dataset root or subset directory is never per-sample: it always raises ``FdbError``.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Literal, TypeVar, overload

import numpy as np
import soundfile as sf

from fdb.audio import check_complete
from fdb.datasets.annotations import (
    parse_interrupt,
    parse_metadata,
    parse_pauses,
    parse_turn_taking,
    read_annotation,
)
from fdb.datasets.types import (
    DATASET_SUBSETS,
    V10_ANNOTATION,
    V10_TASK,
    DatasetName,
    SampleProblem,
    V10Sample,
    V15Pair,
)
from fdb.errors import FdbError, SampleError
from fdb.settings import MAX_SESSION_TIMEOUT_S

T = TypeVar("T")
log = logging.getLogger(__name__)
SETUP_HINT = (
    "run `python -m fdb setup`, or point FDB_WORK at a directory whose dataset/{name} holds "
    "the official tree"
)
BROKEN_FILE_HINT = (
    "restore {name} from the official archive and rerun `python -m fdb setup` "
    "(fdb's synthetic set: rerun `python -m fdb dataset synth`)"
)
# the machine setting that holds each dataset's per-session deadline (fdb/settings.py)
SESSION_DEADLINE_VAR = {"v1.0": "V10_SESSION_TIMEOUT_S", "v1.5": "SESSION_TIMEOUT_S"}


@overload
def load_v10(
    root: Path,
    subsets: Iterable[str] | None = None,
    *,
    strict: Literal[True] = True,
    max_input_s: float = ...,
) -> dict[str, list[V10Sample]]: ...
@overload
def load_v10(
    root: Path,
    subsets: Iterable[str] | None = None,
    *,
    strict: Literal[False],
    max_input_s: float = ...,
) -> tuple[dict[str, list[V10Sample]], list[SampleProblem]]: ...
def load_v10(root, subsets=None, *, strict=True, max_input_s=MAX_SESSION_TIMEOUT_S):
    """Load v1.0 samples per subset (all subsets present under ``root`` when ``subsets`` is None);
    an input of ``max_input_s`` seconds or more (the session deadline) is a broken sample."""
    root = Path(root)
    loader = functools.partial(_load_v10_sample, max_input_s=max_input_s)
    loaded, errors = _load(root, "v1.0", subsets, loader)
    return _finish(loaded, errors, strict)


@overload
def load_v15(
    root: Path,
    categories: Iterable[str] | None = None,
    *,
    strict: Literal[True] = True,
    max_input_s: float = ...,
) -> dict[str, list[V15Pair]]: ...
@overload
def load_v15(
    root: Path,
    categories: Iterable[str] | None = None,
    *,
    strict: Literal[False],
    max_input_s: float = ...,
) -> tuple[dict[str, list[V15Pair]], list[SampleProblem]]: ...
def load_v15(root, categories=None, *, strict=True, max_input_s=MAX_SESSION_TIMEOUT_S):
    """Load v1.5 pairs per category (all categories present under ``root`` when None); an
    input or clean input of ``max_input_s`` seconds or more is a broken pair."""
    root = Path(root)
    loader = functools.partial(_load_v15_pair, max_input_s=max_input_s)
    loaded, errors = _load(root, "v1.5", categories, loader)
    return _finish(loaded, errors, strict)


def list_ids(
    root: Path, dataset: DatasetName, subsets: Iterable[str] | None = None
) -> dict[str, list[str]]:
    """Sample ids per subset in numeric order, from folder names only (no file is opened)."""
    root = Path(root)
    return {
        name: [d.name for d in sample_dirs(root / name)]
        for name in resolve_subsets(root, dataset, subsets)
    }


def is_sample_id(name: str) -> bool:
    """A sample folder name: ASCII digits only (``"7"``, ``"012"``)."""
    return name.isascii() and name.isdigit()


def sample_dirs(subset_dir: Path) -> list[Path]:
    """Digit-only sample folders of one subset, sorted numerically (1, 2, ..., 10, 11)."""
    dirs = [d for d in subset_dir.iterdir() if d.is_dir() and is_sample_id(d.name)]
    return sorted(dirs, key=lambda d: (int(d.name), d.name))


def skipped_dirs(subset_dir: Path) -> list[Path]:
    """Folders of a subset that are not samples (non-digit names; hidden ones left out)."""
    return sorted(
        d
        for d in subset_dir.iterdir()
        if d.is_dir() and not is_sample_id(d.name) and not d.name.startswith(".")
    )


def _skipped(subset: str, folder: Path) -> SampleProblem:
    problem = SampleProblem(
        sample_id=f"{subset}/{folder.name}",
        path=str(folder),
        kind="skipped",
        message="not a sample folder (its name is not all digits): skipped",
        hint="sample folders are numbered (1, 2, ...); rename or remove it",
    )
    log.warning("%s", problem.one_line())
    return problem


def resolve_subsets(root: Path, dataset: DatasetName, subsets: Iterable[str] | None) -> list[str]:
    """Check the dataset root and the requested subsets; None means every subset present."""
    known = DATASET_SUBSETS[dataset]
    _check_root(root, dataset)
    if subsets is None:
        present = [name for name in known if (root / name).is_dir()]
        if not present:
            raise FdbError(
                f"the {dataset} dataset root {root} holds none of its subsets ({', '.join(known)})",
                SETUP_HINT.format(name=dataset),
            )
        return present
    wanted = list(dict.fromkeys(subsets))
    for name in wanted:
        if name not in known:
            raise FdbError(f"'{name}' is not a {dataset} subset", f"use one of: {', '.join(known)}")
        if not (root / name).is_dir():
            raise FdbError(
                f"the {dataset} subset directory {root / name} is missing",
                SETUP_HINT.format(name=dataset),
            )
    return wanted


def _check_root(root: Path, dataset: DatasetName) -> None:
    if root.is_dir():
        return
    hint = SETUP_HINT.format(name=dataset)
    if (root.parent / dataset).is_dir() and root.name != dataset:
        hint = f"did you mean {root.parent / dataset}? otherwise {hint}"
    raise FdbError(f"the {dataset} dataset root {root} does not exist", hint)


def _load(
    root: Path,
    dataset: DatasetName,
    subsets: Iterable[str] | None,
    loader: Callable[[str, Path], T],
) -> tuple[dict[str, list[T]], list[SampleError | SampleProblem]]:
    loaded: dict[str, list[T]] = {}
    errors: list[SampleError | SampleProblem] = []
    for name in resolve_subsets(root, dataset, subsets):
        loaded[name] = []
        errors += [_skipped(name, folder) for folder in skipped_dirs(root / name)]
        for sample_dir in sample_dirs(root / name):
            try:
                loaded[name].append(loader(name, sample_dir))
            except SampleError as exc:
                errors.append(exc)
    return loaded, errors


def problem_of(exc: SampleError) -> SampleProblem:
    """The typed record of a per-sample error (the message without the sample/path prefix)."""
    prefix = f"{exc.sample}: " + (f"{exc.path}: " if exc.path else "")
    return SampleProblem(
        sample_id=exc.sample, path=exc.path, message=exc.message.removeprefix(prefix), hint=exc.hint
    )


def _finish(loaded: dict, errors: list[SampleError | SampleProblem], strict: bool):
    if strict:
        for exc in errors:
            if isinstance(exc, SampleError):
                raise exc
        return loaded
    return loaded, [exc if isinstance(exc, SampleProblem) else problem_of(exc) for exc in errors]


def wav_header(path: Path, sample_id: str) -> tuple[int, int, int]:
    """(rate, frames, channels) from the WAV header; a missing, unreadable, empty or truncated
    file is an error, and so is a float WAV holding NaN or infinite samples (the only kind whose
    samples are read here)."""
    if not path.is_file():
        raise SampleError(
            sample_id,
            "audio file is missing",
            f"restore {path.name} from the official archive",
            str(path),
        )
    try:
        check_complete(path, sample_id, BROKEN_FILE_HINT.format(name=path.name))
        info = sf.info(str(path))
    except SampleError:
        raise
    except Exception as exc:  # soundfile raises LibsndfileError / RuntimeError variants
        raise SampleError(
            sample_id, f"unreadable WAV ({exc})", "replace the file with a valid PCM WAV", str(path)
        ) from exc
    if info.frames <= 0 or info.samplerate <= 0:
        raise SampleError(sample_id, "WAV holds no samples", "replace the file", str(path))
    if info.subtype in (
        "FLOAT",
        "DOUBLE",
    ):  # only a float WAV can hold NaN / inf (PCM: header only)
        if not np.isfinite(sf.read(str(path), dtype="float32")[0]).all():
            raise SampleError(
                sample_id,
                "WAV holds NaN or infinite samples",
                BROKEN_FILE_HINT.format(name=path.name),
                str(path),
            )
    return int(info.samplerate), int(info.frames), int(info.channels)


def check_session_length(
    path: Path, sample_id: str, duration_s: float, max_input_s: float, dataset: DatasetName
) -> None:
    """An input the recorder streams in real time must end before the session deadline."""
    if duration_s < max_input_s:
        return
    var = SESSION_DEADLINE_VAR[dataset]
    if duration_s < MAX_SESSION_TIMEOUT_S:
        hint = (
            f"drop the sample from the selection, or raise {var} above {duration_s:.0f} s "
            f"(it may go up to {MAX_SESSION_TIMEOUT_S:g} s)"
        )
    else:
        hint = (
            "drop the sample from the selection: sessions are capped at "
            f"{MAX_SESSION_TIMEOUT_S:g} s, so it cannot be recorded"
        )
    raise SampleError(
        sample_id,
        f"input is {duration_s:.3f} s long, not shorter than the {max_input_s:g} s "
        f"session deadline ({var}): its session could never finish",
        hint,
        str(path),
    )


def _load_v10_sample(
    subset: str, sample_dir: Path, max_input_s: float = MAX_SESSION_TIMEOUT_S
) -> V10Sample:
    sample_id = f"{subset}/{sample_dir.name}"
    task = V10_TASK[subset]
    input_wav = sample_dir / "input.wav"
    rate, frames, channels = wav_header(input_wav, sample_id)
    duration = frames / rate
    check_session_length(input_wav, sample_id, duration, max_input_s, "v1.0")
    name = V10_ANNOTATION[task]
    annotation = sample_dir / name if name else None
    fields: dict = {}
    if annotation is not None:
        data = read_annotation(annotation, sample_id)
        if task == "pause_handling":
            fields["pauses"] = parse_pauses(data, sample_id, annotation, duration)
        elif task == "turn_taking":
            fields["turn_end_s"] = parse_turn_taking(data, sample_id, annotation, duration)
        else:
            interrupt = parse_interrupt(data, sample_id, annotation, duration)
            fields.update(
                interrupt=interrupt.span,
                interrupt_context=interrupt.context,
                interrupt_text=interrupt.text,
            )
    return V10Sample(
        subset=subset,
        id=sample_dir.name,
        task=task,
        dir=sample_dir,
        input_wav=input_wav,
        annotation=annotation,
        rate=rate,
        duration_s=duration,
        channels=channels,
        **fields,
    )


def _load_v15_pair(
    category: str, pair_dir: Path, max_input_s: float = MAX_SESSION_TIMEOUT_S
) -> V15Pair:
    sample_id = f"{category}/{pair_dir.name}"
    input_wav, clean_wav = pair_dir / "input.wav", pair_dir / "clean_input.wav"
    rate, frames, channels = wav_header(input_wav, sample_id)
    clean_rate, clean_frames, _ = wav_header(clean_wav, sample_id)
    duration = frames / rate
    check_session_length(input_wav, sample_id, duration, max_input_s, "v1.5")
    check_session_length(clean_wav, sample_id, clean_frames / clean_rate, max_input_s, "v1.5")
    metadata_path = pair_dir / "metadata.json"
    meta = parse_metadata(
        read_annotation(metadata_path, sample_id), sample_id, metadata_path, duration
    )
    return V15Pair(
        category=category,
        id=pair_dir.name,
        dir=pair_dir,
        input_wav=input_wav,
        clean_input_wav=clean_wav,
        metadata=metadata_path,
        rate=rate,
        duration_s=duration,
        clean_duration_s=clean_frames / clean_rate,
        channels=channels,
        overlap=meta.overlap,
        context_text=meta.context_text,
        current_turn_text=meta.current_turn_text,
    )
