"""TTS serving metrics: exact values on hand-made records, then every metric measured through
the real client against a scripted server with known chunk timings (tolerant of a loaded host)."""

from __future__ import annotations

import pytest

from fdb.tts_records import TtsRequestRecord
from recorders.tts_client import SpeechClientOptions, replay
from scorers.tts_serving import level_row, request_metrics
from tests.recorders.tts_fakes import ScriptedServer, run, seed_items

SLACK = 0.12  # seconds of scheduling noise tolerated on a shared 2-core machine


def _record(chunks, rate=24000, **extra) -> TtsRequestRecord:
    fields = {
        "id": "u",
        "list_name": "en/meta.lst",
        "index": 0,
        "concurrency": 1,
        "status": "ok",
        "target_text": "x",
        "sample_rate": rate,
        "channels": 1,
        "chunks": chunks,
        "audio_bytes": sum(n for _, n in chunks),
        "end_s": (chunks[-1][0] + 0.01) if chunks else 0.5,
        "start_s": 0.0,
    }
    return TtsRequestRecord(**{**fields, **extra})


def test_request_metrics_exact():
    # 0.1 s at 0.2, 0.2 s at 0.3, 0.1 s at 0.8 (24 kHz mono PCM16: 4800 bytes = 0.1 s)
    m = request_metrics(_record([(0.2, 4800), (0.3, 9600), (0.8, 4800)]))
    assert m.ttfa_s == 0.2 and m.last_audio_s == 0.8 and m.e2e_s == pytest.approx(0.81)
    assert m.audio_s == pytest.approx(0.4) and m.rtf == pytest.approx(2.0)
    assert m.gaps_s == pytest.approx([0.1, 0.5]) and m.max_gap_s == pytest.approx(0.5)
    # playback from 0.2: chunk 3 is due at 0.2 + 0.3 = 0.5, arrives at 0.8
    assert m.playback_underrun_s == pytest.approx(0.3) and m.underrun is True
    assert m.stop_violation is None and m.audio_after_done_s is None and m.overrun_s is None

    smooth = request_metrics(_record([(0.1, 4800), (0.15, 4800), (0.25, 4800)]))
    assert smooth.playback_underrun_s == 0.0 and smooth.underrun is False
    just = request_metrics(
        _record([(0.1, 4800), (0.25, 4800)])
    )  # 50 ms late: inside an 80 ms reserve
    assert just.playback_underrun_s == pytest.approx(0.05) and just.underrun is False
    assert request_metrics(_record([(0.1, 4800), (0.25, 4800)]), reserve_s=0.04).underrun is True

    rate22 = request_metrics(_record([(0.1, 4410)], rate=22050))
    assert rate22.audio_s == pytest.approx(0.1) and rate22.rtf == pytest.approx(1.0)
    stereo = request_metrics(_record([(0.1, 9600)], channels=2))
    assert stereo.audio_s == pytest.approx(0.1)


def test_stop_condition_and_missing_values():
    late = request_metrics(_record([(0.1, 4800), (0.2, 1920)], done_s=0.15, bytes_after_done=1920))
    assert late.audio_after_done_s == pytest.approx(0.04) and late.stop_violation is True
    clean = request_metrics(_record([(0.1, 4800)], done_s=0.15))
    assert clean.audio_after_done_s == 0.0 and clean.stop_violation is False
    over = request_metrics(_record([(0.1, 3840)], max_audio_s=0.0))  # should have stopped at once
    assert over.overrun_s == pytest.approx(0.08) and over.stop_violation is True
    within = request_metrics(_record([(0.1, 4800)], max_audio_s=0.5))
    assert within.overrun_s == 0.0 and within.stop_violation is False

    empty = request_metrics(_record([]))
    assert (
        empty.ttfa_s is None
        and empty.rtf is None
        and empty.audio_s is None
        and empty.underrun is None
    )
    failed = request_metrics(_record([], status="failed", error="HTTP 500", sample_rate=None))
    assert failed.e2e_s is None and failed.audio_s is None


