"""Acceptance: each listening metric moves for its own defect on synthetic Piper replies
(Whisper tiny.en ASR, DNSMOS via speechmos, resemblyzer), and little for the other two.

One repeat, one category per condition: user_interruption = clean replies, user_backchannel =
middle 40% removed, talking_to_other = 10 clicks per second, background_speech = +4 semitones.
"""

from __future__ import annotations

import pytest

from benchmarks.support.listening_build import (
    OUT_RATE,
    add_clicks,
    cut_middle,
    pitch_up,
    write_session,
)

pytest.importorskip("piper")
pytest.importorskip("speechmos")
pytest.importorskip("resemblyzer")
pytest.importorskip("librosa")

TEXTS = [
    "The weather today is mild, with a light breeze from the west and a few clouds later in the "
    "afternoon.",
    "To make a good cup of tea, warm the pot first, then let the leaves steep for about four "
    "minutes.",
    "The library opens at nine in the morning and closes at six, "
    "except on Sundays when it stays closed.",
]
CONDITIONS = {
    "user_interruption": lambda a: a,
    "user_backchannel": cut_middle,
    "talking_to_other": lambda a: add_clicks(a, OUT_RATE),
    "background_speech": lambda a: pitch_up(a, OUT_RATE),
}


@pytest.fixture(scope="module")
def groups(tmp_path_factory):
    from fdb.audio import resample
    from fdb.models.tts import PiperTts
    from scorers.listening import score_listening

    tts = PiperTts(deterministic=True)
    base = [resample(tts.synthesize(t), tts.rate, OUT_RATE) for t in TEXTS]
    root = tmp_path_factory.mktemp("listen") / "repeat-1"
    for category, defect in CONDITIONS.items():
        for i, (audio, text) in enumerate(zip(base, TEXTS, strict=True)):
            write_session(
                root / "recording/shard-0" / category / str(i + 1) / "overlap",
                [{"id": f"r{i}", "audio": defect(audio), "t": 1.0, "transcript": text}],
            )
    summary = score_listening(root)
    assert summary.backends["mos"]["name"] == "dnsmos-ovrl"
    assert summary.backends["speaker"]["name"] == "resemblyzer-ge2e"
    return summary.datasets["v1.5"]


def test_cut_raises_omission_sharply(groups):
    clean, cut = groups["user_interruption"], groups["user_backchannel"]
    assert clean.omission_rate <= 0.05
    assert cut.omission_rate >= clean.omission_rate + 0.2
    for other in ("talking_to_other", "background_speech"):
        assert abs(groups[other].omission_rate - clean.omission_rate) <= 0.05


def test_clicks_lower_mos(groups):
    clean = groups["user_interruption"].mos_mean
    assert groups["talking_to_other"].mos_mean <= clean - 0.5
    assert abs(groups["user_backchannel"].mos_mean - clean) <= 0.3  # the cut leaves a splice only


def test_pitch_shift_lowers_voice_similarity(groups):
    clean = groups["user_interruption"].voice_mean
    assert groups["background_speech"].voice_mean <= clean - 8
    for other in ("user_backchannel", "talking_to_other"):
        assert abs(groups[other].voice_mean - clean) <= 4
