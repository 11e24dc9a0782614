"""The TTS streaming client against a scripted local server: request bodies, the Content-Type
branches (raw PCM, L16, WAV, SSE), declared rates, refusal to guess, errors, the closed loop."""

from __future__ import annotations

import base64

import httpx
import pytest

from recorders.tts_client import SpeechClientOptions, build_body, replay, synthesize
from tests.recorders.tts_fakes import ScriptedServer, run, seed_items


@pytest.fixture(scope="module")
def scripted():
    with ScriptedServer() as server:
        yield server


@pytest.fixture
def item(tmp_path):
    return seed_items(tmp_path)[0]


def _one(url: str, item, **options):
    opts = SpeechClientOptions(url=url, **options)

    async def go():
        async with httpx.AsyncClient() as client:
            return await synthesize(client, item, opts, concurrency=1, index=0)

    return run(go())


def test_body_reference_modes_and_extra_body(item):
    opts = SpeechClientOptions(
        url="http://x", model="m", extra_body={"max_new_tokens": 256, "stream": True}
    )
    body = build_body(item, opts)
    assert (
        body["input"] == "Target number 1."
        and body["model"] == "m"
        and body["ref_text"] == "A prompt."
    )
    assert (
        body["stream_format"] == "audio"
        and body["response_format"] == "pcm"
        and body["max_new_tokens"] == 256
    )
    prefix = "data:audio/wav;base64,"
    assert body["ref_audio"].startswith(prefix)
    assert base64.b64decode(body["ref_audio"][len(prefix) :]) == item.prompt_wav.read_bytes()
    as_file = build_body(item, opts.model_copy(update={"ref_audio": "file"}))
    assert as_file["ref_audio"] == item.prompt_wav.resolve().as_uri()
    bare = build_body(item, opts.model_copy(update={"ref_audio": "none"}))
    assert "ref_audio" not in bare and "ref_text" not in bare


def test_raw_pcm_at_declared_22050(scripted, item):
    record, pcm = _one(scripted.url("pcm22050"), item)
    assert record.status == "ok", record.error
    assert (
        record.transport == "pcm" and record.sample_rate == 22050 and record.rate_source == "header"
    )
    assert record.audio_bytes == len(pcm) == 4410 + 8820 + 4410
    assert [n for _, n in record.chunks] == [4410, 8820, 4410]
    times = [t for t, _ in record.chunks]
    assert 0.19 <= times[0] <= 0.40 and times[0] < times[1] < times[2] <= record.end_s
    assert scripted.app.state.bodies[-1]["input"] == "Target number 1."


def test_rate_from_content_type_wav_header_and_sse(scripted, item):
    l16, _ = _one(scripted.url("l16"), item)
    assert l16.status == "ok" and l16.sample_rate == 16000 and l16.rate_source == "content-type"
    wav, pcm = _one(scripted.url("wav"), item)
    assert wav.status == "ok" and wav.transport == "wav" and wav.rate_source == "wav-header"
    assert (
        wav.sample_rate == 16000 and len(pcm) == 6400 and len(wav.chunks) == 2
    )  # header bytes are not audio
    sse, pcm = _one(scripted.url("sse"), item)
    assert sse.status == "ok" and sse.transport == "sse" and sse.sample_rate == 24000
    assert len(pcm) == 9600 and sse.done_s is not None and sse.bytes_after_done == 0
    legacy, pcm = _one(scripted.url("sse-legacy"), item)
    assert (
        legacy.status == "ok"
        and legacy.sample_rate == 24000
        and legacy.rate_source in ("sse-event", "wav-header")
    )
    assert (
        len(pcm) == 9600
        and len(legacy.chunks) == 2
        and legacy.done_s is not None
        and legacy.bytes_after_done == 0
    )
    declared, _ = _one(
        scripted.url("sse-legacy"), item, sample_rate=16000
    )  # the option never beats a declaration
    assert declared.sample_rate == 24000 and declared.rate_source != "option"


def test_undeclared_rate_is_refused_not_guessed(scripted, item):
    record, pcm = _one(scripted.url("undeclared"), item)
    assert record.status == "failed" and record.sample_rate is None
    assert (
        "X-Sample-Rate" in record.error
        and "refusing to guess" in record.error
        and "--sample-rate" in record.error
    )
    given, _ = _one(scripted.url("undeclared"), item, sample_rate=24000)
    assert given.status == "ok" and given.sample_rate == 24000 and given.rate_source == "option"


def test_http_error_and_unreachable_server_are_failed_records(scripted, item):
    record, _ = _one(scripted.url("error"), item)
    assert (
        record.status == "failed"
        and record.http_status == 500
        and "engine exploded" in record.error
    )
    from tests.conftest import free_port

    gone, _ = _one(f"http://127.0.0.1:{free_port()}", item, timeout_s=5)
    assert gone.status == "failed" and "ConnectError" in gone.error


def test_audio_after_declared_end_is_recorded(scripted, item):
    record, pcm = _one(scripted.url("sse-late"), item)
    assert record.status == "ok" and record.done_s is not None
    assert record.bytes_after_done == 3840 and len(pcm) == 4800 + 3840


def test_closed_loop_keeps_concurrency_and_excludes_warmups(scripted, tmp_path):
    items = seed_items(tmp_path, 4)
    opts = SpeechClientOptions(url=scripted.url("stop80"))
    results = run(replay(items, opts, concurrency=2, warmups=1))
    records = [r for r, _ in results]
    assert [r.index for r in records] == [0, 1, 2, 3, 4]
    assert records[0].warmup and records[0].start_s is None
    measured = records[1:]
    assert all(r.status == "ok" and not r.warmup and r.concurrency == 2 for r in measured)
    starts = sorted(r.start_s for r in measured)
    assert starts[1] < 0.05, "two requests start together"
    assert starts[2] >= min(r.start_s + r.end_s for r in measured) - 0.01, (
        "the third waits for a free slot"
    )


def test_bearer_token_comes_from_the_named_variable_and_is_never_recorded(
    scripted, item, monkeypatch
):
    secret = "sk-test-tts-0123456789"
    monkeypatch.setenv("FDB_TEST_TTS_KEY", secret)
    record, _ = _one(scripted.url("pcm22050"), item, api_key_env="FDB_TEST_TTS_KEY")
    assert record.status == "ok" and scripted.app.state.auth[-1] == f"Bearer {secret}"
    assert secret not in record.model_dump_json()
    monkeypatch.delenv("FDB_TEST_TTS_KEY")
    _one(scripted.url("pcm22050"), item, api_key_env="FDB_TEST_TTS_KEY")  # unset: no header at all
    _one(scripted.url("pcm22050"), item)
    assert scripted.app.state.auth[-2:] == [None, None]