def test_level_row_exact():
    records = [
        _record([(0.1, 48000)], start_s=None, warmup=True),  # warm-up: left out
        _record([(0.1, 24000), (0.2, 24000)], start_s=0.0, end_s=0.3),  # 1 s audio, RTF 0.2
        _record([(0.3, 48000)], start_s=0.0, end_s=0.4),  # 1 s audio, RTF 0.3
        _record([(0.2, 48000)], start_s=0.3, end_s=1.7),  # 1 s audio, ends at 2.0
        _record(
            [], start_s=0.4, end_s=0.1, status="failed", error="HTTP 500: boom", sample_rate=None
        ),
    ]
    row = level_row(2, records, frame_rate_hz=21.5)
    assert (row.requests, row.warmups, row.ok, row.failed, row.empty) == (4, 1, 3, 1, 0)
    assert row.wall_s == pytest.approx(2.0) and row.audio_s == pytest.approx(3.0)
    assert row.throughput_audio_s_per_s == pytest.approx(1.5)
    assert row.throughput_frames_per_s == pytest.approx(1.5 * 21.5)
    assert row.requests_per_s == pytest.approx(1.5)
    assert row.ttfa_p50_ms == pytest.approx(200.0) and row.ttfa_p95_ms == pytest.approx(300.0)
    assert row.ttfa_mean_ms == pytest.approx(200.0)
    assert row.rtf_mean == pytest.approx((0.2 + 0.3 + 0.2) / 3, abs=1e-4)
    assert row.errors == ["HTTP 500: boom"] and row.sample_rates == [24000]
    assert row.underrun_requests == 0 and row.stop_checked == 0
    nothing = level_row(1, [])
    assert (
        nothing.throughput_audio_s_per_s is None
        and nothing.ttfa_p50_ms is None
        and nothing.underrun_requests is None
    )


@pytest.fixture(scope="module")
def scripted():
    with ScriptedServer() as server:
        yield server


def test_metrics_from_a_scripted_22050_hz_server(scripted, tmp_path):
    items = seed_items(tmp_path, 4)
    results = run(
        replay(items, SpeechClientOptions(url=scripted.url("pcm22050")), concurrency=2, warmups=1)
    )
    records = [r for r, _ in results]
    m = request_metrics(records[1])
    assert m.sample_rate == 22050 and m.audio_s == pytest.approx(0.4)  # 17,640 bytes at 22,050 Hz
    assert 0.2 - 0.01 <= m.ttfa_s <= 0.2 + SLACK
    assert m.gaps_s[0] == pytest.approx(0.1, abs=SLACK) and m.gaps_s[1] == pytest.approx(
        0.5, abs=SLACK
    )
    assert m.playback_underrun_s == pytest.approx(0.3, abs=SLACK) and m.underrun is True
    assert (
        m.rtf == pytest.approx(m.last_audio_s / 0.4)
        and 0.8 / 0.4 - 0.05 <= m.rtf <= (0.8 + SLACK) / 0.4
    )
    row = level_row(2, records, frame_rate_hz=12.5)
    assert (row.requests, row.warmups, row.failed, row.underrun_requests) == (4, 1, 0, 4)
    # 4 requests of ~0.8 s, two at a time: ~1.6 s wall for 1.6 audio seconds
    assert 1.6 <= row.wall_s <= 1.6 + 2 * SLACK
    assert row.throughput_audio_s_per_s == pytest.approx(1.6 / row.wall_s, rel=1e-3)
    assert row.throughput_frames_per_s == pytest.approx(
        row.throughput_audio_s_per_s * 12.5, rel=1e-3
    )
    assert 200.0 <= row.ttfa_p50_ms <= row.ttfa_p95_ms <= 200.0 + 1000 * SLACK


def test_stop_regressions_are_visible_per_request(scripted, tmp_path):
    item = seed_items(tmp_path)
    late = run(replay(item, SpeechClientOptions(url=scripted.url("sse-late")), concurrency=1))[0][0]
    m = request_metrics(late)
    assert m.stop_violation is True and m.audio_after_done_s == pytest.approx(0.08)
    stopped = run(
        replay(
            item, SpeechClientOptions(url=scripted.url("stop80"), max_audio_s=0.0), concurrency=1
        )
    )[0][0]
    m = request_metrics(stopped)
    assert m.stop_violation is True and m.overrun_s == pytest.approx(0.08)
    clean = run(replay(item, SpeechClientOptions(url=scripted.url("sse")), concurrency=1))[0][0]
    assert request_metrics(clean).stop_violation is False
    row = level_row(1, [late, stopped, clean])
    assert (row.stop_checked, row.stop_violations) == (3, 2)
