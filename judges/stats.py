"""Label shares with their Wilson 95% intervals (``fdb.stats.wilson``; z is the standard
library's Phi^-1(0.975), ``fdb.stats.WILSON_Z_NORMALDIST``)."""

from __future__ import annotations

from fdb.records.judge import Share
from fdb.stats import WILSON_Z_NORMALDIST, wilson


def share(count: int, n: int) -> Share:
    return Share(
        count=count, share=count / n if n else None, ci95=wilson(count, n, WILSON_Z_NORMALDIST)
    )
