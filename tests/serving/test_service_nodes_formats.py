"""What the cascade's nodes read from real servers (#23 part 3): a speech node reads every raw
PCM16 Content-Type, WAV with or without sizes, chunked or not, at the rate the answer declares;
a transcription node reads JSON or plain text; a chat node reads a completion that was not
streamed. The servers are a real stdlib HTTP server on a loopback port."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fdb.audio import pcm16_to_float
from fdb.errors import FdbError
from serving.graph.registry import build_backend, parse_backend
from tests.recorders.speech_variants import Answer, VariantServer, pieces, tone, wav

SPEECH = ("POST", "/v1/audio/speech")
TRANSCRIBE = ("POST", "/v1/audio/transcriptions")
CHAT = ("POST", "/v1/chat/completions")
T22 = tone(22050, 0.3)
T16 = tone(16000, 0.25, 300.0)


def _client(role: str, kind: str, url: str, **extra):
    return build_backend(
        role, parse_backend(role, {"kind": kind, "base_url": f"{url}/v1", "model": "m", **extra})
    )


SPEECH_VARIANTS = {
    "pcm_s16le-whole": (
        Answer(200, "audio/pcm_s16le", T22.tobytes(), {"X-Sample-Rate": "22050"}),
        22050,
        T22,
    ),
    "pcm-chunked": (
        Answer(200, "audio/pcm", pieces(T22.tobytes(), 7), {"X-Sample-Rate": "22050"}),
        22050,
        T22,
    ),
    "L16-rate-param": (Answer(200, "audio/L16; rate=16000", pieces(T16.tobytes(), 3)), 16000, T16),
    "x-raw": (
        Answer(200, "audio/x-raw;format=S16LE;rate=16000;channels=1", T16.tobytes()),
        16000,
        T16,
    ),
    "x-raw-big-endian": (
        Answer(200, "audio/x-raw;format=S16BE;rate=16000", T16.astype(">i2").tobytes()),
        16000,
        T16,
    ),
    "wav-whole": (
        Answer(200, "audio/wav", wav(T22, 22050, trailer=b"LIST\x02\x00\x00\x00ab")),
        22050,
        T22,
    ),
    "wav-streamed-chunked": (
        Answer(200, "audio/wav", pieces(wav(T16, 16000, size=0xFFFFFFFF), 5)),
        16000,
        T16,
    ),
    "octet-stream": (
        Answer(200, "application/octet-stream", T22.tobytes(), {"X-Sample-Rate": "22050"}),
        22050,
        T22,
    ),
}


@pytest.mark.parametrize("variant", sorted(SPEECH_VARIANTS))
def test_speech_node_reads_each_answer_at_its_declared_rate(variant):
    answer, rate, expected = SPEECH_VARIANTS[variant]
    with VariantServer({SPEECH: answer}) as fake:
        speech = _client("tts", "openai_speech", fake.url, sample_rate=rate)
        samples = speech.synthesize("Hello there.")
    assert np.array_equal(
        samples, pcm16_to_float(expected.tobytes())
    )  # nothing lost, no byte order slip


def test_speech_node_resamples_averages_channels_and_sends_its_format_options():
    stereo = np.stack([T16, T16 // 2], axis=1).reshape(-1)
    routes = {SPEECH: Answer(200, "audio/wav", wav(stereo, 16000, channels=2))}
    with VariantServer(routes) as fake:
        speech = _client("tts", "openai_speech", fake.url, response_format="wav", stream=False)
        samples = speech.synthesize("One. Two.")
        bodies = [json.loads(seen.body) for seen in fake.seen]
        fake.routes[SPEECH] = Answer(
            200, "audio/pcm", T16.tobytes()
        )  # no rate at all: the node's sample_rate
        undeclared = _client("tts", "openai_speech", fake.url, sample_rate=16000).synthesize("Hi.")
    assert [(b["input"], b["response_format"], b["stream"]) for b in bodies] == [
        ("One.", "wav", False),
        ("Two.", "wav", False),
    ]
    assert speech.rate == 24000 and abs(len(samples) - 2 * 0.25 * 24000) < 20
    mean = (pcm16_to_float(T16.tobytes()) + pcm16_to_float((T16 // 2).tobytes())) / 2
    assert abs(float(np.abs(samples).max()) - float(np.abs(mean).max())) < 0.02
    assert np.array_equal(undeclared, pcm16_to_float(T16.tobytes()))


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (
            Answer.json({"error": {"message": "voice not ready"}}),
            "answered application/json instead of audio",
        ),
        (Answer(200, "audio/mpeg", bytes(range(256)) * 8), "answered audio/mpeg instead of audio"),
        (Answer(200, "audio/x-raw;format=F32LE;rate=16000", b"\x00" * 64), "only S16LE/S16BE"),
        (
            Answer(200, "audio/pcm", b"\x00" * 64, {"X-Bit-Depth": "24", "X-Sample-Rate": "16000"}),
            "X-Bit-Depth is 24",
        ),
        (Answer(502, "audio/pcm", b"\x00\x01" * 3000), "answered 502: '<6000 bytes, not text>'"),
    ],
)
def test_speech_answers_that_are_not_readable_audio_fail_without_their_bytes(answer, reason):
    with VariantServer({SPEECH: answer}) as fake:
        with pytest.raises(FdbError) as err:
            _client("tts", "openai_speech", fake.url).synthesize("Hello.")
    line = err.value.one_line()
    assert reason in line and "\x00" not in line and len(line) < 600, line


@pytest.mark.parametrize(
    ("answer", "text", "language"),
    [
        (Answer.json({"text": " Hello there."}), "Hello there.", None),
        (
            Answer.json(
                {
                    "task": "transcribe",
                    "language": "en",
                    "duration": 1.0,
                    "text": " Hi",
                    "segments": [],
                }
            ),
            "Hi",
            "en",
        ),
        (
            Answer.json(
                {
                    "text": "a b",
                    "words": [
                        {"word": "a", "start": 0.0, "end": 0.1},
                        {"word": "b", "start": 0.2, "end": 0.3},
                    ],
                }
            ),
            "a b",
            None,
        ),
        (Answer.json(" quoted text"), "quoted text", None),
        (Answer(200, "text/plain; charset=utf-8", b" plain text\n"), "plain text", None),
        (Answer(200, None, b"no content type"), "no content type", None),
    ],
)
def test_transcription_node_reads_json_or_plain_text(answer, text, language):
    with VariantServer({TRANSCRIBE: answer}) as fake:
        found = _client("asr", "openai_transcription", fake.url, response_format="json").transcribe(
            pcm16_to_float(T16.tobytes())
        )
    assert (found.text, found.language) == (text, language)


def test_transcription_node_refuses_an_answer_that_is_no_transcript():
    for answer, reason in (
        (Answer(200, "audio/wav", wav(T16, 16000)), "answered audio/wav"),
        (Answer.json({"result": "x"}), "answered JSON without a text field"),
    ):
        with VariantServer({TRANSCRIBE: answer}) as fake:
            with pytest.raises(FdbError) as err:
                _client("asr", "openai_transcription", fake.url).transcribe(
                    pcm16_to_float(T16.tobytes())
                )
        assert reason in err.value.message and "RIFF" not in err.value.one_line()


def test_chat_node_reads_a_completion_that_was_not_streamed():
    whole = {
        "id": "x",
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Paris is the capital."},
                "finish_reason": "stop",
            }
        ],
    }
    with VariantServer({CHAT: Answer.json(whole)}) as fake:
        chat = _client("llm", "openai_chat", fake.url)
        assert (
            chat.reply([{"role": "user", "content": "Capital of France?"}], 16)
            == "Paris is the capital."
        )
        fake.routes[CHAT] = Answer.json({"error": {"message": "model overloaded"}})
        with pytest.raises(FdbError, match="answered an error: .*model overloaded"):
            chat.reply([{"role": "user", "content": "Again?"}], 16)
