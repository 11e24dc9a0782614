"""The scoring backends of a run: one ASR, one MOS and one speaker-embedding backend, chosen once.

``ScoringBackends`` is what ``fdb asr`` records in run.json (``scoring``) the first time it
scores a run, and what every later ``fdb asr`` of the run loads again: a choice is a backend
name plus the local checkpoint (path and expected sha256) or endpoint it needs, never a key.

Per kind, its names (first: the embedded default) and what they need:

- asr: ``faster-whisper`` (Whisper tiny.en, VAD filter on), ``parakeet``, ``openai-compatible``;
  needs: parakeet: a ``.nemo`` checkpoint (sha256 default: the pinned one); openai-compatible: url
  and model.
- mos: ``dnsmos`` (DNSMOS OVRL), ``utmos``; needs: utmos: a TorchScript checkpoint and its sha256.
- speaker: ``resemblyzer``, ``wavlm-ecapa``; needs: wavlm-ecapa: a TorchScript checkpoint and its
  sha256.

``load_backend(kind, choice)`` builds the backend (heavy imports happen there); checkpoints are
hash-checked before loading, as everywhere in ``fdb.models``. ``same_model(a, b)`` tells whether
two recorded identities are one model (name and checkpoint sha256; a package version is not a
model), the rule that keeps two backends' numbers out of one cell.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from fdb.errors import FdbError
from fdb.models.asr import load_asr
from fdb.models.asr_parakeet import PARAKEET_SHA256
from fdb.models.mos import DnsMos, UtmosCheckpoint
from fdb.models.speaker import EcapaCheckpoint, Resemblyzer
from fdb.registry import Registry

KINDS = ("asr", "mos", "speaker")
MOS_LABELS = {
    "utmos": "UTMOS",
    "dnsmos-ovrl": "DNSMOS (OVRL)",
    "dnsmos": "DNSMOS",
}  # by identity name
# The flags that give a kind's checkpoint and sha256 (fdb asr's; the errors below name them).
FLAGS = {
    "parakeet": ("--nemo", "--nemo-sha256"),
    "utmos": ("--utmos-checkpoint", "--utmos-sha256"),
    "wavlm-ecapa": ("--speaker-checkpoint", "--speaker-sha256"),
}


EXTRAS = {
    "parakeet": ("device",),
    "openai-compatible": ("url", "model", "api_key_env"),
}  # what else each reads


class BackendChoice(BaseModel):
    """One backend as the user chose it: its name and what loading it needs (a checkpoint path
    and its expected sha256, a device, or an endpoint with the name of its key variable)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    checkpoint: str | None = None
    sha256: str | None = None
    device: str | None = None
    url: str | None = None
    model: str | None = None
    api_key_env: str | None = None

    def key(self) -> tuple:
        """What makes it another model: not the path it was read from, its device or key
        variable."""
        return (self.name, self.sha256 or self.checkpoint, self.url, self.model)

    def describe(self) -> str:
        where = (
            f"sha256 {self.sha256[:12]}…"
            if self.sha256
            else (f"{self.url} {self.model}" if self.url else None)
        )
        return self.name + (f" ({where})" if where else "")


