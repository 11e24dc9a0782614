"""The embedded backends, for real, on short clips: Piper -> Whisper tiny.en, Silero VAD,
SmolLM2."""

from __future__ import annotations

import numpy as np
import pytest

from fdb.audio import resample
from fdb.errors import MissingExtraError
from fdb.models import require


@pytest.fixture(scope="module")
def tts():
    from fdb.models.tts import PiperTts

    return PiperTts(deterministic=True)


def test_missing_package_names_the_extra():
    with pytest.raises(MissingExtraError) as err:
        require("fdb_no_such_module", "no-such-package", "embedded", "a test backend")
    assert "pip install 'fdb[embedded]'" in err.value.one_line()


def test_piper_is_deterministic_and_whisper_reads_it(tts):
    from fdb.models.asr import WHISPER_TINY_EN_SHA256, FasterWhisperAsr

    text = "What is the capital of France?"
    a, b = tts.synthesize(text), tts.synthesize(text)
    assert tts.rate == 22050 and np.array_equal(a, b)
    clip = np.concatenate([np.zeros(8000, np.float32), resample(a, tts.rate, 16000)])
    asr = FasterWhisperAsr()
    assert asr.identity.checkpoint_sha256 == WHISPER_TINY_EN_SHA256
    out = asr.transcribe(clip)
    words = [w.text.strip(",.?!").lower() for w in out.words]
    assert "capital" in words and "france" in words
    assert all(w.end is None or w.end >= w.start for w in out.words)
    assert out.language == "en"  # faster-whisper's report (tiny.en hears English only)


def test_whisper_utterance_window_reads_the_same_words_in_a_shorter_window(tts, monkeypatch):
    """transcribe_utterance encodes max(10 s, utterance + 1 s) of log-mel, not Whisper's fixed
    30 s; a clip past 29 s, or a multilingual checkpoint, takes the full pipeline; under 0.1 s
    there is nothing to read."""
    from fdb.models.asr import FasterWhisperAsr

    asr = FasterWhisperAsr()
    clip = np.concatenate(
        [
            np.zeros(3200, np.float32),
            resample(tts.synthesize("Why is the sky blue during the day?"), tts.rate, 16000),
            np.zeros(4800, np.float32),
        ]
    )
    widths: list[int] = []

    class Spy:  # records the encoder input's width, then encodes for real
        def __init__(self, model):
            self.model = model

        def encode(self, features, **kw):
            widths.append(features.shape[2])
            return self.model.encode(features, **kw)

        def __getattr__(self, name):
            return getattr(self.model, name)

    real_model = asr._model.model
    monkeypatch.setattr(asr._model, "model", Spy(real_model))
    short = asr.transcribe_utterance(clip)
    assert widths == [1000]
    assert short.words == [] and short.language == "en"
    assert (
        short.text.strip(" .?").lower()
        == asr.transcribe(clip).text.strip(" .?").lower()
        == "why is the sky blue during the day"
    )
    widths.clear()
    longer = np.concatenate([clip] * 8)  # about 19 s: the window is the utterance + 1 s
    expected = int(np.ceil(len(longer) / 16000 * 100)) + 100
    asr.transcribe_utterance(longer)
    assert expected > 1000 and widths == [expected]
    widths.clear()
    long = asr.transcribe_utterance(np.zeros(16000 * 31, np.float32))  # full pipeline
    assert long.words == [] and widths and all(w == 3000 for w in widths)
    assert asr.transcribe_utterance(np.zeros(800, np.float32)).text == ""

    class Multilingual(Spy):  # the English-only prompt must not meet a multilingual checkpoint
        is_multilingual = True

    monkeypatch.setattr(asr._model, "model", Multilingual(real_model))
    widths.clear()
    asr.transcribe_utterance(clip)  # (the text means nothing here: tiny.en is not multilingual)
    assert widths and all(w == 3000 for w in widths)


def test_asr_refuses_a_wrong_checkpoint_hash():
    from fdb.errors import FdbError
    from fdb.models.asr import FasterWhisperAsr

    with pytest.raises(FdbError, match="sha256"):
        FasterWhisperAsr(expected_sha256="0" * 64)


