"""fdb's synthetic datasets: small, license-free trees in the official v1.0/v1.5 layouts.

``generate_synthetic(root)`` writes ``root/v1.0/<subset>/<id>/`` and ``root/v1.5/<category>/<id>/``
with 16 kHz mono PCM16 inputs spoken by Piper (joe, deterministic), annotations placed at the
*measured* speech edges, a README and ``root/v1.0.revision``, ``root/v1.5.revision``. The same
arguments give the same bytes on every run: the only randomness is a fixed-seed
``numpy.random.default_rng`` per sample, so a larger set extends a smaller one.
"""

from __future__ import annotations

import os
import shutil
import time
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
from pydantic import BaseModel

from fdb.audio import resample, write_wav
from fdb.datasets.pinning import read_revision, tree_revision, write_revision
from fdb.datasets.synth_audio import EDGE_REL_DB, RATE, Clip, Timeline, seconds, word_times
from fdb.datasets.synthetic_text import INTERRUPTIONS, PAUSE_PARTS, QUESTIONS, V15_OVERLAPS, pick
from fdb.datasets.types import V15_CATEGORIES
from fdb.errors import FdbError
from fdb.io import atomic_write_json, atomic_write_text

SEED = 20250617
VOICE_PEAK = 0.6  # every utterance is peak-normalized to this level
BACKGROUND_GAIN = 0.2  # background talker, relative to VOICE_PEAK (about -14 dB)
LEAD_S = 0.5
PAUSE_S = (1.5, 2.5)
PAUSE_TAIL_S = 1.0
TURN_TAIL_S = 5.0
TURN_WINDOW_S = 0.4
INTERRUPT_GAP_S = (2.5, 3.0)  # question end -> interruption start (a replying model is talking)
INTERRUPT_TAIL_S = 5.0
V15_GAP_S = (2.25, 2.75)  # question end -> overlap start
V15_CLEAN_TAIL_S = 6.0
V15_MIN_TAIL_S = 1.0
V10_SYNTHETIC_SUBSETS = ("synthetic_pause_handling", "candor_turn_taking",
                         "synthetic_user_interruption")
README_MARKER = "<!-- fdb synthetic dataset -->"


class SyntheticReport(BaseModel):
    """What ``generate_synthetic`` wrote."""

    root: Path
    v10_revision: str
    v15_revision: str
    samples: dict[str, int]  # "v1.0/<subset>" or "v1.5/<category>" -> count
    input_seconds: dict[str, float]  # same keys -> total input.wav duration
    elapsed_s: float
    tts: dict[str, object]


class _Voice:
    """Synthesizes each text once (16 kHz, peak-normalized) and measures its speech edges."""

    def __init__(self, tts) -> None:
        self.tts = tts
        self._cache: dict[str, Clip] = {}

    def clip(self, text: str) -> Clip:
        if text not in self._cache:
            audio = resample(self.tts.synthesize(text), int(self.tts.rate), RATE)
            peak = float(np.abs(audio).max()) if len(audio) else 0.0
            if peak <= 0.0:
                raise FdbError(f"the TTS returned silence for {text!r}", "check the Piper voice")
            self._cache[text] = Clip.measure(text, (audio * (VOICE_PEAK / peak)).astype(np.float32))
        return self._cache[text]


def _n(seconds_: float) -> int:
    return int(round(seconds_ * RATE))


def _draw(name: str, number: int, bounds: tuple[float, float]) -> int:
    """A per-sample draw in ``bounds`` seconds, on a 10 ms grid, as samples."""
    rng = np.random.default_rng([SEED, zlib.crc32(name.encode()), number])
    return _n(round(float(rng.uniform(*bounds)), 2))


def _write_input(sample_dir: Path, name: str, audio: np.ndarray) -> float:
    write_wav(sample_dir / name, audio, RATE)
    return len(audio) / RATE


