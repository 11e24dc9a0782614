"""Protocol dialects: one ``Dialect`` record per /v1/realtime dialect (its audio formats, events,
session shape, end, playout cut rules, response rules, turn detection and client behaviour), and
their registry. Recorders, the protocol oracle, export, conformance and the scorers read a
session's behaviour from its dialect; a profile (``--profile``, session.json's ``profile``)
names one.

- :mod:`fdb.dialects.model`: the record and its parts;
- :mod:`fdb.dialects.shapes`: the session object's GA and beta shapes;
- :mod:`fdb.dialects.catalog`: the dialects fdb speaks and the registry.
"""

from fdb.dialects.catalog import (
    BUNDLED_ALSO_SPEAKS,
    BUNDLED_SYSTEM_DIALECTS,
    BY_TRACE_FORMAT,
    DIALECTS,
    LEGACY,
    NATIVE,
    NATIVE_80,
    OPENAI_BETA,
    OPENAI_GA,
    TURN_BASED,
    check_bundled_dialect,
    dialect_for_trace_format,
    dialects_help,
    get_dialect,
)
from fdb.dialects.model import ALL, CutRule, Dialect

__all__ = [
    "ALL",
    "BUNDLED_ALSO_SPEAKS",
    "BUNDLED_SYSTEM_DIALECTS",
    "BY_TRACE_FORMAT",
    "DIALECTS",
    "LEGACY",
    "NATIVE",
    "NATIVE_80",
    "OPENAI_BETA",
    "OPENAI_GA",
    "TURN_BASED",
    "CutRule",
    "Dialect",
    "check_bundled_dialect",
    "dialect_for_trace_format",
    "dialects_help",
    "get_dialect",
]
