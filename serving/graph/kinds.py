"""The options of the component kinds a session node can declare (pydantic models that forbid
unknown options); the kinds themselves, their roles and formats are entries of
``serving.graph.registry``. The guide's service kinds are registered so its profiles validate;
the embedded kinds (``whisper_transcription``, ``llama_chat``, ``piper_speech``) run on the
offline models and have node adapters in ``serving.graph.nodes``; the GPU kinds
(``whisper_gpu``, ``causal_lm_gpu``) run torch/transformers models shared by every session and
batched across them (``serving.gpu``). The GPU node of a system's backends (``csm_gpu``:
:class:`GpuNode`) has its options here too. The ``native`` kinds (``duplex_baseline``,
``moshi_gpu``) are the one node of a native system's graph: the whole session, which the
native session protocol runs on the graph runtime (their nodes: ``serving.duplex``).
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from fdb.errors import FdbError
from serving.weights import WeightSource

HTTP_URL = r"^https?://"
WS_URL = r"^wss?://"
EXTRA_BODY_RESERVED = ("model", "messages", "stream", "max_tokens", "temperature")


class KindOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    timeout_s: float = Field(120.0, gt=0)


class RealtimeTranscriptionOptions(KindOptions):
    """A realtime transcription service over a WebSocket (``base_url``, ``model``)."""

    base_url: str = Field(pattern=WS_URL)
    model: str
    api_key_env: str = "OPENAI_API_KEY"


class OpenAiTranscriptionOptions(KindOptions):
    """An OpenAI-compatible ``/audio/transcriptions`` service, one request per utterance."""

    base_url: str = Field(pattern=HTTP_URL)
    model: str
    language: str = ""
    response_format: str = Field("verbose_json", pattern=r"^(verbose_json|json)$")
    api_key_env: str = "OPENAI_API_KEY"


class RunningTranscriptOptions(KindOptions):
    """The guide's running-transcript kind (audio, session and ``text`` in), declared only."""

    tail_ms: float = Field(400.0, ge=0)


class DialogOptions(KindOptions):
    """The session's conversation: turns, history and interruptions (its node: dialog_node)."""

    system_prompt: str = "You are a helpful voice assistant. Answer concisely."
    max_history_chars: int = Field(65536, gt=0)
    max_text_chars: int = Field(16000, gt=0)


class OpenAiChatOptions(KindOptions):
    """An OpenAI-compatible ``/chat/completions`` service, streamed."""

    base_url: str = Field(pattern=HTTP_URL)
    model: str
    max_tokens: int = Field(512, gt=0)
    temperature: float | None = Field(None, ge=0, le=2)
    extra_body: dict = Field(default_factory=dict)
    api_key_env: str = "OPENAI_API_KEY"

    @field_validator("extra_body")
    @classmethod
    def _no_reserved(cls, value: dict) -> dict:
        reserved = [k for k in EXTRA_BODY_RESERVED if k in value]
        if reserved:
            raise ValueError(f"extra_body cannot set {reserved}")
        return value


class OpenAiSpeechOptions(KindOptions):
    """An OpenAI-compatible ``/audio/speech`` service, one request per sentence."""

    base_url: str = Field(pattern=HTTP_URL)
    model: str
    voice: str = "default"
    reference_audio_path: str = ""
    reference_text: str = ""
    language: str = ""
    max_sentence_words: int = Field(24, gt=0)
    api_key_env: str = "OPENAI_API_KEY"


class WhisperTranscriptionOptions(KindOptions):
    """The embedded faster-whisper tiny.en recognizer; ``pad_ms`` of audio is kept after
    the speech end (at most the system's ``prefetch_ms``, so that a pause's transcription starts
    at the pause). ``window_s``: each utterance is encoded in a window of the utterance plus 1 s,
    at least this long (``FasterWhisperAsr.transcribe_utterance``). Default 10 s, the shortest
    before Whisper repeats itself: a shorter window is faster for a slightly higher WER and brings
    the cascade's first audio earlier (measured: docs/benchmarks.md#embedded-asr). Null: the full
    30 s pipeline."""

    pad_ms: int = Field(200, ge=0)
    window_s: float | None = Field(10.0, ge=10, le=30)


class LlamaChatOptions(KindOptions):
    """The embedded SmolLM2 (llama.cpp) reply model."""

    max_tokens: int = Field(48, gt=0)
    temperature: float = Field(0.0, ge=0, le=2)