def _pause_sample(voice: _Voice, number: int, sample_dir: Path) -> float:
    """Part 1, a 1.5-2.5 s pause between the measured edges, part 2, then 1 s of silence."""
    part1, part2 = (voice.clip(t) for t in pick(PAUSE_PARTS, number))
    line = Timeline()
    s1, a = line.put(part1, _n(LEAD_S))
    b, e2 = line.put(part2, a + _draw("synthetic_pause_handling", number, PAUSE_S))
    atomic_write_json(sample_dir / "pause.json", [{"text": "[PAUSE]", "timestamp": [seconds(a), seconds(b)]}])
    words = word_times(part1.text, seconds(s1), seconds(a)) + word_times(part2.text, seconds(b), seconds(e2))
    atomic_write_json(sample_dir / "transcription.json", [{"speaker": 1, "item": words}])
    return _write_input(sample_dir, "input.wav", line.samples(e2 + _n(PAUSE_TAIL_S)))


def _turn_sample(voice: _Voice, number: int, sample_dir: Path) -> float:
    """0.5 s of silence, a question, 5 s of silence; E is the question's measured end."""
    question = voice.clip(pick(QUESTIONS, number))
    line = Timeline()
    start, end = line.put(question, _n(LEAD_S))
    stamp = [seconds(end), seconds(end + _n(TURN_WINDOW_S))]
    atomic_write_json(sample_dir / "turn_taking.json", [{"text": "[TURN-TAKING]", "timestamp": stamp}])
    words = word_times(question.text, seconds(start), seconds(end))
    atomic_write_json(sample_dir / "transcription.json", [{"speaker": 1, "item": words}])
    return _write_input(sample_dir, "input.wav", line.samples(end + _n(TURN_TAIL_S)))


def _interrupt_sample(voice: _Voice, number: int, sample_dir: Path) -> float:
    """Question, 2.5-3 s for the model to start answering, the interruption [S, R], 5 s."""
    context_text, interrupt_text = pick(INTERRUPTIONS, number)
    context, interrupt = voice.clip(context_text), voice.clip(interrupt_text)
    line = Timeline()
    _, question_end = line.put(context, _n(LEAD_S))
    s, r = line.put(interrupt, question_end + _draw("synthetic_user_interruption", number, INTERRUPT_GAP_S))
    audio = line.samples(r + _n(INTERRUPT_TAIL_S))
    atomic_write_json(sample_dir / "interrupt.json", [
        {"context": context_text, "interrupt": interrupt_text, "timestamp": [seconds(s), seconds(r)]}
    ])
    _write_input(sample_dir, "context.wav", audio[:s])
    _write_input(sample_dir, "interrupt.wav", audio[s:r])
    return _write_input(sample_dir, "input.wav", audio)


def _v15_pair(voice: _Voice, category: str, number: int, pair_dir: Path) -> float:
    """clean_input = question + 6 s; input = the same plus the overlap ~2.5 s after its end."""
    offset = 3 * (V15_CATEGORIES.index(category) + 1)
    question = voice.clip(pick(QUESTIONS, number, offset))
    overlap = voice.clip(pick(V15_OVERLAPS[category], number))
    clean, mixed = Timeline(), Timeline()
    clean.put(question, _n(LEAD_S))
    _, end = mixed.put(question, _n(LEAD_S))
    gain = BACKGROUND_GAIN if category == "background_speech" else 1.0
    start, stop = mixed.put(overlap, end + _draw(category, number, V15_GAP_S), gain=gain)
    length = max(end + _n(V15_CLEAN_TAIL_S), stop + _n(V15_MIN_TAIL_S))
    atomic_write_json(pair_dir / "metadata.json", {
        "context_text": "", "current_turn_text": question.text,
        "timestamps": [seconds(start), seconds(stop)],
    })
    _write_input(pair_dir, "clean_input.wav", clean.samples(length))
    return _write_input(pair_dir, "input.wav", mixed.samples(length))


V10_BUILDERS: dict[str, Callable[[_Voice, int, Path], float]] = {
    "synthetic_pause_handling": _pause_sample,
    "candor_turn_taking": _turn_sample,
    "synthetic_user_interruption": _interrupt_sample,
}


