"""Dataset inputs that must be refused before they become numbers (#25 defect 8): a WAV cut
shorter than its header says, an input longer than the session deadline, an input too short
to score, a float WAV holding NaN; and the WAV shapes that are fine (stereo, 8-bit, other rates,
a streaming header) stay fine."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from rich.console import Console

from fdb.audio import read_wav, riff_data_frames, write_wav
from fdb.datasets.official import load_v10, load_v15
from fdb.datasets.types import V10Sample
from fdb.errors import SampleError
from fdb.settings import MAX_SESSION_TIMEOUT_S, load_settings
from recorders.export import MIN_SCORABLE_INPUT_S, TOO_SHORT_REASON, export_v10, export_v15
from tests.recorders.recorder_fakes import Reply
from tests.recorders.test_recorder_export import make_input, record_fake, v15_pair

SUBSET = "icc_backchannel"  # no annotation: the input alone makes the sample


def backchannel_tree(root: Path, seconds: float = 3.0, sample: str = "1") -> Path:
    folder = root / "v1.0" / SUBSET / sample
    folder.mkdir(parents=True)
    sf.write(
        folder / "input.wav",
        0.1 * np.ones(int(16000 * seconds), np.float32),
        16000,
        subtype="PCM_16",
    )
    return folder / "input.wav"


def cut(path: Path, seconds: float, rate: int = 16000, frame_bytes: int = 2) -> None:
    """Truncate a WAV's data by ``seconds`` without touching its header (an interrupted copy)."""
    with path.open("r+b") as handle:
        handle.truncate(path.stat().st_size - int(seconds * rate) * frame_bytes)


def long_wav(path: Path, seconds: float, rate: int = 16000) -> Path:
    """A complete PCM16 mono WAV of silence, written sparse (a 20-minute input costs no disk)."""
    data = int(seconds * rate) * 2
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as handle:
        handle.write(b"RIFF" + struct.pack("<I", 36 + data) + b"WAVE")
        handle.write(b"fmt " + struct.pack("<IHHIIHH", 16, 1, 1, rate, 2 * rate, 2, 16))
        handle.write(b"data" + struct.pack("<I", data))
        handle.truncate(44 + data)
    return path


# ------------------------------------------------------------------ truncated WAV


def test_truncated_wav_is_refused_by_read_wav(tmp_path):
    wav = backchannel_tree(tmp_path)
    assert len(read_wav(wav).samples) == 48000
    cut(wav, 2.0)
    assert sf.info(str(wav)).frames == 16000  # libsndfile reads the shorter file without a word
    with pytest.raises(SampleError) as err:
        read_wav(wav, "icc_backchannel/1")
    assert err.value.one_line() == (
        f"icc_backchannel/1: {wav}: truncated WAV: its header declares 48000 frames (3.000 s) but "
        "the file holds 16000 (1.000 s) (the file is cut short (an interrupted copy or download?): "
        "replace it with the complete file)"
    )


def test_truncated_dataset_input_is_a_per_sample_problem(tmp_path):
    wav = backchannel_tree(tmp_path)
    backchannel_tree(tmp_path, sample="2")
    cut(wav, 2.0)
    with pytest.raises(SampleError, match="truncated WAV") as err:
        load_v10(tmp_path / "v1.0")
    assert err.value.sample == f"{SUBSET}/1" and err.value.path == str(wav)
    assert (
        "python -m fdb setup" in err.value.hint and "python -m fdb dataset synth" in err.value.hint
    )
    loaded, problems = load_v10(tmp_path / "v1.0", strict=False)
    assert [s.id for s in loaded[SUBSET]] == ["2"]
    (problem,) = problems
    assert problem.one_line() == (
        f"{SUBSET}/1: {wav}: truncated WAV: its header declares 48000 frames (3.000 s) but the "
        "file holds 16000 (1.000 s) (restore input.wav from the official archive and rerun "
        "`python -m fdb setup` (fdb's synthetic set: rerun `python -m fdb dataset synth`))"
    )


def test_truncated_clean_input_of_a_v15_pair(tmp_path):
    pair = tmp_path / "v1.5" / "user_backchannel" / "1"
    pair.mkdir(parents=True)
    for name in ("input.wav", "clean_input.wav"):
        sf.write(pair / name, np.zeros(48000, np.int16), 16000, subtype="PCM_16")
    (pair / "metadata.json").write_text(json.dumps({"timestamps": [1.0, 1.5]}))
    cut(pair / "clean_input.wav", 0.5)
    _, problems = load_v15(tmp_path / "v1.5", strict=False)
    assert (
        problems[0].path == str(pair / "clean_input.wav") and "truncated WAV" in problems[0].message
    )