class PiperSpeechOptions(KindOptions):
    """The embedded Piper voice, resampled to 24 kHz pcm_f32le, one synthesis per sentence."""

    deterministic: bool = False
    length_scale: float | None = Field(None, gt=0)


class SileroGpuOptions(KindOptions):
    """``silero_gpu``: the ``vad`` stage with one Silero network for every session
    (:class:`fdb.models.vad.SileroBatch` on ``device``, ``serving.gpu.silero``), where the stage
    runs a model of its own per session on the CPU: each session's frames go with the next call,
    which scores the waiting frames of all sessions at once (at most ``max_batch``). The events,
    settings and controls are the ``vad`` stage's."""

    device: str = Field("cuda", pattern=r"^(cpu|cuda(:[0-9]+)?)$")
    max_batch: int = Field(64, ge=1, le=512)


# The CUDA stream priority of a GPU engine's loop (whisper_gpu, causal_lm_gpu's slots, csm_gpu):
# 0 is CUDA's default; lower is more urgent: where engines share a GPU, the pending kernels of a
# more urgent stream are scheduled first; torch 2.11's streams go to -3, a lower one runs as -3
# (measured: docs/gpu.md, fifth session: no difference in the cascade at 32)
StreamPriority = Annotated[int, Field(ge=-16, le=0)]


class GpuModelOptions(KindOptions):
    """A model of ``serving.gpu``, loaded once per server process and shared by every session.
    ``weights``: a ``serving.weights.WeightSource`` mapping, ``{load_format: checkpoint, path,
    sha256}`` or ``{load_format: dummy, preset, overrides}``; ``max_batch``: requests of all
    sessions run together at most."""

    presets: ClassVar[tuple[str, ...]] = ()  # the presets this kind's model class takes

    weights: dict[str, Any]
    device: str = Field("cuda", pattern=r"^(cpu|cuda(:[0-9]+)?)$")
    dtype: Literal["bfloat16", "float16", "float32"] = "bfloat16"
    max_batch: int = Field(32, ge=1, le=512)

    @field_validator("weights")
    @classmethod
    def _weights(cls, value: dict[str, Any]) -> dict[str, Any]:
        try:
            source = WeightSource.parse(value, "weights")
        except FdbError as err:
            raise ValueError(err.one_line()) from None
        if source.preset is not None and source.preset not in cls.presets:
            raise ValueError(
                f"weights: preset {source.preset!r} is not a model of this kind "
                f"(use one of {', '.join(cls.presets)})"
            )
        return value

    def source(self, where: str = "weights"):
        """The parsed ``weights`` (``serving.weights.WeightSource``)."""

        return WeightSource.parse(self.weights, where)


class WhisperGpuOptions(GpuModelOptions):
    """``whisper_gpu``: Whisper (the whisper-large-v3 configuration) on ``device``; the utterances
    of all sessions waiting at once are one ``generate`` (``serving.gpu.whisper``). ``pad_ms`` as
    ``whisper_transcription``; ``language``: forced for a checkpoint (null: detected);
    ``max_tokens_per_s``: a batch decodes at most this many tokens per second of its longest
    utterance (at least 4, at most ``max_new_tokens``; null: always ``max_new_tokens``). English
    speech is 3-5 tokens a second, so a real recognizer ends at its end token first; it bounds a
    hallucinating one, and a dummy-weight one, which never ends, to a real transcript's length.
    ``window_s`` (static decoder): a batch is encoded in a window of its longest utterance plus
    1 s, rounded up to a multiple of this (10, 20 or 30 s by default), as
    ``whisper_transcription``'s ``window_s``: a shorter window is faster for a slightly higher
    WER, and below 10 s Whisper repeats itself; null: always the whole 30 s (``decoder:
    generate`` always encodes 30 s)."""

    presets: ClassVar[tuple[str, ...]] = ("whisper-large-v3",)

    pad_ms: int = Field(200, ge=0)
    max_new_tokens: int = Field(96, ge=1, le=440)
    max_tokens_per_s: float | None = Field(8.0, gt=0)
    language: str | None = "en"
    # "static": the decoder on fixed tensors, a CUDA graph per batch bucket
    # (serving.gpu.whisper_static); "generate": transformers' generate (the A/B)
    decoder: Literal["static", "generate"] = "static"
    window_s: float | None = Field(10.0, ge=10, le=30)
    # static decoder on CUDA: a batch's encoder pass (and cross-attention keys) as one CUDA graph
    # per (batch bucket, window) instead of eager layers (measured: docs/gpu.md, fourth session)
    encoder_graphs: bool = True
    stream_priority: StreamPriority = 0
    # static decoder: the next decoder step is launched before the thread reads whether every
    # row has ended (one step late), so the GPU does not wait for the thread between steps
    overlap: bool = True
    # batches that may run at once, each on a lane of its own (a thread, a CUDA stream and, with
    # the static decoder, its own static tensors and graphs: nbytes each): an utterance that
    # comes while a batch runs starts on a free lane at once instead of waiting for that batch
    lanes: int = Field(1, ge=1, le=4)