def generate_synthetic(root: Path, v10_per_subset: int = 3, v15_per_category: int = 2,
                       tts=None) -> SyntheticReport:
    """Write the synthetic v1.0 and v1.5 trees, their revision files and a README under ``root``.

    ``tts`` defaults to ``PiperTts(deterministic=True)``; any backend with ``rate``,
    ``synthesize(text)`` and ``identity`` works. Existing synthetic trees under ``root`` are
    replaced; a ``root`` holding other data is refused.
    """
    if v10_per_subset < 0 or v15_per_category < 0:
        raise FdbError("sample counts must be >= 0", "pass v10_per_subset/v15_per_category >= 0")
    began = time.perf_counter()
    root = Path(root)
    if tts is None:
        from fdb.models.tts import PiperTts

        tts = PiperTts(deterministic=True)
    identity = _tts_identity(tts)
    _prepare_root(root)
    atomic_write_text(root / "README.md", _readme(identity, v10_per_subset, v15_per_category))
    voice = _Voice(tts)
    samples: dict[str, int] = {}
    seconds_: dict[str, float] = {}
    for subset, build in V10_BUILDERS.items():
        durations = [build(voice, k, _fresh_dir(root / "v1.0" / subset / str(k)))
                     for k in range(1, v10_per_subset + 1)]
        samples[f"v1.0/{subset}"], seconds_[f"v1.0/{subset}"] = len(durations), round(sum(durations), 3)
    for category in V15_CATEGORIES:
        durations = [_v15_pair(voice, category, k, _fresh_dir(root / "v1.5" / category / str(k)))
                     for k in range(1, v15_per_category + 1)]
        samples[f"v1.5/{category}"], seconds_[f"v1.5/{category}"] = len(durations), round(sum(durations), 3)
    v10_rev = write_revision(root / "v1.0", root / "v1.0.revision")
    v15_rev = write_revision(root / "v1.5", root / "v1.5.revision")
    return SyntheticReport(root=root, v10_revision=v10_rev, v15_revision=v15_rev, samples=samples,
                           input_seconds=seconds_, elapsed_s=round(time.perf_counter() - began, 3),
                           tts=identity)


def _fresh_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def _prepare_root(root: Path) -> None:
    """Remove earlier synthetic trees and revisions (a dataset is complete only once its revision
    files are written again); refuse a root whose trees are not marked synthetic."""
    trees = [root / "v1.0", root / "v1.5"]
    if any(t.exists() for t in trees) and not is_synthetic(root):
        raise FdbError(f"{root} already holds v1.0/ or v1.5/ trees that are not fdb's synthetic data",
                       "choose an empty directory for the synthetic dataset")
    for tree in trees:
        if tree.exists():
            shutil.rmtree(tree)
    root.mkdir(parents=True, exist_ok=True)
    for name in ("v1.0.revision", "v1.5.revision"):
        (root / name).unlink(missing_ok=True)


def is_synthetic(root: Path) -> bool:
    """True when ``root`` carries the synthetic dataset's README marker."""
    try:
        return README_MARKER in (Path(root) / "README.md").read_text(encoding="utf-8")
    except OSError:
        return False


def _tts_identity(tts) -> dict[str, object]:
    identity = getattr(tts, "identity", None)
    if identity is None:
        return {"name": type(tts).__name__}
    data = identity.model_dump(mode="json") if hasattr(identity, "model_dump") else dict(identity)
    data.pop("checkpoint", None)  # a local path: differs between machines
    return data