def test_silero_segments_and_streaming(tts):
    from fdb.models.vad import SileroVad, StreamingVad

    speech = resample(tts.synthesize("Hello there, how are you today?"), tts.rate, 16000)
    x = np.concatenate([np.zeros(8000, np.float32), speech, np.zeros(16000, np.float32)])
    segs = SileroVad().segments(x)
    assert segs and 0.3 < segs[0][0] < 0.8 and segs[-1][1] < len(x) / 16000
    vad = StreamingVad(silence_duration_ms=500, prefix_padding_ms=0)
    events = []
    for i in range(0, len(x), 1280):
        events += vad.feed(x[i : i + 1280])
    kinds = [k for k, _ in events]
    assert kinds[0] == "speech_started" and kinds[-1] == "speech_stopped"
    assert 300 <= events[0][1] <= 800


def test_stream_models_are_copies_of_one_module_and_score_as_a_fresh_one(tts, monkeypatch):
    """Every streaming detector's Silero module is a copy of one warmed module (a session's open
    used to load one, holding the GIL for about 40 ms): loaded once however many streams start,
    each copy's state its own, and each scores exactly as a freshly loaded module, interleaved
    with another stream."""
    import silero_vad
    import torch

    from fdb.models import vad as vad_module
    from fdb.models.vad import FRAME, VAD_RATE, StreamingVad

    loads = []
    real_load = silero_vad.load_silero_vad
    monkeypatch.setattr(
        silero_vad, "load_silero_vad", lambda **k: loads.append(k) or real_load(**k)
    )
    monkeypatch.setattr(vad_module, "_template", None)

    speech = resample(tts.synthesize("Hello there, how are you today?"), tts.rate, 16000)
    clips = [
        np.concatenate([np.zeros(4000, np.float32), speech, np.zeros(12000, np.float32)]),
        np.concatenate([speech[::-1], np.zeros(8000, np.float32)]).astype(np.float32),
    ]
    frames = [[c[i : i + FRAME] for i in range(0, len(c) // FRAME * FRAME, FRAME)] for c in clips]
    fresh = []
    for clip_frames in frames:
        model = real_load(onnx=False)
        with torch.no_grad():
            fresh.append([float(model(torch.from_numpy(f), VAD_RATE)) for f in clip_frames])

    streams = [StreamingVad(), StreamingVad(), StreamingVad()]
    assert len(loads) == 1  # one module loaded for the three streams
    got: list[list[float]] = [[], []]
    with torch.no_grad():
        for k in range(max(map(len, frames))):  # the two streams interleaved, frame by frame
            for i in (0, 1):
                if k < len(frames[i]):
                    x = torch.from_numpy(frames[i][k])
                    got[i].append(float(streams[i]._model(x, VAD_RATE)))
    assert got == fresh
    events = [StreamingVad(silence_duration_ms=500, prefix_padding_ms=0).feed(c) for c in clips]
    assert [k for k, _ in events[0]] == ["speech_started", "speech_stopped"]
    assert events[1] and len(loads) == 1


def test_smollm2_replies_deterministically():
    from fdb.models.llm import SmolLm2

    llm = SmolLm2()
    msgs = [{"role": "user", "content": "What is the capital of France?"}]
    first = llm.reply(msgs, max_tokens=24)
    assert first and first == llm.reply(msgs, max_tokens=24)
    assert llm.identity.checkpoint_sha256 and len(llm.identity.checkpoint_sha256) == 64


def test_smollm2_contexts_decode_two_replies_at_once_and_give_the_same_text():
    """With two contexts, a second reply starts while the first is still being decoded (one
    context would make it wait for the first's last token), and each reply is the text one
    context gives alone."""
    import threading

    from fdb.errors import FdbError
    from fdb.models.llm import SmolLm2

    msgs = [
        [{"role": "user", "content": "What is the capital of France?"}],
        [{"role": "user", "content": "Name three colors of the rainbow."}],
    ]
    alone = [SmolLm2(n_threads=1).reply(m, max_tokens=24) for m in msgs]
    llm = SmolLm2(n_threads=1, instances=2)
    assert llm.identity.settings["contexts"] == 2
    first = llm.stream_reply(msgs[0], max_tokens=24)
    pieces = [next(first)]  # the first reply holds a context, mid-decode
    second: list[str] = []
    worker = threading.Thread(
        target=lambda: second.extend(llm.stream_reply(msgs[1], max_tokens=24))
    )
    worker.start()
    worker.join(timeout=30)
    assert not worker.is_alive()  # it did not wait for the first reply to end
    pieces.extend(first)
    assert ["".join(pieces).strip(), "".join(second).strip()] == alone
    with pytest.raises(FdbError, match="at least one context"):
        SmolLm2(instances=0)


def test_smollm2_runs_each_decoding_step_through_step_and_says_when_a_call_waits_for_a_context():
    """``step`` wraps every decoding step (priming the context, the prompt with the first token,
    then one token each) and never the wait for a context; ``contended`` is true while a call
    waits for one."""
    import threading
    import time

    from fdb.models.llm import SmolLm2

    msgs = [{"role": "user", "content": "What is the capital of France?"}]
    llm = SmolLm2(n_threads=1, instances=1)
    steps: list[int] = []

    def step(fn, *args):
        steps.append(1)
        return fn(*args)

    pieces = list(llm.stream_reply(msgs, max_tokens=16, step=step))
    assert "".join(pieces).strip() == llm.reply(msgs, max_tokens=16)
    assert (
        len(pieces) < len(steps) <= 16 + 4
    )  # a step per token, plus priming, the role and the end chunks
    held = llm.stream_reply(msgs, max_tokens=16)
    next(held)  # holds the only context
    assert not llm.contended
    waiter = threading.Thread(target=lambda: list(llm.stream_reply(msgs, max_tokens=4)))
    waiter.start()
    deadline = time.monotonic() + 10
    while not llm.contended and time.monotonic() < deadline:
        time.sleep(0.01)
    assert llm.contended
    held.close()  # gives the context back
    waiter.join(30)
    assert not waiter.is_alive() and not llm.contended


def test_piper_synthesizes_several_texts_at_once_as_it_does_one_by_one(tts):
    """Only Piper's phonemizer is serialized (one lock for every voice of the process: espeak-ng
    is one state): concurrent syntheses on one voice, and on two voices, give the audio each
    gives alone (deterministic voices, one ONNX Runtime thread)."""
    import threading

    from fdb.models.tts import PiperTts

    voice, other = PiperTts(deterministic=True, threads=1), PiperTts(deterministic=True, threads=1)
    assert voice.identity.settings["threads"] == 1
    texts = [
        "The tallest mountain is Mount Everest.",
        "Paris is the capital of France.",
        "Hello there, how are you today?",
        "I like green apples and red pears.",
    ]
    alone = [voice.synthesize(text) for text in texts]
    together: list = [None] * len(texts)

    def work(i: int) -> None:
        together[i] = (voice if i % 2 else other).synthesize(texts[i])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(texts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert all(
        a is not None and len(a) > 8000 and np.array_equal(a, b)
        for a, b in zip(alone, together, strict=True)
    )


def test_smollm2_keeps_the_system_turn_cached_and_replies_the_same_whatever_it_served_before():
    from fdb.models.llm import SmolLm2

    llm = SmolLm2(n_threads=1, instances=1)
    system = {"role": "system", "content": "You are a helpful voice assistant. Answer concisely."}
    question = [system, {"role": "user", "content": "What is the capital of France?"}]
    first = llm.reply(question, max_tokens=16)
    assert "paris" in first.lower()
    llm.reply(
        [system, {"role": "user", "content": "What is the capital of France? And of Spain?"}],
        max_tokens=8,
    )
    assert (
        "".join(llm.stream_reply(question, max_tokens=16)).strip() == first
    )  # after a longer shared prefix
    llm.reply(
        [{"role": "system", "content": "Answer like a pirate."}, {"role": "user", "content": "Hi"}],
        max_tokens=8,
    )
    llm.reply([{"role": "user", "content": "Hi"}], max_tokens=8)  # no system turn at all
    assert llm.reply(question, max_tokens=16) == first  # after another system prompt
    with llm._context() as context:
        evaluated: list[int] = []
        original = context.eval
        context.eval = lambda tokens: (evaluated.append(len(tokens)), original(tokens))[1]
        prompt = len(
            context.tokenize(
                b"<|im_start|>system\n"
                b"You are a helpful voice assistant. Answer concisely.<|im_end|>\n"
                b"<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
                b"<|im_start|>assistant\n",
                add_bos=False,
                special=True,
            )
        )
    llm.reply(question, max_tokens=4)
    llm.reply(question, max_tokens=4)
    system_tokens = len(llm._system_tokens(context, question))
    assert system_tokens >= 10
    assert evaluated[0] == prompt - system_tokens  # the system turn came from the context's cache
    del context.eval