class CausalLmGpuOptions(GpuModelOptions):
    """``causal_lm_gpu``: a causal LM (the qwen3-4b configuration): every session's reply streams
    from one decode loop (``serving.gpu.chat``): by default on a slot cache with a CUDA graph per
    bucket (``serving.gpu.lm_slots``), or under transformers' continuous batching.
    ``max_new_tokens``: the reply's tokens (a session's sampling.max_new_tokens_per_unit
    overrides it); ``temperature``: 0 decodes greedily, for every session (not per session);
    ``max_prompt_tokens``: a longer prompt keeps its last tokens; ``block_size`` /
    ``cache_blocks``: the paged KV cache (null: ``cache_memory_fraction`` of the GPU memory free
    after the load, so that the other models of the GPU keep room; on CPU, max_batch
    full-length requests); ``cuda_graphs``: transformers' CUDA graphs for both paths;
    ``engine``: the decode loop (below); ``max_reply_tokens``: the most a reply may decode with
    ``engine: slots`` (a session's max_new_tokens_per_unit is capped there)."""

    presets: ClassVar[tuple[str, ...]] = ("qwen3-4b",)

    max_new_tokens: int = Field(48, ge=1, le=4096)
    temperature: float = Field(0.0, ge=0, le=2)
    max_prompt_tokens: int = Field(2048, ge=16)
    block_size: int = Field(256, ge=4)
    cache_blocks: int | None = Field(None, ge=1)
    cache_memory_fraction: float = Field(0.4, gt=0, le=0.95)
    # transformers' CUDA graphs for the prefill (varlen) and decode paths; its own default turns
    # them off whenever the attention needs a mask (sdpa), and then every decode step launches
    # each kernel from Python (117 ms a step for 16 replies, docs/gpu.md). Ignored on CPU.
    # With engine slots: a CUDA graph per (rows, length) bucket of the decode step.
    cuda_graphs: bool = True
    # "slots": serving.gpu.lm_slots (a slot cache, fused layers, a CUDA graph per bucket; prompts
    # and replies of up to max_prompt_tokens + max_reply_tokens a slot); "continuous_batching":
    # transformers' ContinuousBatchingManager (block_size, cache_blocks, cache_memory_fraction)
    engine: Literal["slots", "continuous_batching"] = "slots"
    max_reply_tokens: int = Field(256, ge=1, le=4096)
    # engine slots on CUDA: a prompt prefilled right-padded to a length bucket by that length's
    # CUDA graph (serving.gpu.slots.PaddedPrefill) instead of eager layers (measured: docs/gpu.md,
    # fourth session)
    prefill_graphs: bool = True
    stream_priority: StreamPriority = 0
    # engine slots: the next decode step is launched before the last step's tokens are read and
    # handed to the sessions, so the GPU does not wait for the thread between steps
    overlap: bool = True


# The GPU node a launch file's ``backends:`` names (csm_gpu): its options, checked when the
# launch file loads (no torch needed); its backend class is in ``serving.gpu.nodes``.