def _readme(identity: dict[str, object], v10_per_subset: int, v15_per_category: int) -> str:
    v10 = ", ".join(f"`{s}`" for s in V10_SYNTHETIC_SUBSETS)
    v15 = ", ".join(f"`{c}`" for c in V15_CATEGORIES)
    return f"""{README_MARKER}
# fdb synthetic dataset

Synthetic, license-free stand-ins for Full-Duplex-Bench v1.0 and v1.5, written by
`fdb.datasets.synthetic.generate_synthetic`. No recording of a real person is included: every
utterance is a fixed English sentence written for fdb (`fdb/datasets/synthetic_text.py`) spoken
by Piper TTS (voice {identity.get("name")}, piper-tts {identity.get("version")}, voice sha256
{identity.get("checkpoint_sha256")}) with noise scales 0 (deterministic), resampled to 16 kHz
mono PCM16 and peak-normalized to {VOICE_PEAK}. The only randomness is a fixed-seed
`numpy.random.default_rng([{SEED}, crc32(subset), id])` per sample; regenerating gives the
same bytes, and a larger set extends a smaller one (ids 1, 2, ...).

Use it to smoke-test a system and the pipeline. Its numbers are not comparable to the
official benchmark's.

Layout (the official one): `v1.0/<subset>/<id>/` for {v10} ({v10_per_subset} each;
`candor_pause_handling` and `icc_backchannel` are not synthesized), and
`v1.5/<category>/<id>/` for {v15} ({v15_per_category} each). `v1.0.revision` and
`v1.5.revision` hold each tree's content hash (`fdb.datasets.pinning.tree_revision`).

Every annotation time is a *measured* speech edge: each utterance's first and last 10 ms frame
within {-EDGE_REL_DB:g} dB of its loudest frame, at its place in the input.

- `synthetic_pause_handling`: {LEAD_S} s silence, part 1, a pause of {PAUSE_S[0]}-{PAUSE_S[1]} s,
  part 2, {PAUSE_TAIL_S} s silence. `pause.json` = [end of part 1, start of part 2].
- `candor_turn_taking`: {LEAD_S} s silence, a question, {TURN_TAIL_S} s silence.
  `turn_taking.json` = [E, E + {TURN_WINDOW_S}], E the question's end.
- `synthetic_user_interruption`: {LEAD_S} s silence, a question, a gap of
  {INTERRUPT_GAP_S[0]}-{INTERRUPT_GAP_S[1]} s (a model that answers is speaking by then), the
  interruption [S, R], {INTERRUPT_TAIL_S} s silence.
  Also `context.wav` (input before S) and `interrupt.wav` (input from S to R).
- v1.5: `clean_input.wav` = {LEAD_S} s silence, a question, {V15_CLEAN_TAIL_S} s silence; `input.wav`
  = the same plus the overlap starting {V15_GAP_S[0]}-{V15_GAP_S[1]} s after the question ends
  (an interruption, a backchannel, speech to someone else, or a background talker mixed at
  {BACKGROUND_GAIN} of the voice's level). `metadata.json` "timestamps" = the overlap's edges.
- `transcription.json` (speaker 1): word times inside each measured phrase are an estimate,
  spread in proportion to word length.
"""


def synthetic_complete(root: Path) -> bool:
    """True when ``root`` is a finished synthetic dataset whose trees match their revisions."""
    root = Path(root)
    if not is_synthetic(root):
        return False
    for tree in ("v1.0", "v1.5"):
        stored = read_revision(root / f"{tree}.revision")
        if stored is None or not (root / tree).is_dir() or tree_revision(root / tree) != stored:
            return False
    return True


def ensure_synthetic(work: Path, tts=None, v10_per_subset: int = 3,
                     v15_per_category: int = 2) -> Path:
    """Return ``work/dataset/synthetic``, generating it first when missing or incomplete.

    Generation happens in a hidden sibling directory that is renamed into place, so a killed
    run never leaves a half-written dataset that looks complete.
    """
    dest = Path(work) / "dataset" / "synthetic"
    if synthetic_complete(dest):
        return dest
    if dest.exists() and any(dest.iterdir()) and not is_synthetic(dest):
        raise FdbError(f"{dest} holds files that are not fdb's synthetic dataset",
                       "move them away, then rerun")
    staging = dest.parent / f".synthetic.tmp-{os.getpid()}"
    if staging.exists():
        shutil.rmtree(staging)
    generate_synthetic(staging, v10_per_subset, v15_per_category, tts)
    if dest.exists():
        shutil.rmtree(dest)
    os.replace(staging, dest)
    return dest
