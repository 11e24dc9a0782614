"""Omission and WER of one reply: reference = the reply's transcript from ``response.done``,
hypothesis = the ASR text of its audio, both through Whisper's English normalizer
(``fdb.text.english_normalize``) and aligned with ``jiwer.process_words``
(``fdb.text.align_words``).

An omitted word is a reference word the alignment deletes; a swallowed syllable that ASR
hears as another word is a substitution and shows up in the WER (S + D + I over reference
words) only. A reply whose normalized reference is empty has no words to compare.
"""

from __future__ import annotations

from fdb.records.listening import WordCounts
from fdb.text import align_words, english_normalize


def align(reference: str | None, hypothesis: str | None) -> WordCounts | None:
    """Counts of the alignment; None when the normalized reference has no words."""
    counts = align_words(english_normalize(reference), english_normalize(hypothesis))
    return None if counts is None else WordCounts(**counts._asdict())
