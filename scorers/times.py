"""Exact time arithmetic for the unified v1.0 metrics.

Rulings 1 and 2 (``unified-v10-rulings.md``): every input time is rounded with Python's
``round(x, 6)`` and derived durations are exact on the rounded times. Times are therefore held
as integer microseconds; seconds are produced only for output.
"""

from __future__ import annotations

import math

US_PER_S = 1_000_000


def to_us(seconds: float) -> int:
    """``round(x, 6)`` (ruling 1) as an exact integer count of microseconds (ruling 2)."""
    value = float(seconds)
    if not math.isfinite(value):
        raise ValueError(f"time {seconds!r} is not finite")
    return round(round(value, 6) * US_PER_S)


def to_s(us: int | float) -> float:
    """Seconds from integer microseconds (the float nearest the exact decimal)."""
    return int(us) / US_PER_S
