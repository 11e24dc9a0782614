"""ASR window: Whisper tiny.en's word error rate and time per utterance by encoder window.

The realtime server transcribes one short utterance at a time. faster-whisper pads every call to
Whisper's 30 s window; ``FasterWhisperAsr.transcribe_utterance`` encodes the utterance plus 1 s, but
at least ``min_window_s``. This script speaks 40 fixed questions and statements with the bundled
Piper voice (200 ms of silence before, 300 ms after, as a VAD cut leaves them), transcribes each
with the full pipeline (``transcribe``: 30 s window, word timestamps) and with
``transcribe_utterance`` at several floors, and prints the WER (``scorers.listening_text``,
``fdb.text``: Whisper's English normalizer and jiwer, as the listening scores use) and the mean
milliseconds per utterance. Every hypothesis that differs from its reference is printed under its
row.

    python benchmarks/asr_window.py [--windows 30,15,10,5] [--threads 2]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fdb.audio import resample  # noqa: E402
from fdb.models.asr import ASR_RATE, FasterWhisperAsr  # noqa: E402
from fdb.models.tts import PiperTts  # noqa: E402
from fdb.text import english_normalize  # noqa: E402
from scorers.listening_text import align  # noqa: E402

SENTENCES = [
    "Why is the sky blue during the day and red at sunset?",
    "What is the capital of France?",
    "Can you tell me how to make a simple tomato soup at home with fresh tomatoes?",
    "I went to the store yesterday and bought apples, bananas and a loaf of bread.",
    "Hello.",
    "How far away is the moon from the earth?",
    "My flight leaves at seven thirty tomorrow morning, so I need to wake up early.",
    "Please remind me to call my sister on Sunday afternoon.",
    "What's the weather going to be like this weekend in Seattle?",
    "Tell me a short story about a dragon who was afraid of the dark and learned to be brave.",
    "Yes, that sounds good.",
    "Could you explain the difference between a virus and a bacterium in simple terms?",
    "I'm not sure I understand what you mean by that.",
    "Which movie won the best picture award last year?",
    "We should leave the house by eight if we want to catch the train.",
    "Do you think it will rain later today?",
    "My favorite color used to be green, but now I like blue more.",
    "How many people live in Tokyo?",
    "Can you recommend a good book about the history of Rome?",
    "The meeting was moved to Thursday because the manager was sick.",
    "What should I cook for dinner tonight if I only have rice, eggs and spinach?",
    "Thank you, that was really helpful.",
    "Is it safe to swim in the ocean after eating a big lunch?",
    "Our dog barks every time the mail carrier comes to the door.",
    "Why do cats purr when they are happy?",
    "Please turn off the lights in the kitchen before you go to bed.",
    "I would like to learn how to play the guitar this summer.",
    "What time does the pharmacy on Main Street close on weekends?",
    "She told me the concert starts at nine, but I think it's later.",
    "How do airplanes stay in the air?",
    "No, I meant the other one.",
    "Could you say that again a little more slowly?",
    "My grandmother grew up on a farm in Ireland with seven brothers.",
    "What is the best way to keep bread fresh for a whole week?",
    "I lost my keys somewhere between the office and the parking lot.",
    "Why is the ocean salty but rivers are not?",
    "Let's talk about something else for a minute.",
    "How long does it take to drive from Boston to New York?",
    "The children built a huge snowman in the park this morning.",
    "Okay.",
]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--windows", default="30,15,10,5", help="comma-separated window floors in seconds"
    )
    parser.add_argument("--threads", type=int, default=2, help="CTranslate2 CPU threads")
    args = parser.parse_args()

    tts, asr = PiperTts(deterministic=True), FasterWhisperAsr(cpu_threads=args.threads)
    clips = []
    for text in SENTENCES:
        speech = resample(tts.synthesize(text), tts.rate, ASR_RATE).astype(np.float32)
        clips.append(
            np.concatenate(
                [
                    np.zeros(ASR_RATE // 5, np.float32),
                    speech,
                    np.zeros(ASR_RATE * 3 // 10, np.float32),
                ]
            )
        )
    asr.transcribe(clips[0])  # warm up

    runs = [("full pipeline (30 s, word times)", lambda clip: asr.transcribe(clip).text)]
    runs += [
        (
            f"utterance, window >= {w:g} s",
            lambda clip, w=w: asr.transcribe_utterance(clip, min_window_s=w).text,
        )
        for w in (float(x) for x in args.windows.split(","))
    ]
    print(
        f"{len(clips)} utterances, "
        f"{sum(len(c) for c in clips) / ASR_RATE / len(clips):.2f} s on average"
    )
    print(f"{'method':<36} {'ms/utt':>7} {'WER %':>6}")
    for name, run in runs:
        start = time.perf_counter()
        hypotheses = [run(clip) for clip in clips]
        per = (time.perf_counter() - start) / len(clips) * 1000
        counts = [align(ref, hyp) for ref, hyp in zip(SENTENCES, hypotheses, strict=True)]
        wer = (
            sum(c.substitutions + c.deletions + c.insertions for c in counts)
            / sum(c.reference_words for c in counts)
            * 100
        )
        print(f"{name:<36} {per:>7.0f} {wer:>6.1f}")
        for ref, hyp in zip(SENTENCES, hypotheses, strict=True):
            if english_normalize(hyp) != english_normalize(ref):
                print(f"    {hyp.strip()[:160]!r}")


if __name__ == "__main__":
    main()
