"""The README.md written into every synthetic dataset (what it is, how each part is built)."""

from __future__ import annotations

from fdb.datasets import synth_v10 as v10
from fdb.datasets import synth_v15 as v15
from fdb.datasets.synth_audio import EDGE_REL_DB, GRID, RATE
from fdb.datasets.synth_voices import VOICE_PEAK, VOICES

README_MARKER = "<!-- fdb synthetic dataset -->"


def _voices() -> str:
    return "; ".join(
        f"`{key}` = {spec.name} (length_scale {spec.length_scale:g}, pitch x{spec.pitch:g})"
        for key, spec in VOICES.items()
    )


def _v10_section() -> str:
    return f"""## v1.0 (`v1.0/<subset>/<id>/`, official layout)

- `synthetic_pause_handling`: {v10.LEAD_S} s silence, part 1, a pause of \
{v10.PAUSE_S[0]}-{v10.PAUSE_S[1]} s,
  part 2, {v10.PAUSE_TAIL_S} s silence. `pause.json` = [end of part 1, start of part 2].
- `candor_pause_handling`: one conversational turn in three parts with two pauses of
  {v10.CANDOR_PAUSE_S[0]}-{v10.CANDOR_PAUSE_S[1]} s; `pause.json` lists both, in order.
- `candor_turn_taking`: a question, {v10.TURN_TAIL_S} s silence. `turn_taking.json` =
  [E, E + {v10.TURN_WINDOW_S}], E the question's end.
- `synthetic_user_interruption`: a question, a gap of \
{v10.INTERRUPT_GAP_S[0]}-{v10.INTERRUPT_GAP_S[1]} s
  (a model that answers is speaking by then), the interruption [S, R], {v10.INTERRUPT_TAIL_S} s \
silence.
  Also `context.wav` (input before S) and `interrupt.wav` (input from S to R).
- `icc_backchannel`: a monologue of consecutive sentences with \
{v10.ICC_GAP_S[0]}-{v10.ICC_GAP_S[1]} s
  between them, continued until it passes {v10.ICC_TARGET_S[0]:g}-{v10.ICC_TARGET_S[1]:g} s; no \
annotation file. Ids
  start at 0, as the official ICC ids do. The official ICC ground-truth distribution does not
  describe these samples: a backchannel JSD against it is meaningless here.
- `transcription.json` (speaker 1, the user) for every subset except the interruption: the
  phrase edges are measured, word times inside a phrase are spread in proportion to word length.
"""


def readme(sizes: dict, seed: int) -> str:
    v10_sizes = ", ".join(f"`{name}` {n}" for name, n in sizes["v10"].items())
    v15_sizes = ", ".join(f"`{name}` {n}" for name, n in sizes["v15"].items())
    return f"""{README_MARKER}
# fdb synthetic dataset (SYNTHETIC: not Full-Duplex-Bench, not Seed-TTS)

Synthetic, license-free stand-ins for Full-Duplex-Bench v1.0 and v1.5 and for a Seed-TTS test
list, written by `python -m fdb dataset synth` (`fdb.datasets.synthetic`). Its revisions read
`fdb-synth-<sha256>`; runs record them, and its numbers must never be mixed with or compared to
the official benchmark's. No recording of a real person is included: every utterance is a fixed
English sentence written for fdb (`fdb/datasets/synthetic_text.py`) spoken by Piper TTS with
noise scales 0 (deterministic), resampled to {RATE} Hz mono PCM16 and peak-normalized to
{VOICE_PEAK}. Voices: {_voices()}. The derived voices are Piper with another length_scale, then
pitch-shifted by resampling (read as if sampled x times faster), which restores the speaking rate.

Seed {seed}: the only randomness is `numpy.random.default_rng([seed, crc32(subset), id, slot])`
per draw; regenerating gives the same bytes, and a larger set extends a smaller one.

Sizes: v1.0 {v10_sizes}; v1.5 {v15_sizes}; Seed-TTS {sizes["seedtts"]} rows.

Every annotation time is a *measured* speech edge: the utterance's first and last 10 ms frame
within {-EDGE_REL_DB:g} dB of its loudest frame, at its place in the input. Every speech start
is placed on a {GRID}-sample ({GRID / RATE * 1000:g} ms) grid from the start of the file (Silero
VAD's window; a drawn pause or gap is rounded up to it), so the VAD sees each onset at the same
phase wherever a sample puts it.

{_v10_section()}
## v1.5 (`v1.5/<category>/<id>/`)

`clean_input.wav` = {v10.LEAD_S} s silence, a question, {v15.V15_CLEAN_TAIL_S} s silence; \
`input.wav` = the
same plus an overlap starting {v15.V15_GAP_S[0]}-{v15.V15_GAP_S[1]} s after the question ends, so
`clean_input.wav` is `input.wav` without the overlap. `metadata.json` "timestamps" = the
overlap's edges. The overlap: `user_interruption` the user interrupting; `user_backchannel` a
short acknowledgement by the user; `talking_to_other` the `other` voice speaking to a third
person; `background_speech` the `background` voice mixed at {v15.BACKGROUND_GAIN} of the user's \
level.

## Seed-TTS (`seedtts/en/meta.lst`)

Rows `utt_id|prompt_text|prompt-wavs/<prompt>.wav|target_text[|wavs/<utt_id>.wav]`: the prompt
voices cycle through {", ".join(v15.SEEDTTS_PROMPT_VOICES)}; odd rows also carry the target spoken
by the prompt's voice as ground truth (5 fields), even rows have 4 fields. Wavs hold the speech
with {v15.SEEDTTS_MARGIN_S} s of silence each side.

`v1.0.revision`, `v1.5.revision`, `seedtts.revision` hold `fdb-synth-` + each tree's content hash
(`fdb.datasets.pinning.tree_revision`); `synthetic.json` records the seed, sizes and voices.
"""
