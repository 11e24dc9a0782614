"""Export: windows of eligible sessions, reasons for the others, deterministic bytes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fdb.audio import read_wav, write_wav
from fdb.datasets.types import V10Sample, V15Pair
from fdb.errors import FdbError
from fdb.io import sha256_file
from recorders.export import EXPORT_MARKER, export_v10, export_v15
from recorders.variant import dataset_input
from tests.recorders.recorder_fakes import Reply, good_trace, write_session

SUBSET = "synthetic_pause_handling"


def make_input(path: Path, seconds: float = 1.0, rate: int = 16000, freq: float = 300.0) -> Path:
    t = np.arange(int(seconds * rate)) / rate
    write_wav(path, (0.2 * np.sin(2 * np.pi * freq * t)).astype(np.float32), rate)
    return path


def v10_sample(root: Path, id_: str, subset: str = SUBSET) -> V10Sample:
    folder = root / subset / id_
    wav = make_input(folder / "input.wav", freq=200 + 10 * int(id_))
    annotation = None
    if subset == SUBSET:
        annotation = folder / "pause.json"
        annotation.write_text(json.dumps([{"timestamp": [0.2, 0.5]}]))
    task = "pause_handling" if subset == SUBSET else "backchannel"
    return V10Sample(
        subset=subset,
        id=id_,
        task=task,
        dir=folder,
        input_wav=wav,
        annotation=annotation,
        rate=16000,
        duration_s=1.0,
    )


def record_fake(
    rec_root: Path,
    rel: str,
    input_wav: Path,
    *,
    pcm: bytes | None = None,
    drop: str | None = None,
    status: str = "ok",
    **trace_kwargs,
) -> Path:
    out = rec_root / rel
    pcm = pcm if pcm is not None else dataset_input(input_wav, rel)
    events, output = good_trace(input_samples=len(pcm) // 2, **trace_kwargs)
    if drop:
        events = [e for e in events if e.type != drop]
    write_session(
        out,
        pcm,
        events,
        output,
        status=status,
        failure=None if status == "ok" else "deadline passed",
    )
    return out


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


@pytest.fixture()
def v10(tmp_path):
    data, rec = tmp_path / "dataset", tmp_path / "recording" / "shard-0"
    samples = [v10_sample(data, str(i)) for i in range(1, 9)] + [
        v10_sample(data, "9", "icc_backchannel")
    ]
    by = {s.id: s for s in samples}
    main = lambda s: f"{s.subset}/{s.id}/main"  # noqa: E731
    record_fake(rec, main(by["1"]), by["1"].input_wav)
    record_fake(rec, main(by["2"]), by["2"].input_wav, replies=(Reply(at=0.3, cancel=True),))
    record_fake(rec, main(by["3"]), by["3"].input_wav, status="timeout")
    record_fake(rec, main(by["4"]), by["4"].input_wav, late_packet=5, late_s=0.1)
    record_fake(rec, main(by["5"]), by["5"].input_wav, drop="sglang.input_audio.drained")
    record_fake(rec, main(by["6"]), by["6"].input_wav, pcm=b"\0\0" * 16000)
    # sample 7 is not recorded
    tampered = record_fake(rec, main(by["8"]), by["8"].input_wav)
    (tampered / "output.pcm").write_bytes(b"\1\0" * 10)
    record_fake(rec, main(by["9"]), by["9"].input_wav)
    return samples, [rec]


def test_v10_export_windows_and_reasons(tmp_path, v10):
    samples, recordings = v10
    out = tmp_path / "v10" / "reference"
    manifest = export_v10(recordings, samples, out)
    rows = {r.id: r for r in manifest.samples}
    assert [r.sample_id for r in manifest.samples] == [s.sample_id for s in samples]
    assert {i for i, r in rows.items() if r.eligible} == {"1", "2", "9"}
    expect = {
        "3": ("fail", "status: timeout: deadline passed"),
        "4": (
            "pass",
            "pacing: 1 of 13 packets started more than 80 ms off schedule (max 100.0 ms)",
        ),
        "5": ("fail", "protocol: end: no sglang.input_audio.drained"),
        "6": ("pass", "input: the recorded input is not the dataset input"),
        "7": ("missing", "missing: no recording"),
        "8": ("pass", "files: output.pcm differs from the recording"),
    }
    for id_, (verdict, reason) in expect.items():
        assert not rows[id_].eligible and rows[id_].verdict == verdict
        assert reason in rows[id_].reasons, rows[id_].reasons
        assert not (out / SUBSET / id_).exists()
    assert rows["2"].barge_in_cuts == 1 and rows["1"].barge_in_cuts == 0


def test_v10_eligible_folder_contents(tmp_path, v10):
    samples, recordings = v10
    out = tmp_path / "ref"
    manifest = export_v10(recordings, samples, out)
    row = manifest.samples[0]
    folder = out / SUBSET / "1"
    assert sorted(p.name for p in folder.iterdir()) == ["output.wav", "pause.json"]
    assert (folder / "pause.json").read_bytes() == samples[0].annotation.read_bytes()
    window = read_wav(folder / "output.wav")
    assert (
        window.rate == 16000
        and len(window.samples) == row.input_samples == 16000
        and row.T_s == 1.0
    )
    loud = np.abs(window.samples) > 0.05
    assert (
        loud[5000:9400].mean() > 0.5 and not loud[:4700].any() and not loud[9800:].any()
    )  # 0.3-0.6 s
    assert row.files == {
        "output.wav": sha256_file(folder / "output.wav"),
        "pause.json": sha256_file(folder / "pause.json"),
    }
    assert sorted(p.name for p in (out / "icc_backchannel" / "9").iterdir()) == ["output.wav"]
    data = json.loads((out / "manifest.json").read_text())
    assert data["schema"] == "fdb-export-1" and data["dataset"] == "v1.0"
    assert data["trace_format"] == "realtime-turn-based-pcm16-v1"


def test_v10_export_is_deterministic_and_guards_its_directory(tmp_path, v10):
    samples, recordings = v10
    a, b = tmp_path / "a", tmp_path / "b"
    export_v10(recordings, samples, a)
    export_v10(recordings, samples, b)
    assert tree_bytes(a) == tree_bytes(b)
    first = tree_bytes(a)
    export_v10(recordings, samples, a)  # a previous export of the same recordings: redone in place
    assert tree_bytes(a) == first
    with pytest.raises(FdbError, match="not empty"):
        export_v10(recordings, samples[:3], a)  # different selection, same directory
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(FdbError, match="not empty"):
        export_v10(recordings, samples, other)
    (a / SUBSET / "extra.txt").write_text("stray")
    with pytest.raises(FdbError, match="not empty"):
        export_v10(recordings, samples, a)


def test_an_interrupted_export_is_redone_in_place(tmp_path, v10):
    """A killed export leaves sample folders and its in-progress marker but no manifest; the
    next export of the same recordings redoes it, byte for byte; other recordings are refused."""
    samples, recordings = v10
    done, cut = tmp_path / "done", tmp_path / "cut"
    export_v10(recordings, samples, done)
    assert not (done / EXPORT_MARKER).exists()
    export_v10(recordings, samples, cut)
    (cut / "manifest.json").unlink()  # as if killed after the samples, before the manifest
    (cut / EXPORT_MARKER).write_text(
        json.dumps({"schema": "fdb-export-progress-1", "sources_sha256": "0" * 64, "folders": []})
    )
    with pytest.raises(FdbError, match="not empty"):  # a marker of other recordings
        export_v10(recordings, samples, cut)
    first = tree_bytes(done)
    folders = sorted((cut / SUBSET).iterdir())
    for path in folders[1:]:  # keep only a part, as a kill mid-way would
        for child in path.iterdir():
            child.unlink()
        path.rmdir()
    digest = json.loads((done / "manifest.json").read_text())["provenance"]["sources_sha256"]
    (cut / EXPORT_MARKER).write_text(
        json.dumps(
            {
                "schema": "fdb-export-progress-1",
                "sources_sha256": digest,
                "folders": [[s.subset, s.id] for s in samples],
            }
        )
    )
    export_v10(recordings, samples, cut)
    assert tree_bytes(cut) == first


def test_duplicate_recordings_are_ineligible(tmp_path, v10):
    samples, recordings = v10
    second = tmp_path / "recording" / "shard-1"
    record_fake(second, f"{SUBSET}/1/main", samples[0].input_wav)
    manifest = export_v10([*recordings, second], samples[:1], tmp_path / "out")
    row = manifest.samples[0]
    assert not row.eligible and row.reasons[0].startswith("duplicate: recorded in 2 runs")


def v15_pair(root: Path, category: str, id_: str) -> V15Pair:
    folder = root / category / id_
    make_input(folder / "input.wav", rate=24000, freq=250)
    make_input(folder / "clean_input.wav", seconds=1.2, rate=24000, freq=350)
    (folder / "metadata.json").write_text(json.dumps({"timestamps": [0.4, 0.7]}))
    return V15Pair(
        category=category,
        id=id_,
        dir=folder,
        input_wav=folder / "input.wav",
        clean_input_wav=folder / "clean_input.wav",
        metadata=folder / "metadata.json",
        rate=24000,
        duration_s=1.0,
        clean_duration_s=1.2,
        overlap=(0.4, 0.7),
    )


def test_v15_export_pairs(tmp_path):
    data, rec = tmp_path / "dataset", tmp_path / "recording"
    good, half = v15_pair(data, "user_interruption", "1"), v15_pair(data, "user_interruption", "2")
    for pair, variants in ((good, ("overlap", "clean")), (half, ("overlap",))):
        for variant in variants:
            wav = pair.input_wav if variant == "overlap" else pair.clean_input_wav
            record_fake(
                rec,
                f"{pair.category}/{pair.id}/{variant}",
                wav,
                replies=(Reply(at=0.2, cancel=True),),
            )
    out = tmp_path / "reference-audio"
    manifest = export_v15([rec], [good, half], out)
    rows = {r.id: r for r in manifest.samples}
    assert rows["1"].eligible and rows["1"].verdict == "pass" and rows["1"].barge_in_cuts == 2
    assert not rows["2"].eligible and rows["2"].verdict == "missing"
    assert (
        rows["2"].reasons == ["clean: missing: no recording"]
        and not (out / "user_interruption" / "2").exists()
    )
    folder = out / "user_interruption" / "1"
    names = ["clean_input.wav", "clean_output.wav", "input.wav", "metadata.json", "output.wav"]
    assert sorted(p.name for p in folder.iterdir()) == names and sorted(rows["1"].files) == names
    assert (
        len(read_wav(folder / "input.wav").samples)
        == len(read_wav(folder / "output.wav").samples)
        == 16000
    )
    assert (
        len(read_wav(folder / "clean_input.wav").samples)
        == len(read_wav(folder / "clean_output.wav").samples)
        == 19200
    )
    assert read_wav(folder / "input.wav").rate == 16000
    assert (folder / "metadata.json").read_bytes() == good.metadata.read_bytes()
    assert json.loads((out / "reference-manifest.json").read_text())["dataset"] == "v1.5"
    again = tmp_path / "again"
    export_v15([rec], [good, half], again)
    assert tree_bytes(out) == tree_bytes(again)
