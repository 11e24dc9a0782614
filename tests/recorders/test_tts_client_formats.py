"""The TTS client against answers shaped as real servers send them (#23 part 5): every raw-PCM
Content-Type variant, WAV with and without sizes, SSE; errors that never carry payload bytes;
quality "not measured" when no audio arrived; tts-bench's exit status when a level got none.

The server is a real stdlib HTTP server on a loopback port (tests/recorders/speech_variants.py),
sending each answer with a Content-Length or chunked in uneven pieces."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys

import httpx
import numpy as np
import pytest

from fdb.speech_formats import server_text
from fdb.tts_records import TtsRequestRecord
from recorders.tts_client import SpeechClientOptions, synthesize
from scorers.tts_serving import request_metrics
from tests.conftest import REPO
from tests.recorders.speech_variants import Answer, VariantServer, pieces, tone, wav
from tests.recorders.tts_fakes import run, seed_items

SPEECH = ("POST", "/v1/audio/speech")
T22 = tone(22050, 0.25)
T16 = tone(16000, 0.2, 300.0)
T24 = tone(24000, 0.2, 500.0)


def _one(server: VariantServer, answer: Answer, item, **options) -> tuple[TtsRequestRecord, bytes]:
    server.routes[SPEECH] = answer
    opts = SpeechClientOptions(url=server.url, **options)

    async def go():
        async with httpx.AsyncClient() as client:
            return await synthesize(client, item, opts, concurrency=1, index=0)

    return run(go())


@pytest.fixture(scope="module")
def server():
    with VariantServer() as found:
        yield found


@pytest.fixture
def item(tmp_path):
    return seed_items(tmp_path)[0]


def _sse(events: list[dict], last_blank: bool = True) -> list[bytes]:
    text = "".join(f"data: {json.dumps(event)}\n\n" for event in events)
    return [piece.encode() for piece in pieces(text if last_blank else text.rstrip("\n") + "\n", 3)]


VARIANTS = {
    # local-tts-studio (PyPI): whole body, X-Sample-Rate and X-Sample-Width in bytes
    "pcm_s16le": (
        Answer(
            200,
            "audio/pcm_s16le",
            T22.tobytes(),
            {"X-Sample-Rate": "22050", "X-Channels": "1", "X-Sample-Width": "2"},
        ),
        22050,
        "header",
        T22,
    ),
    "pcm-chunked": (
        Answer(200, "audio/pcm", pieces(T24.tobytes(), 5), {"X-Sample-Rate": "24000"}),
        24000,
        "header",
        T24,
    ),
    "L16-rate": (
        Answer(200, "audio/L16;rate=16000", pieces(T16.tobytes(), 4)),
        16000,
        "content-type",
        T16,
    ),
    # GStreamer caps as a Content-Type, commas and all
    "x-raw": (
        Answer(200, "audio/x-raw, format=S16LE, rate=22050, channels=1", T22.tobytes()),
        22050,
        "content-type",
        T22,
    ),
    "x-raw-S16BE": (
        Answer(200, "audio/x-raw;format=S16BE;rate=16000", pieces(T16.astype(">i2").tobytes(), 3)),
        16000,
        "content-type",
        T16,
    ),
    "pcm_s16be": (
        Answer(200, "audio/pcm_s16be", T24.astype(">i2").tobytes(), {"X-Sample-Rate": "24000"}),
        24000,
        "header",
        T24,
    ),
    "octet-stream": (
        Answer(200, "application/octet-stream", T16.tobytes(), {"X-Sample-Rate": "16000"}),
        16000,
        "header",
        T16,
    ),
    "wav-whole-with-trailer": (
        Answer(200, "audio/wav", wav(T22, 22050, trailer=b"LIST\x04\x00\x00\x00INFO")),
        22050,
        "wav-header",
        T22,
    ),
    "wav-streamed": (
        Answer(200, "audio/x-wav", pieces(wav(T24, 24000, size=0xFFFFFFFF), 6)),
        24000,
        "wav-header",
        T24,
    ),
    "wav-concatenated": (
        Answer(200, "audio/wav", pieces(wav(T16, 16000) + wav(T16[::-1].copy(), 16000), 5)),
        16000,
        "wav-header",
        np.concatenate([T16, T16[::-1]]),
    ),
    "sse-delta": (
        Answer(
            200,
            "text/event-stream",
            _sse(
                [
                    {
                        "type": "speech.audio.delta",
                        "audio": base64.b64encode(T24[:2400].tobytes()).decode(),
                    },
                    {
                        "type": "speech.audio.delta",
                        "audio": base64.b64encode(T24[2400:].tobytes()).decode(),
                    },
                    {"type": "speech.audio.done"},
                ],
                last_blank=False,
            ),
            {"X-Sample-Rate": "24000"},
        ),
        24000,
        "header",
        T24,
    ),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_each_content_type_variant_is_read_as_sent(server, item, variant):
    answer, rate, source, expected = VARIANTS[variant]
    record, pcm = _one(server, answer, item)
    assert record.status == "ok", record.error
    assert (record.sample_rate, record.rate_source, record.channels) == (rate, source, 1)
    assert np.array_equal(
        np.frombuffer(pcm, dtype="<i2"), expected
    )  # every sample, in little-endian order
    assert record.audio_bytes == expected.nbytes and record.chunks


def _clean(error: str | None, limit: int = 420) -> str:
    assert error is not None
    assert len(error) <= limit, error
    assert not any(ord(ch) < 32 or ch == "\ufffd" for ch in error), repr(error)
    return error


def test_an_audio_answer_of_another_type_fails_without_its_bytes(server, item):
    mp3 = bytes(range(256)) * 40 + b"\x00" * 4000  # binary, with NULs like PCM silence
    record, pcm = _one(server, Answer(200, "audio/mpeg", mp3), item)
    error = _clean(record.error)
    assert record.status == "failed" and pcm == b""
    assert "unexpected Content-Type 'audio/mpeg'" in error and "bytes, not text>" in error


def test_an_error_status_with_a_pcm_body_quotes_only_its_length(server, item):
    silence = b"\x00" * 9600  # decodes as UTF-8: only its NULs give it away
    record, _ = _one(
        server, Answer(500, "audio/pcm_s16le", silence, {"X-Sample-Rate": "22050"}), item
    )
    assert _clean(record.error) == "HTTP 500: <9600 bytes, not text>"


def test_long_text_and_base64_in_errors_are_bounded(server, item):
    record, _ = _one(
        server, Answer.json({"error": {"message": "far too long. " * 400}}, status=200), item
    )
    error = _clean(record.error)
    assert "unexpected Content-Type 'application/json'" in error and error.endswith("…")
    audio = base64.b64encode(T24.tobytes()).decode()
    event = Answer(
        200,
        "text/event-stream",
        _sse([{"type": "error", "error": {"message": "boom", "audio": audio}}]),
        {"X-Sample-Rate": "24000"},
    )
    record, _ = _one(server, event, item)
    error = _clean(record.error)
    assert "boom" in error and "base64 characters>" in error and audio[:64] not in error


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (Answer(200, "audio/x-raw;format=F32LE;rate=16000", b"\x00" * 64), "only S16LE/S16BE"),
        (
            Answer(
                200, "audio/pcm", b"\x00" * 64, {"X-Sample-Rate": "16000", "X-Sample-Width": "4"}
            ),
            "X-Sample-Width is 4",
        ),
        (Answer(200, "audio/pcm_s16le", b"\x00" * 64), "refusing to guess"),
        (Answer(200, "audio/wav", wav(T16, 16000)[:30]), "ended before its data chunk"),
        (Answer(200, "audio/pcm", b"\x00" * 64, {"X-Sample-Rate": "inf"}), "'inf' is not a number"),
        (
            Answer(200, "audio/pcm", b"\x00" * 64, {"X-Sample-Rate": "1e999"}),
            "'1e999' is not a number",
        ),
        (
            Answer(200, "audio/pcm", b"\x00" * 64, {"X-Sample-Rate": "1"}),
            "1 Hz is not an audio sample rate",
        ),
        (
            Answer(200, "audio/L16;rate=900000", b"\x00" * 64),
            "900000 Hz is not an audio sample rate",
        ),
        (
            Answer(
                200,
                "audio/wav",
                wav(T16, 16000)[:24] + (4000).to_bytes(4, "little") + wav(T16, 16000)[28:],
            ),
            "4000 Hz is not an audio sample rate",
        ),
    ],
)
def test_answers_that_cannot_be_read_as_declared_fail_with_the_reason(server, item, answer, reason):
    record, _ = _one(server, answer, item)
    assert record.status == "failed" and reason in _clean(record.error)


def test_an_older_record_with_bytes_in_its_error_is_cleaned_when_scored():
    raw = "unexpected Content-Type 'audio/pcm_s16le' (expected audio/pcm): " + (
        b"\x00\x01\xff" * 500
    ).decode("utf-8", "replace")
    record = TtsRequestRecord(
        id="a",
        list_name="en/meta.lst",
        index=0,
        concurrency=1,
        status="failed",
        error=raw,
        target_text="t",
    )
    error = _clean(request_metrics(record).error)
    assert (
        error.startswith("unexpected Content-Type 'audio/pcm_s16le'")
        and "binary data, not shown>" in error
    )
    assert (
        server_text(b"\x00" * 10) == "<10 bytes, not text>"
        and server_text("plain  text\n") == "plain text"
    )


def test_quality_is_not_measured_when_no_request_returned_audio(tmp_path):
    from scorers.tts_quality import QualityJob, load_backends, score_quality

    prompt = seed_items(tmp_path)[0].prompt_wav
    asr, _, _ = load_backends(sim=False, mos=False)
    jobs = [
        QualityJob(
            id=f"u{k}",
            lang="en",
            reference="Nothing came back at all.",
            wav=None,
            prompt_wav=str(prompt),
            note="HTTP 500",
        )
        for k in range(3)
    ]
    rows, summary = score_quality(jobs, asr)
    assert summary.expected == 3 and summary.evaluated == 0
    assert (
        summary.wer_mean_pct is None
        and summary.wer_corpus_pct is None
        and summary.wer_outliers is None
    )
    assert all(row.wer is None and row.counts is None and row.note == "HTTP 500" for row in rows)
    assert any(
        note.startswith("not measured: none of the 3 requests returned audio")
        for note in summary.notes
    )


def test_tts_bench_exits_1_naming_a_level_that_got_no_audio(tmp_path):
    """Entry 1 (concurrency 1) gets audio; every request after the first two fails with 503 and a
    PCM body, so entry 2 has no successful request: exit 1 with a line that names it, while the
    report (with a bounded, byte-free reason) is written."""
    from fdb.datasets.synthetic import SynthSizes, generate_synthetic

    generate_synthetic(tmp_path / "data", sizes=SynthSizes.build(0, 0, seedtts_rows=2))
    served: list[int] = []

    def answer(seen) -> Answer:
        served.append(1)
        if len(served) <= 2:
            return Answer(200, "audio/pcm_s16le", T22.tobytes(), {"X-Sample-Rate": "22050"})
        return Answer(503, "audio/pcm_s16le", b"\x00\x07" * 3000)

    out = tmp_path / "bench"
    env = dict(os.environ, FDB_WORK=str(tmp_path / "work"), PYTHONPATH=str(REPO))
    env.pop("SEED_TTS_DATASET", None)
    with VariantServer({SPEECH: answer}) as fake:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "fdb",
                "tts-bench",
                "--output",
                str(out),
                "--url",
                fake.url,
                "--seed-tts",
                str(tmp_path / "data" / "seedtts"),
                "--concurrency",
                "1,2",
                "--num-prompts",
                "2",
                "--num-warmups",
                "0",
                "--no-quality",
            ],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 1, done.stderr[-2000:]
    last = " ".join(done.stderr.split()[-60:])
    assert "concurrency 2 (entry 2): none of its 2 measured requests succeeded" in last
    assert "first error: HTTP 503: <6000 bytes, not text>" in last
    text = (out / "TTS.md").read_text()
    assert "\x00" not in text and "\ufffd" not in text
    failed = [
        json.loads(line)
        for path in out.rglob("requests.jsonl")
        for line in path.read_text().splitlines()
    ]
    assert [r["status"] for r in failed].count("failed") == 2
    assert all(r["error"] is None or _clean(r["error"]) for r in failed)
