"""The recorder against the real bundled server (embedded cascade): a Piper-spoken question is
recorded with a passing verdict, reply audio arrives, and the export window has the input's
exact length."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from fdb.audio import Audio, read_wav, write_wav
from fdb.datasets.types import V10Sample
from fdb.session_records import read_trace
from recorders.export import export_v10
from recorders.session import record_session

pytestmark = pytest.mark.slow

QUESTION = "What is the capital of France? Please answer in one short sentence."
TD = {"type": "server_vad", "silence_duration_ms": 500}


@pytest.fixture(scope="module")
def question() -> Audio:
    from fdb.models.tts import PiperTts

    tts = PiperTts(deterministic=True)
    speech = tts.synthesize(QUESTION)
    pause = np.zeros(int(3.0 * tts.rate), dtype=np.float32)  # room for the reply inside [0, T]
    return Audio(np.concatenate([speech, pause]), tts.rate)


def test_real_server_session_and_export(tmp_path, server_url, question):
    subset, sid = "synthetic_pause_handling", "1"
    dataset = tmp_path / "dataset" / subset / sid
    write_wav(dataset / "input.wav", question.samples, question.rate)
    source = read_wav(dataset / "input.wav")
    session_dir = tmp_path / "recording" / subset / sid / "main"
    rec = asyncio.run(
        record_session(
            server_url,
            source,
            session_dir,
            sample_id=f"{subset}/{sid}",
            variant="main",
            profile="turn-based",
            turn_detection=TD,
            timeout_s=60.0,
        )
    )
    assert rec.status == "ok", rec.failure
    assert rec.verdict.status == "pass", rec.verdict.violations
    assert rec.pacing.violations == 0 and rec.close_code == 1000
    assert rec.turn_detection_granted["type"] == "server_vad"
    assert rec.responses.created >= 1 and rec.responses.output_bytes > 0

    sample = V10Sample(
        subset=subset,
        id=sid,
        task="pause_handling",
        dir=dataset,
        input_wav=dataset / "input.wav",
        annotation=None,
        rate=source.rate,
        duration_s=source.duration_s,
    )
    manifest = export_v10([tmp_path / "recording"], [sample], tmp_path / "reference")
    row = manifest.samples[0]
    assert row.eligible, row.reasons
    window = read_wav(tmp_path / "reference" / subset / sid / "output.wav")
    assert window.rate == 16000 and len(window.samples) == row.input_samples == rec.input.samples
    first_audio = min(
        e.t
        for e in read_trace(session_dir / "trace.jsonl")
        if e.type == "response.output_audio.delta"
    )
    if first_audio < row.T_s - 0.2:  # the reply started inside the window: it must be heard there
        assert np.abs(window.samples).max() > 0.05


def test_recording_twice_passes_and_exports_deterministically(tmp_path, server_url, question):
    """Acceptance: the same input recorded twice gives pass verdicts and eligible exports; exporting
    the same traces again reproduces every byte."""
    subset = "synthetic_pause_handling"
    samples = []
    for sid in ("a", "b"):
        dataset = tmp_path / "dataset" / subset / sid
        write_wav(dataset / "input.wav", question.samples, question.rate)
        source = read_wav(dataset / "input.wav")
        rec = asyncio.run(
            record_session(
                server_url,
                source,
                tmp_path / "recording" / subset / sid / "main",
                sample_id=f"{subset}/{sid}",
                variant="main",
                profile="turn-based",
                turn_detection=TD,
                timeout_s=60.0,
            )
        )
        assert rec.status == "ok" and rec.verdict.status == "pass", (
            rec.failure,
            rec.verdict.violations,
        )
        assert rec.loop_lag.ticks > 0 and rec.pacing.violations == 0
        samples.append(
            V10Sample(
                subset=subset,
                id=sid,
                task="pause_handling",
                dir=dataset,
                input_wav=dataset / "input.wav",
                annotation=None,
                rate=source.rate,
                duration_s=source.duration_s,
            )
        )
    out = tmp_path / "reference"
    first = export_v10([tmp_path / "recording"], samples, out)
    assert all(row.eligible for row in first.samples), [row.reasons for row in first.samples]
    wavs = {sid: (out / subset / sid / "output.wav").read_bytes() for sid in ("a", "b")}
    again = export_v10([tmp_path / "recording"], samples, out)
    assert {sid: (out / subset / sid / "output.wav").read_bytes() for sid in ("a", "b")} == wavs
    assert [r.files for r in again.samples] == [r.files for r in first.samples]
