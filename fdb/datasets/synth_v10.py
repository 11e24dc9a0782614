"""Sample builders of the synthetic FDB v1.0 subsets (one function per subset).

Each builder writes one sample folder in the official layout and returns the input's duration.
Every annotation time is a measured speech edge (``synth_audio``), and every speech start is on
Silero's 32 ms grid. Layout and timing of each subset are described in the dataset README
(``synthetic._readme``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from fdb.audio import write_wav
from fdb.datasets.synth_audio import RATE, Timeline, on_grid, seconds, word_times
from fdb.datasets.synth_voices import SynthContext
from fdb.datasets.synthetic_text import (
    CANDOR_PAUSE_PARTS,
    ICC_SENTENCES,
    INTERRUPTIONS,
    PAUSE_PARTS,
    QUESTIONS,
    pick,
)
from fdb.io import atomic_write_json

LEAD_S = 0.5  # silence before the first word (rounded up to the grid: 0.512 s)
PAUSE_S = (1.5, 2.5)
PAUSE_TAIL_S = 1.0
CANDOR_PAUSE_S = (1.0, 2.0)
TURN_TAIL_S = 5.0
TURN_WINDOW_S = 0.4
INTERRUPT_GAP_S = (2.5, 3.0)  # question end -> interruption start (a replying model is talking)
INTERRUPT_TAIL_S = 5.0
ICC_TARGET_S = (30.0, 36.0)  # monologue length (ICC samples are long stretches of one talker)
ICC_GAP_S = (0.35, 0.8)  # between sentences: where a listener would backchannel
ICC_TAIL_S = 1.0


def n_samples(seconds_: float) -> int:
    return int(round(seconds_ * RATE))


def lead() -> int:
    return on_grid(n_samples(LEAD_S))


def write_input(sample_dir: Path, name: str, audio: np.ndarray) -> float:
    write_wav(sample_dir / name, audio, RATE)
    return len(audio) / RATE


def _transcription(sample_dir: Path, phrases: list[tuple[str, int, int]]) -> None:
    """``transcription.json`` (speaker 1 = the user) from (text, start, end) phrases."""
    words = [w for text, a, b in phrases for w in word_times(text, seconds(a), seconds(b))]
    atomic_write_json(sample_dir / "transcription.json", [{"speaker": 1, "item": words}])


def _spoken_with_pauses(
    ctx: SynthContext,
    subset: str,
    number: int,
    parts: tuple[str, ...],
    bounds: tuple[float, float],
    sample_dir: Path,
) -> float:
    """One user turn cut into ``parts`` with a pause between consecutive parts."""
    line = Timeline()
    phrases, pauses = [], []
    position = lead()
    for slot, text in enumerate(parts):
        if slot:
            position = on_grid(phrases[-1][2] + ctx.draw(subset, number, bounds, slot))
        start, end = line.put(ctx.voices.clip("user", text), position)
        if slot:
            pauses.append(
                {"text": "[PAUSE]", "timestamp": [seconds(phrases[-1][2]), seconds(start)]}
            )
        phrases.append((text, start, end))
    atomic_write_json(sample_dir / "pause.json", pauses)
    _transcription(sample_dir, phrases)
    return write_input(
        sample_dir, "input.wav", line.samples(phrases[-1][2] + n_samples(PAUSE_TAIL_S))
    )


def pause_sample(ctx: SynthContext, number: int, sample_dir: Path) -> float:
    """synthetic_pause_handling: part 1, a 1.5-2.5 s pause, part 2, 1 s of silence."""
    return _spoken_with_pauses(
        ctx, "synthetic_pause_handling", number, pick(PAUSE_PARTS, number), PAUSE_S, sample_dir
    )


def candor_pause_sample(ctx: SynthContext, number: int, sample_dir: Path) -> float:
    """candor_pause_handling: a conversational turn in three parts with two 1-2 s pauses."""
    return _spoken_with_pauses(
        ctx,
        "candor_pause_handling",
        number,
        pick(CANDOR_PAUSE_PARTS, number),
        CANDOR_PAUSE_S,
        sample_dir,
    )


def turn_sample(ctx: SynthContext, number: int, sample_dir: Path) -> float:
    """candor_turn_taking: a question, 5 s of silence; E is the question's measured end."""
    question = ctx.voices.clip("user", pick(QUESTIONS, number))
    line = Timeline()
    start, end = line.put(question, lead())
    stamp = [seconds(end), seconds(end + n_samples(TURN_WINDOW_S))]
    atomic_write_json(
        sample_dir / "turn_taking.json", [{"text": "[TURN-TAKING]", "timestamp": stamp}]
    )
    _transcription(sample_dir, [(question.text, start, end)])
    return write_input(sample_dir, "input.wav", line.samples(end + n_samples(TURN_TAIL_S)))


def interrupt_sample(ctx: SynthContext, number: int, sample_dir: Path) -> float:
    """synthetic_user_interruption: question, 2.5-3 s gap, the interruption [S, R], 5 s."""
    context_text, interrupt_text = pick(INTERRUPTIONS, number)
    context, interrupt = (
        ctx.voices.clip("user", context_text),
        ctx.voices.clip("user", interrupt_text),
    )
    line = Timeline()
    _, question_end = line.put(context, lead())
    gap = ctx.draw("synthetic_user_interruption", number, INTERRUPT_GAP_S)
    s, r = line.put(interrupt, on_grid(question_end + gap))
    audio = line.samples(r + n_samples(INTERRUPT_TAIL_S))
    atomic_write_json(
        sample_dir / "interrupt.json",
        [
            {
                "context": context_text,
                "interrupt": interrupt_text,
                "timestamp": [seconds(s), seconds(r)],
            }
        ],
    )
    write_input(sample_dir, "context.wav", audio[:s])
    write_input(sample_dir, "interrupt.wav", audio[s:r])
    return write_input(sample_dir, "input.wav", audio)


def icc_sample(ctx: SynthContext, number: int, sample_dir: Path) -> float:
    """icc_backchannel: a 30-36 s monologue of consecutive sentences; no annotation file."""
    target = n_samples(LEAD_S) + ctx.draw("icc_backchannel", number, ICC_TARGET_S)
    line = Timeline()
    phrases: list[tuple[str, int, int]] = []
    position, k = lead(), 0
    while not phrases or phrases[-1][2] < target:
        text = ICC_SENTENCES[(5 * number + k) % len(ICC_SENTENCES)]
        if phrases:
            position = on_grid(phrases[-1][2] + ctx.draw("icc_backchannel", number, ICC_GAP_S, k))
        start, end = line.put(ctx.voices.clip("user", text), position)
        phrases.append((text, start, end))
        k += 1
    _transcription(sample_dir, phrases)
    return write_input(
        sample_dir, "input.wav", line.samples(phrases[-1][2] + n_samples(ICC_TAIL_S))
    )


V10_BUILDERS: dict[str, Callable[[SynthContext, int, Path], float]] = {
    "synthetic_pause_handling": pause_sample,
    "candor_pause_handling": candor_pause_sample,
    "candor_turn_taking": turn_sample,
    "synthetic_user_interruption": interrupt_sample,
    "icc_backchannel": icc_sample,
}
# Official ICC ids start at 0 ("0" ... "54"); the other subsets' examples start at 1.
FIRST_ID = {"icc_backchannel": 0}
