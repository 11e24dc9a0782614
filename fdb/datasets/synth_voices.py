"""The voices of fdb's synthetic datasets, all derived deterministically from one Piper voice.

Only the en_US joe voice ships offline, so the other talkers are derived from it: Piper with a
different ``length_scale`` (slower or faster phonemes), then a pitch shift by resampling (the
audio is read as if it had been sampled ``pitch`` times faster, which raises pitch and formants
by that factor and shortens it by the same factor, undoing the length change). A factor of 1.25
is about +3.9 semitones with formants moved like a smaller speaker's; 0.8 is about -3.9
semitones, a larger one. Noise scales are 0, so every voice gives the same bytes on every run.

- ``user``: joe as shipped, the user in every sample;
- ``other``: joe x1.25, the second voice of talking_to_other (someone the user's turn is not for)
  and of half the Seed-TTS prompts;
- ``background``: joe x0.8, the background talker of background_speech, mixed at a lower level.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel

from fdb.audio import resample
from fdb.datasets.synth_audio import RATE, Clip
from fdb.errors import FdbError
from fdb.models.tts import PiperTts

VOICE_PEAK = 0.6  # every utterance is peak-normalized to this level


class VoiceSpec(BaseModel):
    """How one synthetic talker is derived from the base Piper voice."""

    name: str
    length_scale: float = 1.0  # Piper's phoneme duration factor
    pitch: float = 1.0  # resampling factor: > 1 raises pitch and formants


VOICES: dict[str, VoiceSpec] = {
    "user": VoiceSpec(name="joe"),
    "other": VoiceSpec(name="joe-x1.25", length_scale=1.25, pitch=1.25),
    "background": VoiceSpec(name="joe-x0.8", length_scale=0.8, pitch=0.8),
}


def _piper_for(spec: VoiceSpec):
    return PiperTts(
        deterministic=True, length_scale=None if spec.length_scale == 1.0 else spec.length_scale
    )


class VoiceBank:
    """Synthesizes each (voice, text) once: 16 kHz, peak-normalized, speech edges measured.

    ``VoiceBank.piper()`` loads one Piper instance per voice (lazily). ``VoiceBank(tts)`` uses a
    single backend for every voice (any object with ``rate`` and ``synthesize(text)``; tests pass
    a fake): the pitch shift still applies, the length scale cannot and is recorded as 1.
    """

    def __init__(self, tts=None, factory: Callable[[VoiceSpec], object] | None = None) -> None:
        if (tts is None) == (factory is None):
            raise ValueError("give exactly one of tts and factory")
        self._factory = factory
        self._single = tts
        self._backends: dict[str, object] = {}
        self._cache: dict[tuple[str, str], Clip] = {}

    @classmethod
    def piper(cls) -> VoiceBank:
        return cls(factory=_piper_for)

    def fresh(self) -> VoiceBank:
        """A bank on the same loaded backends with an empty clip cache (everything is synthesized
        again; used to check that two generations give the same bytes without reloading Piper)."""
        bank = VoiceBank(tts=self._single, factory=self._factory)
        bank._backends = self._backends
        return bank

    def _backend(self, voice: str):
        if self._single is not None:
            return self._single
        if voice not in self._backends:
            self._backends[voice] = self._factory(VOICES[voice])
        return self._backends[voice]

    def clip(self, voice: str, text: str) -> Clip:
        key = (voice, text)
        if key not in self._cache:
            tts = self._backend(voice)
            source_rate = int(round(int(tts.rate) * VOICES[voice].pitch))
            audio = resample(tts.synthesize(text), source_rate, RATE)
            peak = float(np.abs(audio).max()) if len(audio) else 0.0
            if peak <= 0.0:
                raise FdbError(f"the TTS returned silence for {text!r}", "check the Piper voice")
            self._cache[key] = Clip.measure(text, (audio * (VOICE_PEAK / peak)).astype(np.float32))
        return self._cache[key]

    def identity(self) -> dict[str, object]:
        """The base backend's identity (no local paths) and the voice derivations."""
        base = self._backend("user")
        identity = getattr(base, "identity", None)
        if identity is None:
            data: dict[str, object] = {"name": type(base).__name__}
        else:
            data = (
                identity.model_dump(mode="json")
                if hasattr(identity, "model_dump")
                else dict(identity)
            )
        data.pop("checkpoint", None)  # a local path: differs between machines
        data.pop("settings", None)
        voices = {key: spec.model_dump() for key, spec in VOICES.items()}
        if self._single is not None:
            for spec in voices.values():
                spec["length_scale"] = 1.0
        return {"base": data, "voices": voices}


@dataclass(frozen=True)
class SynthContext:
    """What every sample builder needs: the voices and the seed of the per-sample draws."""

    voices: VoiceBank
    seed: int

    def draw(self, name: str, number: int, bounds: tuple[float, float], slot: int = 0) -> int:
        """A per-sample draw in ``bounds`` seconds on a 10 ms grid, as samples.

        The generator is ``numpy.random.default_rng([seed, crc32(name), number, slot])``, so a
        draw depends only on the seed, the subset, the sample number and the slot.
        """
        rng = np.random.default_rng([self.seed, zlib.crc32(name.encode()), number, slot])
        return int(round(round(float(rng.uniform(*bounds)), 2) * RATE))
