"""#26: README.md's list of the recorder's ``--profile`` values is the dialect registry's own
(``fdb.dialects.DIALECTS``): a dialect added to or removed from the registry and not from the
README (or the other way) fails here, naming it."""

from __future__ import annotations

import re
from pathlib import Path

from fdb.dialects import DIALECTS

README = Path(__file__).resolve().parents[1] / "README.md"
START = "`--profile` picks the protocol dialect"
END = "`--instructions`"


def listed_profiles(text: str) -> list[str]:
    """The backticked dialect-like names (lower case, digits and dashes) of the README's
    paragraph about ``--profile``."""
    start = text.index(START)
    paragraph = text[start + len(START) : text.index(END, start)]
    return [
        n for n in re.findall(r"`([^`]+)`", paragraph) if re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)+", n)
    ]


def test_the_readmes_profiles_are_the_dialect_registrys():
    listed = listed_profiles(README.read_text(encoding="utf-8"))
    assert sorted(set(listed)) == sorted(DIALECTS), (
        f"README.md lists {sorted(set(listed) - set(DIALECTS))} that are not dialects and misses "
        f"{sorted(set(DIALECTS) - set(listed))}: fix the paragraph about --profile"
    )


def test_the_check_fails_on_a_missing_or_unknown_profile():
    text = README.read_text(encoding="utf-8")
    assert "openai-beta" in listed_profiles(text)
    dropped = text.replace("`openai-beta`", "openai beta", 1)
    assert "openai-beta" not in listed_profiles(dropped)
    added = text.replace(START, f"{START} `made-up-dialect`,", 1)
    assert "made-up-dialect" in listed_profiles(added)