class ScoringBackends(BaseModel):
    """The ASR, MOS and speaker backends of a run (run.json ``scoring``); the defaults are the
    embedded ones, the backends of every run scored before fdb recorded a choice."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    asr: BackendChoice = BackendChoice(name="faster-whisper")
    mos: BackendChoice = BackendChoice(name="dnsmos")
    speaker: BackendChoice = BackendChoice(name="resemblyzer")

    def tag(self) -> str:
        """The side-by-side directory name: ``<asr>+<mos>+<speaker>``."""
        return "+".join(getattr(self, kind).name for kind in KINDS)

    def differences(self, other: ScoringBackends) -> list[str]:
        """One phrase per kind whose model differs in ``other`` (this one being the run's)."""
        return [
            f"--{kind} {getattr(other, kind).describe()} (the run's: "
            f"{getattr(self, kind).describe()})"
            for kind in KINDS
            if getattr(self, kind).key() != getattr(other, kind).key()
        ]


def choose(
    kind: str,
    name: str,
    checkpoint: str | Path | None = None,
    sha256: str | None = None,
    **extra: str | None,
) -> BackendChoice:
    """A checked choice: a known name with what it needs; checkpoint paths made absolute."""
    if name not in LOADERS[kind]:
        raise LOADERS[kind].unknown(name)
    if name in FLAGS and name != "parakeet" and not (checkpoint and sha256):
        path_flag, sha_flag = FLAGS[name]
        raise FdbError(
            f"--{kind} {name} needs {path_flag} PATH and {sha_flag} SHA",
            "pass the local checkpoint and its sha256 (fdb never downloads weights)",
        )
    if name == "parakeet" and not checkpoint:
        raise FdbError(
            "--asr parakeet needs --nemo PATH",
            "pass the local parakeet-tdt-0.6b-v2 .nemo checkpoint, e.g. --nemo "
            "parakeet-tdt-0.6b-v2.nemo",
        )
    if name == "openai-compatible" and not (extra.get("url") and extra.get("model")):
        raise FdbError(
            "--asr openai-compatible needs --asr-url and --asr-model",
            "pass e.g. --asr-url http://127.0.0.1:8000/v1 --asr-model whisper-large-v3",
        )
    if name == "parakeet" and not sha256:
        sha256 = PARAKEET_SHA256
    if name not in FLAGS:  # the embedded backends and endpoints read no checkpoint
        checkpoint = sha256 = None
    path = str(Path(checkpoint).resolve()) if checkpoint else None
    kept = {k: v for k, v in extra.items() if v is not None and k in EXTRAS.get(name, ())}
    return BackendChoice(
        name=name, checkpoint=path, sha256=sha256.lower() if sha256 else None, **kept
    )


def _faster_whisper(choice: BackendChoice):
    # Whisper tiny.en with its VAD filter: after long silences first-word starts are at most
    # about the padding early (measured: docs/benchmarks.md#embedded-asr)
    return load_asr("faster-whisper", vad_filter=True)


def _parakeet(choice: BackendChoice):
    return load_asr(
        "parakeet",
        nemo_path=choice.checkpoint,
        expected_sha256=choice.sha256,
        device=choice.device or "cpu",
    )


def _openai_compatible(choice: BackendChoice):
    return load_asr(
        "openai-compatible",
        base_url=choice.url,
        model=choice.model,
        api_key_env=choice.api_key_env or "OPENAI_API_KEY",
    )


# Per kind, each name's loader (first: the embedded default): what ``load_backend`` calls.
LOADERS: dict[str, Registry[Callable[[BackendChoice], Any]]] = {
    "asr": Registry(
        "asr backend",
        {
            "faster-whisper": _faster_whisper,
            "parakeet": _parakeet,
            "openai-compatible": _openai_compatible,
        },
    ),
    "mos": Registry(
        "mos backend",
        {
            "dnsmos": lambda choice: DnsMos(),
            "utmos": lambda choice: UtmosCheckpoint(choice.checkpoint, choice.sha256),
        },
    ),
    "speaker": Registry(
        "speaker backend",
        {
            "resemblyzer": lambda choice: Resemblyzer(),
            "wavlm-ecapa": lambda choice: EcapaCheckpoint(choice.checkpoint, choice.sha256),
        },
    ),
}
CHOICES = {kind: LOADERS[kind].names() for kind in KINDS}


def load_backend(kind: str, choice: BackendChoice):
    """The backend a choice names, loaded (checkpoints hash-checked first)."""
    return LOADERS[kind][choice.name](choice)


def same_model(a: dict | None, b: dict | None) -> bool:
    """Two recorded backend identities are one model: same name and checkpoint sha256."""
    if a is None or b is None:
        return a is b
    return (a.get("name"), a.get("checkpoint_sha256")) == (
        b.get("name"),
        b.get("checkpoint_sha256"),
    )


def mos_label(identity: dict | None) -> str:
    """The MOS column's name for a backend identity: UTMOS, DNSMOS (OVRL), …; MOS when unknown."""
    name = (identity or {}).get("name")
    return MOS_LABELS.get(name, name) if name else "MOS"


def voice_label(identity: dict | None) -> str:
    """Voice similarity's column name: plain for WavLM ECAPA (the spec's), else naming the proxy."""
    name = (identity or {}).get("name")
    return (
        "Voice similarity" if name in (None, "wavlm-large-ecapa") else f"Voice similarity ({name})"
    )