class GpuNode(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    presets: ClassVar[tuple[str, ...]] = ()  # the presets of this kind's model class

    weights: dict[str, Any]
    device: str = Field("cuda", pattern=r"^(cpu|cuda(:\d+)?)$")
    dtype: Literal["bfloat16", "float16", "float32"] = "bfloat16"

    @field_validator("weights")
    @classmethod
    def _weights(cls, value: dict[str, Any]) -> dict[str, Any]:
        try:
            source = WeightSource.parse(value, "weights")
        except Exception as exc:  # FdbError: its message names the field
            raise ValueError(getattr(exc, "message", str(exc))) from None
        if source.preset is not None and source.preset not in cls.presets:
            raise ValueError(
                f"weights: preset {source.preset!r} is not a model of this kind "
                f"(use one of {', '.join(cls.presets)})"
            )
        return value

    def source(self) -> WeightSource:
        return WeightSource.parse(self.weights, "weights")


class CsmSpeechNode(GpuNode):
    """CSM voice-cloning TTS (:mod:`serving.gpu.csm`)."""

    presets: ClassVar[tuple[str, ...]] = ("csm-1b",)

    kind: Literal["csm_gpu"]
    max_batch: int = Field(64, ge=1, le=512)
    max_len: int = Field(1024, ge=64, le=8192)
    max_audio_s: float = Field(60.0, gt=0, le=600)
    temperature: float = Field(0.9, ge=0, le=2)
    top_k: int = Field(50, ge=1)
    decode_context: int = Field(8, ge=1, le=64)
    codec: Literal["streaming", "window"] = "streaming"
    cuda_graphs: bool = True
    fuse: bool = True  # serving.gpu.slots.fuse_layers (False: the transformers modules' own ops)
    dummy_s_per_char: float = Field(0.07, gt=0, le=1)
    # on CUDA: a prompt prefilled right-padded to a length bucket by that length's CUDA graph
    # (serving.gpu.slots.PaddedPrefill) instead of eager layers (measured: docs/gpu.md, fourth
    # session)
    prefill_graphs: bool = True
    stream_priority: StreamPriority = 0
    # the next frame's step launched before the last one's audio is read and handed to the
    # requests, so that the GPU does not wait for the thread between steps: 5% more frames/s at
    # C16 alone, but under the GPU cascade's load a later first frame (docs/gpu.md, ninth
    # session), so off by default
    overlap: bool = False


# The native kinds: a native system's graph is one node of one of these, reading ``input`` and
# publishing its audio and session; the native session runs it on the graph runtime (its node:
# ``serving.duplex``).
# ``frame_ms``: the one unit the node works in (the system's duplex.unit_ms_choices must be it);
# None: any unit of the system's choices.


class DuplexBaselineOptions(KindOptions):
    """``duplex_baseline``: fdb's rule-based native baseline (:mod:`serving.duplex.engine`): the
    system's Silero VAD decides per unit by the published policy (:mod:`serving.duplex.policy`),
    whose settings are these options, and its ASR, LLM and TTS answer. The native protocol's
    settings (units, the backchannel's session default, ``max_context_ms``) are the system's
    ``duplex``."""

    frame_ms: ClassVar[int | None] = None

    vad_threshold: float = Field(0.5, ge=0.0, le=1.0)
    end_of_turn_ms: int = Field(700, ge=100, le=10000)  # silence after speech that ends the turn
    min_utterance_ms: int = Field(200, ge=0, le=10000)  # shorter speech is ignored (clicks, coughs)
    yield_after_ms: int = Field(
        300, ge=32, le=10000
    )  # user speech over a reply that makes it yield
    backchannel_after_ms: int = Field(4000, ge=500, le=60000)  # continuous user speech before one
    backchannel_text: str = "Mm-hmm."
    # "vad": a turn ends after end_of_turn_ms of silence; "semantic": Smart Turn scores each
    # 200 ms pause and the silence its score asks for ends it (serving/duplex/policy.py, step 6)
    turn_detection: Literal["vad", "semantic"] = "vad"
    eagerness: Literal["low", "medium", "high", "auto"] = "medium"


class MoshiNativeNode(GpuModelOptions):
    """``moshi_gpu``: Moshi as a native full-duplex model (:mod:`serving.gpu.moshi`, loaded once
    per server by ``serving.gpu.nodes.MoshiNative``; each session runs
    :mod:`serving.duplex.native`) in 80 ms frames."""

    presets: ClassVar[tuple[str, ...]] = ("moshi-7b",)
    frame_ms: ClassVar[int | None] = 80

    max_batch: int = Field(32, ge=1, le=256)
    max_len: int = Field(2048, ge=64, le=3000)  # frames per session; Moshi's context is 3000
    codec_context: int = Field(8, ge=1, le=64)
    codec: Literal["streaming", "window"] = "streaming"
    gather_ms: float = Field(2.0, ge=0, le=80)
    cuda_graphs: bool = True
    fuse: bool = True  # serving.gpu.slots.fuse_layers on the temporal transformer
