"""Numbers written out as English words, the way a forced aligner reads them (openai_speech).

- a year (a lone 1100 to 2099) as two pairs: 1999 "nineteen ninety nine", 2024 "twenty twenty
  four", 1900 "nineteen hundred", 2000 "two thousand", 2007 "two thousand seven";
- spaced or dashed digit groups (a phone number such as 555 010 4477) digit by digit;
- a decimal with "point" and its digits one by one: 3.14 "three point one four";
- an ordinal: 21st "twenty first", 3rd "third";
- any other integer (commas allowed: 1,500) as a cardinal: "one thousand five hundred".

Words are joined by spaces (no hyphens). Text without digits comes back unchanged.
"""

from __future__ import annotations

import re

_ONES = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen"
).split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
_SCALES = ((10**12, "trillion"), (10**9, "billion"), (10**6, "million"), (1000, "thousand"))
_ORDINAL = {
    "one": "first",
    "two": "second",
    "three": "third",
    "five": "fifth",
    "eight": "eighth",
    "nine": "ninth",
    "twelve": "twelfth",
}
_NUMBER = re.compile(
    r"(?P<groups>\b\d{2,}(?:[ -]\d{2,})+\b)"  # spaced or dashed digit groups
    r"|(?P<decimal>\b\d+\.\d+\b)"
    r"|(?P<ordinal>\b\d+(?:st|nd|rd|th)\b)"
    r"|(?P<integer>\b\d{1,3}(?:,\d{3})+\b|\b\d+\b)"
)


def cardinal(n: int) -> str:
    """0 <= n < 10**15 in words."""
    if n < 20:
        return _ONES[n]
    if n < 100:
        return _TENS[n // 10] + ("" if n % 10 == 0 else " " + _ONES[n % 10])
    if n < 1000:
        return _ONES[n // 100] + " hundred" + ("" if n % 100 == 0 else " " + cardinal(n % 100))
    for scale, name in _SCALES:
        if n >= scale:
            rest = n % scale
            return cardinal(n // scale) + " " + name + ("" if rest == 0 else " " + cardinal(rest))
    raise AssertionError(n)


def _year(n: int) -> str:
    high, low = divmod(n, 100)
    if 2000 <= n <= 2009:
        return cardinal(n)
    if low == 0:
        return cardinal(high) + " hundred"
    return cardinal(high) + (" oh " + _ONES[low] if low < 10 else " " + cardinal(low))


def _ordinal(n: int) -> str:
    words = cardinal(n).split()
    last = words[-1]
    if last in _ORDINAL:
        words[-1] = _ORDINAL[last]
    elif last.endswith("y"):
        words[-1] = last[:-1] + "ieth"
    else:
        words[-1] = last + "th"
    return " ".join(words)


def _digits(text: str) -> str:
    return " ".join(_ONES[int(d)] for d in text if d.isdigit())


def _words(match: re.Match[str]) -> str:
    kind, text = match.lastgroup, match.group()
    if kind == "groups":
        return _digits(text)
    if kind == "decimal":
        whole, fraction = text.split(".")
        return f"{cardinal(int(whole))} point {_digits(fraction)}"
    if kind == "ordinal":
        return _ordinal(int(text[:-2]))
    n = int(text.replace(",", ""))
    if n >= 10**15:
        return _digits(text)
    if "," not in text and len(text) == 4 and 1100 <= n <= 2099:
        return _year(n)
    return cardinal(n)


def spoken_numbers(text: str) -> str:
    """``text`` with every number written out as English words."""
    return _NUMBER.sub(_words, text)
