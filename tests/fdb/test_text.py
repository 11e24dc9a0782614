"""Text normalization (Whisper's English rule, the official Seed-TTS rule) and word alignment."""

from __future__ import annotations

from fdb.text import Alignment, align_words, english_normalize, seed_tts_normalize


def test_seed_tts_normalization_as_run_wer():
    assert (
        seed_tts_normalize("Hello, World! It's 5 o'clock; well-known.", "en")
        == "hello world it's 5 o'clock wellknown"
    )
    assert seed_tts_normalize("  Spaces   and\ttabs ", "en") == "spaces and tabs"
    assert seed_tts_normalize("你好，世界！「测试」", "zh") == "你 好 世 界 测 试"
    assert seed_tts_normalize("Ｈｉ—there…", "en") == "ｈｉthere"  # zhon punctuation goes in EN too


def test_english_normalization_single_spaces():
    assert english_normalize(None) == ""
    assert english_normalize("  Hello,   Mr. Smith! ") == "hello mister smith"


def test_align_words_counts():
    assert align_words("", "anything") is None
    assert align_words("red green blue", "") == Alignment(3, 0, 0, 3, 0)
    assert align_words("the cat sat", "the bat sat on") == Alignment(3, 2, 1, 0, 1)
