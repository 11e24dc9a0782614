"""Omission and WER of one reply: reference = the reply's transcript from ``response.done``,
hypothesis = the ASR text of its audio, both through Whisper's English normalizer
(``whisper_normalizer.english.EnglishTextNormalizer``) and aligned with ``jiwer.process_words``.

An omitted word is a reference word the alignment deletes; a swallowed syllable that ASR
hears as another word is a substitution and shows up in the WER (S + D + I over reference
words) only. A reply whose normalized reference is empty has no words to compare.
"""

from __future__ import annotations

from functools import lru_cache

from fdb.records.listening import WordCounts


@lru_cache(maxsize=1)
def _normalizer():
    from whisper_normalizer.english import EnglishTextNormalizer

    return EnglishTextNormalizer()


def normalize(text: str | None) -> str:
    return " ".join(_normalizer()(text or "").split())


def align(reference: str | None, hypothesis: str | None) -> WordCounts | None:
    """Counts of the alignment; None when the normalized reference has no words."""
    ref, hyp = normalize(reference), normalize(hypothesis)
    n = len(ref.split())
    if n == 0:
        return None
    if not hyp:
        return WordCounts(reference_words=n, hits=0, substitutions=0, deletions=n, insertions=0)
    import jiwer

    out = jiwer.process_words(ref, hyp)
    return WordCounts(reference_words=n, hits=out.hits, substitutions=out.substitutions,
                      deletions=out.deletions, insertions=out.insertions)
