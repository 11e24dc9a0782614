"""Text normalization and word alignment: the WER vocabulary of the listening scores and the
Seed-TTS quality scores.

- ``english_normalize``: Whisper's English normalizer
  (``whisper_normalizer.english.EnglishTextNormalizer``), tokens separated by single spaces;
  the listening scores' rule.
- ``seed_tts_normalize``: the official Seed-TTS ``run_wer.py`` rule: remove every character of
  ``string.punctuation`` and of Chinese punctuation (zhon's ``hanzi.punctuation``) except the
  ASCII apostrophe; EN is lower-cased; ZH is split into characters.
- ``align_words``: ``jiwer.process_words`` on two normalized texts; an empty hypothesis is all
  deletions, an empty reference has nothing to align (None). WER = (S + D + I) / reference words.
"""

from __future__ import annotations

import string
from functools import lru_cache
from typing import NamedTuple

import jiwer
from whisper_normalizer.english import EnglishTextNormalizer

# zhon.hanzi.punctuation (zhon 2.x): non-stops then stops
HANZI_PUNCTUATION = (
    "＂＃＄％＆＇（）＊＋，－／：；＜＝＞＠［＼］＾＿｀｛｜｝～｟｠｢｣､\u3000、〃〈〉《》「」『』【】〔〕〖〗"
    "〘〙〚〛〜〝〞〟〰〾〿–—‘’‛“”„‟…‧﹏﹑﹔·！？｡。"
)
_DROP = {ord(ch): None for ch in set(string.punctuation + HANZI_PUNCTUATION) - {"'"}}


@lru_cache(maxsize=1)
def _english_normalizer():
    return EnglishTextNormalizer()


def english_normalize(text: str | None) -> str:
    """Whisper's English normalization; tokens separated by single spaces."""
    return " ".join(_english_normalizer()(text or "").split())


def seed_tts_normalize(text: str, lang: str) -> str:
    """The official Seed-TTS normalization; tokens separated by single spaces."""
    stripped = text.translate(_DROP)
    if lang == "zh":
        return " ".join(ch for ch in stripped if not ch.isspace())
    return " ".join(stripped.lower().split())


class Alignment(NamedTuple):
    reference_words: int
    hits: int
    substitutions: int
    deletions: int
    insertions: int


def align_words(reference: str, hypothesis: str) -> Alignment | None:
    """Counts of the word alignment of two normalized texts; None when the reference has no
    words."""
    n = len(reference.split())
    if n == 0:
        return None
    if not hypothesis:
        return Alignment(reference_words=n, hits=0, substitutions=0, deletions=n, insertions=0)

    out = jiwer.process_words(reference, hypothesis)
    return Alignment(
        reference_words=n,
        hits=out.hits,
        substitutions=out.substitutions,
        deletions=out.deletions,
        insertions=out.insertions,
    )