def test_generate_reports_a_broken_sample_and_records_the_others(tmp_path, monkeypatch):
    from runs.generate import _print_selection, select_dataset
    from runs.options import DatasetChoice

    wav = backchannel_tree(tmp_path)
    backchannel_tree(tmp_path, sample="2")
    cut(wav, 2.0)
    monkeypatch.setenv("FDB_WORK", str(tmp_path / "work"))
    console = Console(record=True, width=400)
    chosen = select_dataset("v1.0", DatasetChoice(), tmp_path / "v1.0", load_settings(), console)
    assert chosen.ids == [f"{SUBSET}/1", f"{SUBSET}/2"] and [s.id for s in chosen.samples] == ["2"]
    _print_selection([chosen], console)
    assert (
        f"WARNING: not recorded, the dataset sample is broken: {SUBSET}/1: {wav}: truncated WAV: "
        "its header declares 48000 frames"
    ) in console.export_text()


# ------------------------------------------------------------------ over the session cap


def test_twenty_minute_input_is_refused_before_recording(tmp_path):
    wav = long_wav(tmp_path / "v1.0" / SUBSET / "1" / "input.wav", 20 * 60)
    backchannel_tree(tmp_path, sample="2")
    loaded, problems = load_v10(tmp_path / "v1.0", strict=False)
    assert [s.id for s in loaded[SUBSET]] == ["2"]
    assert problems[0].one_line() == (
        f"{SUBSET}/1: {wav}: input is 1200.000 s long, not shorter than the 230 s session deadline "
        "(V10_SESSION_TIMEOUT_S): its session could never finish (drop the sample from the "
        "selection: sessions are capped at 230 s, so it cannot be recorded)"
    )


def test_input_over_a_raised_deadline_says_how_far_it_may_go(tmp_path, monkeypatch):
    from runs.generate import select_dataset
    from runs.options import DatasetChoice

    wav = long_wav(tmp_path / "v1.0" / SUBSET / "1" / "input.wav", 100)
    assert load_v10(tmp_path / "v1.0")[SUBSET][0].duration_s == 100  # under the 230 s cap: loads
    monkeypatch.setenv("FDB_WORK", str(tmp_path / "work"))
    monkeypatch.setenv("V10_SESSION_TIMEOUT_S", "90")
    chosen = select_dataset(
        "v1.0", DatasetChoice(), tmp_path / "v1.0", load_settings(), Console(quiet=True)
    )
    assert chosen.samples == []
    assert chosen.problems == [
        f"{SUBSET}/1: {wav}: input is 100.000 s long, not shorter than the 90 s session deadline "
        "(V10_SESSION_TIMEOUT_S): its session could never finish (drop the sample from the "
        "selection, or raise V10_SESSION_TIMEOUT_S above 100 s "
        f"(it may go up to {MAX_SESSION_TIMEOUT_S:g} s))"
    ]


def test_v15_pair_over_its_deadline(tmp_path):
    pair = tmp_path / "v1.5" / "user_backchannel" / "1"
    long_wav(pair / "input.wav", 95)
    long_wav(pair / "clean_input.wav", 5)
    (pair / "metadata.json").write_text(json.dumps({"timestamps": [1.0, 1.5]}))
    assert load_v15(tmp_path / "v1.5")["user_backchannel"][0].duration_s == 95
    _, problems = load_v15(tmp_path / "v1.5", strict=False, max_input_s=90.0)
    assert "not shorter than the 90 s session deadline (SESSION_TIMEOUT_S)" in problems[0].message
    assert "raise SESSION_TIMEOUT_S above 95 s" in problems[0].hint


# ------------------------------------------------------------------ too short to score


def short_sample(root: Path, seconds: float, id_: str) -> V10Sample:
    folder = root / SUBSET / id_
    wav = make_input(folder / "input.wav", seconds=seconds, freq=300 + int(id_))
    return V10Sample(
        subset=SUBSET,
        id=id_,
        task="backchannel",
        dir=folder,
        input_wav=wav,
        annotation=None,
        rate=16000,
        duration_s=seconds,
    )


def test_sample_too_short_to_score_is_ineligible_with_a_named_reason(tmp_path):
    data, rec = tmp_path / "dataset", tmp_path / "recording"
    samples = [
        short_sample(data, 0.1, "1"),
        short_sample(data, 1.0, "2"),
    ]  # 1.0 s: just long enough
    for sample in samples:
        record_fake(rec, f"{SUBSET}/{sample.id}/main", sample.input_wav, replies=())
    manifest = export_v10([rec], samples, tmp_path / "out")
    short, enough = manifest.samples
    assert not short.eligible and short.reasons == [TOO_SHORT_REASON] and short.verdict == "pass"
    assert TOO_SHORT_REASON == "too_short: input shorter than 1 s, too short to score"
    assert short.T_s == 0.1 and not (tmp_path / "out" / SUBSET / "1").exists()
    assert enough.eligible and enough.reasons == []
    assert MIN_SCORABLE_INPUT_S == 1.0


