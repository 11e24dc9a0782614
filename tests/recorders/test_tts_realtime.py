"""The TTS client over a /v1/realtime session against a scripted peer: the events it sends, the
declared rate (or the refusal to guess), arrivals, and audio after response.done."""

from __future__ import annotations

import asyncio

import pytest

from recorders.tts_client import SpeechClientOptions, replay
from scorers.tts_serving import request_metrics
from tests.recorders.tts_fakes import seed_items
from tests.recorders.tts_realtime_fakes import RealtimeTtsPeer


def _replay(peer: RealtimeTtsPeer, items, **options):
    async def go():
        async with peer:
            opts = SpeechClientOptions(
                url=f"http://127.0.0.1:{peer.port}", transport="realtime", drain_s=0.3, **options
            )
            assert opts.endpoint == peer.url
            return await replay(items, opts, concurrency=len(items))

    return asyncio.run(go())


def test_realtime_session_records_arrivals_and_late_audio(tmp_path):
    peer = RealtimeTtsPeer()
    ((record, pcm),) = _replay(peer, seed_items(tmp_path), model="tts-m")
    assert record.status == "ok", record.error
    assert (
        record.transport == "realtime"
        and record.sample_rate == 24000
        and record.rate_source == "session"
    )
    assert [n for _, n in record.chunks] == [4800, 4800, 3840] and len(pcm) == 13440
    assert record.bytes_after_done == 3840 and record.end_s == record.done_s
    m = request_metrics(record)
    assert (
        0.09 <= m.ttfa_s <= 0.25
        and m.stop_violation is True
        and m.audio_after_done_s == pytest.approx(0.08)
    )

    kinds = [e["type"] for e in peer.received]
    assert (
        kinds[:2] == ["session.update", "conversation.item.create"] and "response.create" in kinds
    )
    session = peer.received[0]["session"]
    assert session["model"] == "tts-m" and session["output_modalities"] == ["audio"]
    content = peer.received[1]["item"]["content"]
    assert content[0] == {"type": "input_text", "text": "Target number 1."}
    assert content[1]["type"] == "input_audio" and len(content[1]["audio"]) > 100


def test_realtime_without_a_declared_rate_is_refused(tmp_path):
    ((record, _),) = _replay(
        RealtimeTtsPeer(rate=None, late=()), seed_items(tmp_path), ref_audio="none"
    )
    assert (
        record.status == "failed" and "refusing to guess" in record.error and record.end_s is None
    )
    ((given, pcm),) = _replay(
        RealtimeTtsPeer(rate=None, late=()), seed_items(tmp_path), sample_rate=16000
    )
    assert (
        given.status == "ok"
        and given.rate_source == "option"
        and request_metrics(given).stop_violation is False
    )
