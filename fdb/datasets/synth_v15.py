"""Builders of the synthetic FDB v1.5 pairs and the synthetic Seed-TTS-format list."""

from __future__ import annotations

from pathlib import Path

from fdb.audio import write_wav
from fdb.datasets.synth_audio import RATE, Timeline, on_grid, seconds
from fdb.datasets.synth_v10 import lead, n_samples, write_input
from fdb.datasets.synth_voices import SynthContext
from fdb.datasets.synthetic_text import (
    QUESTIONS,
    SEEDTTS_PROMPTS,
    SEEDTTS_TARGETS,
    V15_OVERLAPS,
    pick,
)
from fdb.datasets.types import V15_CATEGORIES
from fdb.io import atomic_write_json, atomic_write_text

BACKGROUND_GAIN = 0.2  # background talker, relative to the user's level (about -14 dB)
V15_GAP_S = (2.25, 2.75)  # question end -> overlap start
V15_CLEAN_TAIL_S = 6.0
V15_MIN_TAIL_S = 1.0
OVERLAP_VOICE = {
    "user_interruption": "user",
    "user_backchannel": "user",
    "talking_to_other": "other",
    "background_speech": "background",
}
SEEDTTS_PROMPT_VOICES = ("user", "other", "background")
SEEDTTS_MARGIN_S = 0.1  # silence kept around the speech of a prompt / ground-truth wav


def v15_pair(ctx: SynthContext, category: str, number: int, pair_dir: Path) -> float:
    """clean_input = question + 6 s; input = the same plus the overlap ~2.5 s after its end.

    The overlap is the user (interruption, backchannel), a second voice speaking to someone
    else (talking_to_other) or a third voice at ``BACKGROUND_GAIN`` (background_speech).
    """
    offset = 3 * (V15_CATEGORIES.index(category) + 1)
    question = ctx.voices.clip("user", pick(QUESTIONS, number, offset))
    overlap = ctx.voices.clip(OVERLAP_VOICE[category], pick(V15_OVERLAPS[category], number))
    clean, mixed = Timeline(), Timeline()
    clean.put(question, lead())
    _, end = mixed.put(question, lead())
    gain = BACKGROUND_GAIN if category == "background_speech" else 1.0
    start, stop = mixed.put(
        overlap, on_grid(end + ctx.draw(category, number, V15_GAP_S)), gain=gain
    )
    length = max(end + n_samples(V15_CLEAN_TAIL_S), stop + n_samples(V15_MIN_TAIL_S))
    atomic_write_json(
        pair_dir / "metadata.json",
        {
            "context_text": "",
            "current_turn_text": question.text,
            "timestamps": [seconds(start), seconds(stop)],
        },
    )
    write_input(pair_dir, "clean_input.wav", clean.samples(length))
    return write_input(pair_dir, "input.wav", mixed.samples(length))


def _speech_only(ctx: SynthContext, voice: str, text: str):
    """The clip cut to its measured speech plus ``SEEDTTS_MARGIN_S`` of silence each side."""
    clip = ctx.voices.clip(voice, text)
    margin = n_samples(SEEDTTS_MARGIN_S)
    line = Timeline()
    _, end = line.put(clip, margin)
    return line.samples(end + margin)


def seedtts_row(ctx: SynthContext, number: int, lang_dir: Path) -> tuple[str, float]:
    """One ``meta.lst`` row; odd rows also get a ground-truth wav (5 fields), even rows 4."""
    voice = SEEDTTS_PROMPT_VOICES[(number - 1) % len(SEEDTTS_PROMPT_VOICES)]
    prompt_id, target_id = f"fdbsynth_en_p{number:03d}", f"fdbsynth_en_t{number:03d}"
    utt = f"{prompt_id}-{target_id}"
    prompt_text, target_text = pick(SEEDTTS_PROMPTS, number), pick(SEEDTTS_TARGETS, number)
    prompt = _speech_only(ctx, voice, prompt_text)
    write_wav(lang_dir / "prompt-wavs" / f"{prompt_id}.wav", prompt, RATE)
    fields = [utt, prompt_text, f"prompt-wavs/{prompt_id}.wav", target_text]
    seconds_ = len(prompt) / RATE
    if number % 2 == 1:
        truth = _speech_only(ctx, voice, target_text)
        write_wav(lang_dir / "wavs" / f"{utt}.wav", truth, RATE)
        fields.append(f"wavs/{utt}.wav")
        seconds_ += len(truth) / RATE
    return "|".join(fields), seconds_


def seedtts_list(ctx: SynthContext, rows: int, seedtts_root: Path, progress=None) -> float:
    """Write ``seedtts_root/en/meta.lst`` with ``rows`` rows plus their wavs; returns audio
    seconds."""
    lang_dir = seedtts_root / "en"
    lang_dir.mkdir(parents=True, exist_ok=True)
    lines, total = [], 0.0
    for number in range(1, rows + 1):
        line, seconds_ = seedtts_row(ctx, number, lang_dir)
        lines.append(line)
        total += seconds_
        if progress is not None:
            progress(f"seedtts/en/{number}")
    atomic_write_text(lang_dir / "meta.lst", "".join(f"{line}\n" for line in lines))
    return total