def test_v15_pair_with_a_too_short_clean_input(tmp_path):
    data, rec = tmp_path / "dataset", tmp_path / "recording"
    pair = v15_pair(data, "user_interruption", "1")
    make_input(pair.clean_input_wav, seconds=0.5, rate=24000, freq=350)
    pair = pair.model_copy(update={"clean_duration_s": 0.5})
    for variant, wav in (("overlap", pair.input_wav), ("clean", pair.clean_input_wav)):
        record_fake(rec, f"user_interruption/1/{variant}", wav, replies=(Reply(at=0.2),))
    (row,) = export_v15([rec], [pair], tmp_path / "out").samples
    assert not row.eligible and row.reasons == [f"clean: {TOO_SHORT_REASON}"]


# ------------------------------------------------------------------ other WAV shapes


def test_float_wav_with_nan_is_refused_and_its_sample_is_ineligible(tmp_path):
    data, rec = tmp_path / "dataset", tmp_path / "recording"
    sample = short_sample(data, 2.0, "1")
    record_fake(rec, f"{SUBSET}/1/main", sample.input_wav, replies=())
    samples = 0.1 * np.ones(32000, np.float32)
    samples[100] = np.nan
    sf.write(sample.input_wav, samples, 16000, subtype="FLOAT")
    with pytest.raises(SampleError, match="WAV holds NaN or infinite samples") as err:
        read_wav(sample.input_wav, sample.sample_id)
    assert err.value.path == str(sample.input_wav) and err.value.hint
    (row,) = export_v10([rec], [sample], tmp_path / "out").samples
    assert not row.eligible and row.reasons[0].startswith(
        f"dataset: {SUBSET}/1: {sample.input_wav}: WAV holds NaN"
    )


def test_float_dataset_input_with_nan_is_refused_at_load(tmp_path):
    wav = backchannel_tree(tmp_path)
    samples = 0.1 * np.ones(48000, np.float32)
    samples[-1] = np.inf
    sf.write(wav, samples, 16000, subtype="FLOAT")
    _, problems = load_v10(tmp_path / "v1.0", strict=False)
    assert (
        problems[0].path == str(wav) and problems[0].message == "WAV holds NaN or infinite samples"
    )
    assert "python -m fdb setup" in problems[0].hint
    sf.write(wav, samples[:-1], 16000, subtype="FLOAT")  # a finite float WAV loads
    assert load_v10(tmp_path / "v1.0")[SUBSET][0].duration_s == 47999 / 16000


def test_empty_wav_is_a_per_sample_problem(tmp_path):
    wav = backchannel_tree(tmp_path, seconds=0)
    _, problems = load_v10(tmp_path / "v1.0", strict=False)
    assert problems[0].path == str(wav) and problems[0].message == "WAV holds no samples"
    with pytest.raises(SampleError, match="WAV holds no samples"):
        read_wav(wav)


@pytest.mark.parametrize(
    "subtype, channels, rate",
    [("PCM_U8", 2, 16000), ("PCM_24", 1, 48000), ("FLOAT", 2, 8000), ("PCM_16", 1, 44100)],
)
def test_other_wav_shapes_are_read_whole(tmp_path, subtype, channels, rate):
    n = rate * 2
    left = 0.25 * np.ones(n)
    audio = np.stack([left, 0.5 * np.ones(n)], axis=1) if channels == 2 else left
    path = tmp_path / "x.wav"
    sf.write(path, audio, rate, subtype=subtype)
    out = read_wav(path)
    assert out.rate == rate and len(out.samples) == n
    want = 0.375 if channels == 2 else 0.25  # channels are averaged
    assert np.allclose(out.samples, want, atol=1 / 100)
    assert riff_data_frames(path)[:2] == (n, n)


def test_streaming_header_with_an_open_length_is_not_called_truncated(tmp_path):
    path = write_wav(tmp_path / "x.wav", 0.1 * np.ones(16000, np.float32), 16000)
    raw = bytearray(path.read_bytes())
    data_at = raw.index(b"data")
    raw[data_at + 4 : data_at + 8] = struct.pack(
        "<I", 0xFFFFFFFF
    )  # as a writer to a pipe leaves it
    path.write_bytes(bytes(raw))
    assert riff_data_frames(path) is None
    assert len(read_wav(path).samples) == 16000
    os.truncate(path, 44 + 16000)  # and a plain cut of a complete file is caught again
    raw = bytearray(path.read_bytes())
    raw[data_at + 4 : data_at + 8] = struct.pack("<I", 32000)
    path.write_bytes(bytes(raw))
    assert riff_data_frames(path) == (16000, 8000, 16000)
