"""Each profile's export writes its own trace_format; a session of another format is ineligible."""

from __future__ import annotations

from pathlib import Path

from fdb.dialects import NATIVE, TURN_BASED
from recorders.export import export_v10
from recorders.recording import SessionOutcome, write_input_wav, write_recording
from recorders.variant import dataset_input
from tests.recorders.test_oracle_native import native_trace
from tests.recorders.test_recorder_export import v10_sample


def record_native(out_dir: Path, pcm: bytes) -> None:
    out_dir.mkdir(parents=True)
    sha = write_input_wav(out_dir, pcm, 16000)
    outcome = SessionOutcome(
        trace=native_trace(len(pcm) // 2, reply_at=0.5),
        output=bytes(9600),
        status="ok",
        failure=None,
        close_code=1000,
        close_reason=None,
        admission_denials=0,
        granted_session=None,
        t0_wall=None,
        elapsed_s=1.0,
    )
    write_recording(
        out_dir,
        outcome,
        base={"sample_id": out_dir.name, "variant": "main", "url": "ws://x", "timeout_s": 90.0},
        profile=NATIVE,
        pcm=pcm,
        source_rate=16000,
        input_wav_sha256=sha,
        turn_detection=None,
    )


def test_a_native_cohort_exports_as_realtime_pcm16_v1(tmp_path):
    sample = v10_sample(tmp_path / "dataset", "1")
    rec = tmp_path / "recording"
    record_native(rec / sample.subset / sample.id / "main", dataset_input(sample.input_wav, "x"))
    manifest = export_v10([rec], [sample], tmp_path / "out")
    assert manifest.trace_format == NATIVE.trace_format == "realtime-pcm16-v1"
    assert manifest.samples[0].eligible, manifest.samples[0].reasons
    assert manifest.provenance["policy"]["pacing_tolerance_ms"] == NATIVE.pacing.tolerance_ms
    forced = export_v10([rec], [sample], tmp_path / "out-tb", trace_format=TURN_BASED.trace_format)
    assert forced.trace_format == "realtime-turn-based-pcm16-v1"
    assert not forced.samples[0].eligible
    assert forced.samples[0].reasons[0].startswith("trace_format: recorded as realtime-pcm16-v1")


def test_nothing_recorded_gives_a_null_trace_format(tmp_path):
    sample = v10_sample(tmp_path / "dataset", "1")
    manifest = export_v10([tmp_path / "recording"], [sample], tmp_path / "out")
    assert manifest.trace_format is None and manifest.samples[0].verdict == "missing"
