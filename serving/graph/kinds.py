"""The registry of component kinds and stages a session node can declare.

A kind names the formats it consumes and produces, its options (a pydantic model that forbids
unknown options), and its turn role: ``opens_turns`` (the dialog numbers turns) and
``ends_turns`` (a reply-ending kind; the one whose session is published ends turns). The
guide's service kinds are registered so its profiles validate; the embedded kinds
(``whisper_transcription``, ``llama_chat``, ``piper_speech``) run on the offline models and have
node adapters in ``serving.graph.nodes``.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, field_validator

HTTP_URL = r"^https?://"
WS_URL = r"^wss?://"
EXTRA_BODY_RESERVED = ("model", "messages", "stream", "max_tokens", "temperature")


class KindOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    timeout_s: float = Field(120.0, gt=0)


class RealtimeTranscriptionOptions(KindOptions):
    base_url: str = Field(pattern=WS_URL)
    model: str
    api_key_env: str = "OPENAI_API_KEY"


class OpenAiTranscriptionOptions(KindOptions):
    base_url: str = Field(pattern=HTTP_URL)
    model: str
    language: str = ""
    response_format: str = Field("verbose_json", pattern=r"^(verbose_json|json)$")
    api_key_env: str = "OPENAI_API_KEY"


class RunningTranscriptOptions(KindOptions):
    tail_ms: float = Field(400.0, ge=0)


class DialogOptions(KindOptions):
    system_prompt: str = "You are a helpful voice assistant. Answer concisely."
    max_history_chars: int = Field(65536, gt=0)
    max_text_chars: int = Field(16000, gt=0)


class OpenAiChatOptions(KindOptions):
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
    base_url: str = Field(pattern=HTTP_URL)
    model: str
    voice: str = "default"
    reference_audio_path: str = ""
    reference_text: str = ""
    language: str = ""
    max_sentence_words: int = Field(24, gt=0)
    api_key_env: str = "OPENAI_API_KEY"


class WhisperTranscriptionOptions(KindOptions):
    """The embedded faster-whisper tiny.en recognizer; ``pad_ms`` of audio is kept after speech.stopped.
    ``window_s``: each utterance is encoded in a window of the utterance plus 1 s, at least this
    long (``FasterWhisperAsr.transcribe_utterance``, ``benchmarks/asr_window.py``, a 3 s question
    on 2 cores: 92 ms at WER 2.1% with 10 s, 144 ms at 1.9% with 15 s, 343 ms at 1.7% for the full
    pipeline; below 10 s Whisper repeats itself). 10 s: at 4 embedded-cascade sessions it brought
    the first audio p50 from 0.87-1.15 s to 0.79-0.93 s (five interleaved runs each,
    ``benchmarks/cascade_capacity.py``). Null: the full 30 s pipeline."""

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


@dataclass(frozen=True)
class ComponentKind:
    name: str
    consumes: frozenset[str]
    produces: frozenset[str]
    options: type[KindOptions]
    opens_turns: bool = False
    ends_turns: bool = False
    optional: frozenset[str] = frozenset()  # consumed formats a declaration may leave unconnected

    @property
    def required(self) -> frozenset[str]:
        return self.consumes - {"session"} - self.optional


@dataclass(frozen=True)
class StageKind:
    """A stage a ``stages: [...]`` route may name (served in-process by fdb)."""

    name: str
    consumes: frozenset[str]
    produces: frozenset[str]


COMPONENTS: dict[str, ComponentKind] = {}
STAGES: dict[str, StageKind] = {}


def register(kind: ComponentKind) -> ComponentKind:
    COMPONENTS[kind.name] = kind
    return kind


def _fs(*names: str) -> frozenset[str]:
    return frozenset(names)


for _name, _opts in (("realtime_transcription", RealtimeTranscriptionOptions),
                     ("openai_transcription", OpenAiTranscriptionOptions),
                     ("whisper_transcription", WhisperTranscriptionOptions)):
    register(ComponentKind(_name, _fs("pcm16", "session"), _fs("transcript"), _opts))
register(ComponentKind("running_transcript", _fs("pcm16", "session", "text"), _fs("transcript"),
                       RunningTranscriptOptions))
register(ComponentKind("dialog", _fs("transcript", "text_delta", "session"), _fs("messages", "session"),
                       DialogOptions, opens_turns=True))
for _name, _opts in (("openai_chat", OpenAiChatOptions), ("llama_chat", LlamaChatOptions)):
    register(ComponentKind(_name, _fs("messages"), _fs("text_delta", "session"), _opts, ends_turns=True))
for _name, _opts in (("openai_speech", OpenAiSpeechOptions), ("piper_speech", PiperSpeechOptions)):
    register(ComponentKind(_name, _fs("text_delta", "session"), _fs("pcm_f32le", "session"), _opts,
                           ends_turns=True))

STAGES["vad"] = StageKind("vad", _fs("pcm16", "session"), _fs("session"))
STAGES["turn_detection"] = StageKind("turn_detection", _fs("pcm16", "session"), _fs("session"))
