"""Parse and validate the official annotation files (pause, turn-taking, interrupt, v1.5 metadata).

Every function takes the decoded JSON plus the sample's id, the file and the input duration, and
either returns typed values or raises ``SampleError`` naming the sample, the file and the fix.
Schemas: docs/formats.md and the official-scoring notes §2.3 (``interrupt.json`` has a singular
``timestamp``, v1.5 ``metadata.json`` a plural ``timestamps``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from fdb.errors import SampleError

# Annotation times may overshoot the audio by up to one 20 ms frame (word aligners round up).
TIME_TOLERANCE_S = 0.02


class Interrupt(BaseModel):
    """``interrupt.json[0]``: the context question, the interruption text and its [S, R]."""

    context: str | None
    text: str | None
    span: tuple[float, float]


class V15Metadata(BaseModel):
    """``metadata.json`` of a v1.5 pair."""

    context_text: str | None
    current_turn_text: str | None
    overlap: tuple[float, float]


def read_annotation(path: Path, sample_id: str) -> Any:
    """Decode a JSON annotation; a missing or malformed file raises ``SampleError``."""
    if not path.is_file():
        raise SampleError(
            sample_id,
            "annotation file is missing",
            f"restore {path.name} from the official archive (or rerun `python -m fdb setup`)",
            str(path),
        )
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SampleError(
            sample_id,
            f"malformed JSON ({exc})",
            f"replace {path.name} with the official file",
            str(path),
        ) from exc


def _fail(sample_id: str, path: Path, message: str, hint: str) -> SampleError:
    return SampleError(sample_id, message, hint, str(path))


def _span(
    value: Any, what: str, sample_id: str, path: Path, duration_s: float
) -> tuple[float, float]:
    """Validate ``[start, end]``: two finite numbers, start <= end, both inside the audio."""
    ok = isinstance(value, list | tuple) and len(value) == 2
    ok = ok and all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)
    if not ok or not all(math.isfinite(float(v)) for v in value):
        raise _fail(
            sample_id,
            path,
            f"{what} is {value!r}, not [start_s, end_s]",
            "write two numbers in seconds, e.g. [3.32, 4.0]",
        )
    start, end = float(value[0]), float(value[1])
    if start > end:
        raise _fail(
            sample_id,
            path,
            f"{what} starts after it ends ({start:g} > {end:g})",
            "swap the two times or fix the annotation",
        )
    lo, hi = -TIME_TOLERANCE_S, duration_s + TIME_TOLERANCE_S
    if start < lo or end > hi:
        raise _fail(
            sample_id,
            path,
            f"{what} [{start:g}, {end:g}] lies outside the input audio [0, {duration_s:g}] s",
            "check that the annotation belongs to this input.wav",
        )
    return start, end


def _entries(data: Any, sample_id: str, path: Path, example: str) -> list[dict]:
    """The top-level list of objects that pause/turn-taking/interrupt files hold."""
    if not isinstance(data, list) or not data or not all(isinstance(e, dict) for e in data):
        raise _fail(
            sample_id,
            path,
            "expected a non-empty JSON list of objects",
            f"use the official shape: {example}",
        )
    return data


def parse_pauses(
    data: Any, sample_id: str, path: Path, duration_s: float
) -> list[tuple[float, float]]:
    """``pause.json``: ``[{"text": "[PAUSE]", "timestamp": [a, b]}, ...]``, sorted, disjoint."""
    example = '[{"text": "[PAUSE]", "timestamp": [a, b]}]'
    pauses = []
    for k, entry in enumerate(_entries(data, sample_id, path, example)):
        pauses.append(
            _span(entry.get("timestamp"), f"pause {k} timestamp", sample_id, path, duration_s)
        )
    for k in range(1, len(pauses)):
        if pauses[k][0] < pauses[k - 1][1]:
            raise _fail(
                sample_id,
                path,
                f"pauses {k - 1} and {k} are unsorted or overlap ({pauses[k - 1]} then "
                f"{pauses[k]})",
                "list pauses in time order without overlaps",
            )
    return pauses


def parse_turn_taking(data: Any, sample_id: str, path: Path, duration_s: float) -> float:
    """``turn_taking.json``: returns E = ``[0].timestamp[0]``, the end of the user's turn."""
    example = '[{"text": "[TURN-TAKING]", "timestamp": [E, t1]}]'
    entry = _entries(data, sample_id, path, example)[0]
    start, _ = _span(entry.get("timestamp"), "turn-taking timestamp", sample_id, path, duration_s)
    return start


def parse_interrupt(data: Any, sample_id: str, path: Path, duration_s: float) -> Interrupt:
    """``interrupt.json``: ``[{"context", "interrupt", "timestamp": [S, R]}]`` (singular key)."""
    example = '[{"context": "...", "interrupt": "...", "timestamp": [S, R]}]'
    entry = _entries(data, sample_id, path, example)[0]
    if "timestamp" not in entry and "timestamps" in entry:
        raise _fail(
            sample_id,
            path,
            'has "timestamps" where interrupt.json uses "timestamp"',
            'rename the key to the singular "timestamp"',
        )
    span = _span(entry.get("timestamp"), "interrupt timestamp [S, R]", sample_id, path, duration_s)
    return Interrupt(
        context=_text(entry.get("context")), text=_text(entry.get("interrupt")), span=span
    )


def parse_metadata(data: Any, sample_id: str, path: Path, duration_s: float) -> V15Metadata:
    """v1.5 ``metadata.json``: ``{"context_text", "current_turn_text", "timestamps": [s, e]}``."""
    if not isinstance(data, dict):
        raise _fail(
            sample_id,
            path,
            "expected a JSON object",
            'use {"context_text": "", "current_turn_text": "...", "timestamps": [s, e]}',
        )
    if "timestamps" not in data and "timestamp" in data:
        raise _fail(
            sample_id,
            path,
            'has "timestamp" where metadata.json uses "timestamps"',
            'rename the key to the plural "timestamps"',
        )
    overlap = _span(data.get("timestamps"), "overlap timestamps", sample_id, path, duration_s)
    return V15Metadata(
        context_text=_text(data.get("context_text")),
        current_turn_text=_text(data.get("current_turn_text")),
        overlap=overlap,
    )


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None
