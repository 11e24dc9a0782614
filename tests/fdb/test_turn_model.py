"""Smart Turn v3.2 (the ONNX file inside the pipecat-ai wheel) on short Piper clips."""

from __future__ import annotations

import numpy as np
import pytest

from fdb.errors import FdbError
from fdb.models.turn import SMART_TURN_SHA256, SmartTurn, last_window, smart_turn_path


@pytest.fixture(scope="module")
def clips():
    from fdb.audio import resample
    from fdb.models.tts import PiperTts

    tts = PiperTts(deterministic=True)
    pause = np.zeros(3200, dtype=np.float32)  # the 200 ms candidate pause after the speech

    def say(text: str) -> np.ndarray:
        return np.concatenate([resample(tts.synthesize(text), tts.rate, 16000), pause])

    return {
        "complete": say("What is the capital of France?"),
        "trailing": say("I was wondering if you could tell me about the"),
    }


def test_complete_question_scores_above_a_sentence_cut_short(clips):
    """Smart Turn hears intonation more than syntax: Piper reads "What is the capital of" as a
    finished sentence (p ~ 0.9), so the incomplete clip trails off on a function word."""
    model = SmartTurn()
    assert model.identity.checkpoint_sha256 == SMART_TURN_SHA256
    complete = model.complete_probability(clips["complete"])
    trailing = model.complete_probability(clips["trailing"])
    assert complete > 0.8 > 0.2 > trailing, (complete, trailing)


def test_input_window_and_pinned_file(tmp_path):
    window = last_window(np.ones(10 * 16000, dtype=np.float32) * np.arange(10 * 16000))
    assert window.shape == (8 * 16000,) and abs(float(window.mean())) < 1e-3
    short = last_window(np.full(1600, 0.5, dtype=np.float32))
    assert (
        short.shape == (8 * 16000,) and short[0] == short[-8 * 16000 + 1000]
    )  # zero-padded at the start
    copy = tmp_path / "smart-turn.onnx"
    copy.write_bytes(smart_turn_path().read_bytes()[:-1] + b"\0")
    with pytest.raises(FdbError, match="sha256"):
        SmartTurn(copy)
