"""Loader for the Seed-TTS test lists (``seedtts_testset/``: ``en/meta.lst``, ``zh/meta.lst``,
``zh/hardcase.lst``; research notes §A.2).

A row is ``utt_id|prompt_text|prompt_wav|target_text[|gt_wav]``: 4 or 5 ``|``-separated fields
(the official lists ship both kinds). Relative wav paths are resolved against the list's own
directory (``en/prompt-wavs/x.wav`` for a row of ``en/meta.lst`` reading ``prompt-wavs/x.wav``);
a path that leads outside the dataset root is refused (checked on the path's text, then on the
resolved paths, so a root reached through a symlink still works). Blank lines are skipped; fields
are stripped. With 4 fields there is no ground truth (``gt_wav`` is None). Each row must be unique
by id within its list.

``strict=True`` raises the first ``SampleError``; ``strict=False`` returns the good rows and a
``SampleProblem`` per bad one, so one broken row never loses the others.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from pydantic import BaseModel

from fdb.datasets.official import problem_of, wav_header
from fdb.datasets.types import SampleProblem
from fdb.errors import FdbError, SampleError

SEEDTTS_LISTS = ("en/meta.lst", "zh/meta.lst", "zh/hardcase.lst")
OFFICIAL_COUNTS = {"en/meta.lst": 1088, "zh/meta.lst": 2020, "zh/hardcase.lst": 400}
ROW_FORMAT = "utt_id|prompt_text|prompt_wav|target_text[|gt_wav]"


class SeedTtsItem(BaseModel):
    """One row of a Seed-TTS list."""

    list_name: str  # "en/meta.lst"
    line: int  # 1-based line number in the list
    id: str
    prompt_text: str
    prompt_wav: Path
    target_text: str
    gt_wav: Path | None = None  # the 5th field, when the row has one


class SeedTtsSet(BaseModel):
    """The rows of every list found under one dataset root."""

    root: Path
    lists: dict[str, list[SeedTtsItem]]

    @property
    def counts(self) -> dict[str, int]:
        return {name: len(items) for name, items in self.lists.items()}

    def summary(self) -> str:
        """``en/meta.lst 1088, zh/meta.lst 2020, ...`` with a note where a count is not the
        official one."""
        parts = []
        for name, count in self.counts.items():
            official = OFFICIAL_COUNTS.get(name)
            note = (
                f" (official: {official:,})" if official is not None and official != count else ""
            )
            parts.append(f"{name} {count:,}{note}")
        return ", ".join(parts)


def _inside(path: str, root: Path) -> bool:
    """``path`` (joined and normalized) lies under ``root``: by its text, or once both are
    resolved (an absolute path spelled through the real directory of a symlinked root)."""
    base = os.path.normpath(os.path.abspath(root))
    if os.path.commonpath([base, path]) == base:
        return True
    real_base = os.path.realpath(base)
    return os.path.commonpath([real_base, os.path.realpath(path)]) == real_base


def _wav_path(
    raw: str, list_dir: Path, root: Path, utt: str, list_path: Path, what: str, check_audio: bool
) -> Path:
    if not raw:
        raise SampleError(
            utt, f"the {what} field is empty", f"give a path relative to {list_dir}", str(list_path)
        )
    joined = os.path.normpath(os.path.join(os.path.abspath(list_dir), raw))
    if not _inside(joined, root):
        raise SampleError(
            utt,
            f"{what} path {raw!r} escapes the dataset root {root}",
            "keep every wav inside the dataset (paths are relative to the list's directory)",
            str(list_path),
        )
    path = Path(joined)
    if check_audio:
        wav_header(path, utt)
    elif not path.is_file():
        raise SampleError(
            utt, f"{what} {raw} is missing", "restore it from the Seed-TTS archive", str(path)
        )
    return path


def parse_row(
    text: str, line: int, list_name: str, list_path: Path, root: Path, check_audio: bool = False
) -> SeedTtsItem:
    """One non-blank row of ``list_name`` (``list_path`` under ``root``) as a ``SeedTtsItem``."""
    fields = [f.strip() for f in text.split("|")]
    where = f"{list_name}:{line}"
    if len(fields) not in (4, 5):
        raise SampleError(
            where,
            f"row has {len(fields)} '|'-separated fields, expected 4 or 5 ({ROW_FORMAT})",
            f"fix line {line} of {list_path} (a '|' inside a text splits it)",
            str(list_path),
        )
    utt, prompt_text, prompt_raw, target_text = fields[:4]
    if not utt:
        raise SampleError(
            where, "row has an empty utt_id", f"fix line {line} of {list_path}", str(list_path)
        )
    if not target_text:
        raise SampleError(
            f"{list_name}/{utt}",
            "row has an empty target text",
            f"fix line {line} of {list_path}",
            str(list_path),
        )
    label = f"{list_name}/{utt}"
    list_dir = list_path.parent
    prompt = _wav_path(prompt_raw, list_dir, root, label, list_path, "prompt wav", check_audio)
    gt = None
    if len(fields) == 5 and fields[4]:
        gt = _wav_path(fields[4], list_dir, root, label, list_path, "ground-truth wav", check_audio)
    return SeedTtsItem(
        list_name=list_name,
        line=line,
        id=utt,
        prompt_text=prompt_text,
        prompt_wav=prompt,
        target_text=target_text,
        gt_wav=gt,
    )


def load_list(
    root: Path, list_name: str, check_audio: bool = False
) -> tuple[list[SeedTtsItem], list[SampleError]]:
    """Every row of one list, and the errors of the rows that could not be read."""
    root = Path(root)
    path = root / list_name
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise FdbError(
            f"cannot read the Seed-TTS list {path} ({exc})",
            "point --seed-tts / SEED_TTS_DATASET at the unpacked seedtts_testset/",
        ) from exc
    items: list[SeedTtsItem] = []
    errors: list[SampleError] = []
    seen: dict[str, int] = {}
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            item = parse_row(text.strip(), number, list_name, path, root, check_audio)
        except SampleError as exc:
            errors.append(exc)
            continue
        if item.id in seen:
            errors.append(
                SampleError(
                    f"{list_name}/{item.id}",
                    f"duplicate utt_id (first on line {seen[item.id]})",
                    f"remove line {number} of {path}",
                    str(path),
                )
            )
            continue
        seen[item.id] = number
        items.append(item)
    return items, errors


def present_lists(root: Path) -> list[str]:
    """The known lists that exist under ``root``; a root with none of them is an error."""
    root = Path(root)
    if not root.is_dir():
        raise FdbError(
            f"the Seed-TTS dataset root {root} does not exist",
            "unpack seedtts_testset and pass its path with --seed-tts or SEED_TTS_DATASET",
        )
    found = [name for name in SEEDTTS_LISTS if (root / name).is_file()]
    if not found:
        raise FdbError(
            f"{root} holds none of the Seed-TTS lists ({', '.join(SEEDTTS_LISTS)})",
            "pass the directory that contains en/ and zh/ (seedtts_testset/)",
        )
    return found


def load_seedtts(
    root: Path,
    lists: Iterable[str] | None = None,
    *,
    check_audio: bool = False,
    strict: bool = True,
):
    """Load the Seed-TTS lists under ``root`` (every known list present when ``lists`` is None).

    ``check_audio`` reads every wav header instead of only checking that the file exists.
    Returns a ``SeedTtsSet`` (strict) or ``(SeedTtsSet, [SampleProblem])``.
    """
    root = Path(root)
    names = present_lists(root) if lists is None else list(lists)
    loaded: dict[str, list[SeedTtsItem]] = {}
    errors: list[SampleError] = []
    for name in names:
        if name not in SEEDTTS_LISTS:
            raise FdbError(
                f"'{name}' is not a Seed-TTS list", f"use one of: {', '.join(SEEDTTS_LISTS)}"
            )
        loaded[name], bad = load_list(root, name, check_audio)
        errors += bad
    result = SeedTtsSet(root=root, lists=loaded)
    if strict:
        if errors:
            raise errors[0]
        return result
    problems: list[SampleProblem] = [problem_of(exc) for exc in errors]
    return result, problems
