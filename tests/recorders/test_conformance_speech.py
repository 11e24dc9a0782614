"""The battery's default question: spoken by fdb's Piper voice, cached under $FDB_WORK by a key of
the text and voice, and the same bytes every time it is synthesized."""

from __future__ import annotations

from recorders.conformance_speech import (
    QUESTION_TEXT,
    cache_path,
    padded,
    speech_span,
    spoken_question,
    trimmed,
)


def test_the_spoken_question_is_synthesized_once_and_deterministically(tmp_path, monkeypatch):
    monkeypatch.setenv("FDB_WORK", str(tmp_path))
    path = cache_path()
    assert path.parent == tmp_path / "cache" / "conformance" and not path.exists()
    first = spoken_question()
    data = path.read_bytes()
    assert (
        spoken_question().samples.tobytes() == first.samples.tobytes()
    )  # read back from the cache
    path.unlink()
    spoken_question()
    assert path.read_bytes() == data  # synthesized again: the same bytes
    assert cache_path("Another question?") != path
    start, end = speech_span(first)
    assert 0.8 < end - start < 3.0 and QUESTION_TEXT.endswith("?")


def test_trim_and_pad_give_exact_silences(tmp_path, monkeypatch):
    monkeypatch.setenv("FDB_WORK", str(tmp_path))
    speech = trimmed(spoken_question())
    assert speech_span(speech)[0] == 0.0
    audio = padded(speech, 24000, 0.5, 2.0)
    assert audio.rate == 24000 and abs(audio.duration_s - (speech.duration_s + 2.5)) < 0.001
    assert not audio.samples[:12000].any() and not audio.samples[-48000:].any()
