"""Where a GPU model's weights come from: a verified local checkpoint, or dummy weights.

A checkpoint is a directory in the Hugging Face layout (``config.json``, ``*.safetensors`` …) with
a ``SHA256SUMS`` file in the format of ``sha256sum`` (``<hex>  <relative path>`` per line). The
pin is the sha256 of that ``SHA256SUMS`` file, so one hex string pins every file; each listed file
is checked before loading, and the error names the first file that is missing or differs (or
that is in the directory but not listed: everything the loader may read is pinned; names that
start with a dot, e.g. ``.git``, are not read and not checked).
Make the file once with ``(cd DIR && sha256sum $(find . -type f ! -name SHA256SUMS | sort) >
SHA256SUMS)`` and pin ``sha256sum DIR/SHA256SUMS``.

``dummy`` builds the model from a published configuration (:data:`PRESETS`) with random weights,
the practice of SGLang's and vLLM's ``--load-format dummy`` for serving benchmarks: the compute
path and the protocol are real, the audio and text are noise.
"""

from __future__ import annotations

import copy
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from fdb.errors import FdbError
from fdb.io import sha256_file
from fdb.models import require

SUMS_NAME = "SHA256SUMS"
NEEDED = ("config.json",)

# Published configurations, by the checkpoint they describe. The values are the upstream
# config.json's architecture fields; everything else is the transformers class default.
PRESETS: dict[str, tuple[str, dict[str, Any]]] = {
    # sesame/csm-1b: a Llama-3.2-1B backbone, a 4-layer depth decoder, 32 Mimi codebooks
    "csm-1b": ("CsmForConditionalGeneration", {}),
    # kyutai moshiko (7B temporal transformer, depth transformer, 8 Mimi codebooks)
    "moshi-7b": ("MoshiForConditionalGeneration", {}),
    # openai/whisper-large-v3
    "whisper-large-v3": (
        "WhisperForConditionalGeneration",
        {
            "d_model": 1280,
            "encoder_layers": 32,
            "decoder_layers": 32,
            "encoder_attention_heads": 20,
            "decoder_attention_heads": 20,
            "encoder_ffn_dim": 5120,
            "decoder_ffn_dim": 5120,
            "num_mel_bins": 128,
            "vocab_size": 51866,
            "max_source_positions": 1500,
            "max_target_positions": 448,
        },
    ),
    # Qwen/Qwen3-4B
    "qwen3-4b": (
        "Qwen3ForCausalLM",
        {
            "hidden_size": 2560,
            "num_hidden_layers": 36,
            "intermediate_size": 9728,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "vocab_size": 151936,
            "max_position_embeddings": 40960,
            "rope_theta": 1000000.0,
            "tie_word_embeddings": True,
            "rms_norm_eps": 1e-6,
        },
    ),
}


@dataclass(frozen=True)
class WeightSource:
    """``load_format`` ``checkpoint`` (``path`` + ``sha256``) or ``dummy`` (``preset`` +
    ``overrides``, e.g. fewer layers for a CPU test)."""

    load_format: Literal["checkpoint", "dummy"]
    preset: str | None = None
    path: str | None = None
    sha256: str | None = None
    overrides: dict[str, Any] = field(default_factory=dict)

    @property
    def dummy(self) -> bool:
        return self.load_format == "dummy"

    def label(self) -> str:
        """What every record that carries a number from this model says about its weights."""
        if self.dummy:
            return f"dummy weights ({self.preset} configuration; compute path only)"
        return f"checkpoint {self.path} (SHA256SUMS {str(self.sha256)[:12]}…)"

    @classmethod
    def parse(cls, spec: dict[str, Any], where: str) -> WeightSource:
        """From a launch file's ``weights:`` mapping; ``where`` names it in errors."""
        fmt = spec.get("load_format", "checkpoint")
        if fmt == "dummy":
            preset = spec.get("preset")
            if preset not in PRESETS:
                raise FdbError(
                    f"{where}: dummy weights need a preset, got {preset!r}",
                    f"set preset to one of {', '.join(sorted(PRESETS))}",
                )
            return cls("dummy", preset=preset, overrides=dict(spec.get("overrides") or {}))
        if fmt != "checkpoint":
            raise FdbError(f"{where}: load_format {fmt!r} is not known", "use checkpoint or dummy")
        path, sha = spec.get("path"), spec.get("sha256")
        if not path or not sha:
            raise FdbError(
                f"{where}: a checkpoint needs path and sha256",
                f"set path to the checkpoint directory and sha256 to the sha256 of its {SUMS_NAME}",
            )
        if not re.fullmatch(r"[0-9a-fA-F]{64}", str(sha)):
            raise FdbError(
                f"{where}: sha256 {sha!r} is not 64 hex digits",
                f"pin the output of sha256sum DIR/{SUMS_NAME}",
            )
        preset = spec.get("preset")
        if (
            preset is not None and preset not in PRESETS
        ):  # it picks the model class: a typo fails here
            raise FdbError(
                f"{where}: preset {preset!r} is not known",
                "leave it out (config.json's architectures decide) or use one of "
                f"{', '.join(sorted(PRESETS))}",
            )
        return cls("checkpoint", preset=preset, path=str(path), sha256=str(sha).lower())


def read_sums(text: str, sums: Path) -> dict[str, str]:
    """``relative path -> sha256`` from a ``sha256sum`` listing."""
    listed: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        digest, _, name = line.partition(" ")
        name = name.lstrip(" *").removeprefix("./")
        if len(digest) != 64 or not name or Path(name).is_absolute() or ".." in Path(name).parts:
            raise FdbError(
                f"{sums} line {number} is not '<sha256>  <relative path>'",
                "write the file with sha256sum from inside the checkpoint directory",
            )
        listed[name] = digest.lower()
    return listed


def verify_checkpoint(
    directory: str | os.PathLike, expected_sha256: str, role: str
) -> dict[str, str]:
    """Check ``directory`` against its pinned ``SHA256SUMS``; returns the listing.

    Raises a one-line :class:`FdbError` naming the first missing or differing file."""
    root = Path(directory)
    sums = root / SUMS_NAME
    if not root.is_dir():
        raise FdbError(
            f"{role} checkpoint {root} is not a directory",
            "pass the local checkpoint directory (fdb never downloads weights)",
        )
    if not sums.is_file():
        raise FdbError(
            f"{role} checkpoint {root} has no {SUMS_NAME}",
            f"write it with sha256sum inside the directory and pin its sha256 ({__name__} says "
            "how)",
        )
    actual = sha256_file(sums)
    if actual != expected_sha256.lower():
        raise FdbError(
            f"{role} checkpoint {sums} has sha256 {actual}, expected {expected_sha256}",
            "point at the pinned checkpoint, or pin the sha256 of the SHA256SUMS you mean to use",
        )
    listed = read_sums(sums.read_text(), sums)
    for name in NEEDED:
        if name not in listed:
            raise FdbError(
                f"{role} checkpoint {sums} does not list {name}", f"add {name} to {SUMS_NAME}"
            )
    for name, digest in sorted(listed.items()):
        path = root / name
        if not path.is_file():
            raise FdbError(
                f"{role} checkpoint file {path} is missing", "restore it from the pinned checkpoint"
            )
        got = sha256_file(path)
        if got != digest:
            raise FdbError(
                f"{role} checkpoint file {path} has sha256 {got}, expected {digest}",
                "restore it from the pinned checkpoint",
            )
    for path in sorted(root.rglob("*")):  # what from_pretrained may read must be pinned too
        name = path.relative_to(root).as_posix()
        if (
            path.is_file()
            and name != SUMS_NAME
            and name not in listed
            and not any(part.startswith(".") for part in path.relative_to(root).parts)
        ):
            raise FdbError(
                f"{role} checkpoint file {path} is not listed in {SUMS_NAME}",
                f"remove it, or list it in {SUMS_NAME} and pin the new sha256",
            )
    return listed


def _transformers():
    return require("transformers", "transformers", "gpu", "the GPU model nodes")


def preset_config(preset: str, overrides: dict[str, Any] | None = None):
    """The transformers configuration of ``preset`` with ``overrides`` applied. Both are deep
    copied first: transformers' composite configurations pop keys (``model_type``) from the
    nested mappings they are given, which would change the caller's (and the preset's) dicts."""
    class_name, fields = PRESETS[preset]
    transformers = _transformers()
    model_class = getattr(transformers, class_name)
    return model_class.config_class(**copy.deepcopy({**fields, **(overrides or {})}))


def dummy_generation(preset: str, vocab_size: int) -> dict[str, Any]:
    """A dummy model's generation config fields that shape its computation, from the checkpoint's
    published generation_config.json. Whisper large-v3's forced prompt is four tokens (start of
    transcript 50258, the language, the task, ``<|notimestamps|>`` 50364) where the class default
    is one, so that a dummy recognizer decodes as many steps as the real one; its 100 languages'
    ids run from ``<|en|>`` 50259 in Whisper's order (transformers' ``LANGUAGES``, ``<|yue|>``
    50358 last). None where the configuration's vocabulary cannot hold the ids (a tiny test
    configuration)."""
    if preset != "whisper-large-v3" or vocab_size <= 50364:
        return {}
    # lazy: transformers is optional (the gpu extra)
    from transformers.models.whisper.tokenization_whisper import LANGUAGES

    return {
        "decoder_start_token_id": 50258,
        "lang_to_id": {f"<|{code}|>": 50259 + i for i, code in enumerate(LANGUAGES)},
        "task_to_id": {"translate": 50359, "transcribe": 50360},
        "no_timestamps_token_id": 50364,
        "is_multilingual": True,
    }


def load_model(source: WeightSource, role: str, device: str = "cpu", dtype: str = "bfloat16"):
    """The model of ``source`` in eval mode on ``device``: verified checkpoint or dummy weights."""
    # lazy: torch is optional (the gpu extra)
    import torch

    transformers = _transformers()
    torch_dtype = getattr(torch, dtype)
    if source.dummy:
        assert source.preset is not None
        class_name, _ = PRESETS[source.preset]
        config = preset_config(source.preset, source.overrides)
        with torch.device(device):
            model = getattr(transformers, class_name)._from_config(config, dtype=torch_dtype)
        for key, value in dummy_generation(source.preset, config.vocab_size).items():
            setattr(model.generation_config, key, value)
        return model.eval()
    assert source.path is not None and source.sha256 is not None
    verify_checkpoint(source.path, source.sha256, role)
    config = transformers.AutoConfig.from_pretrained(source.path, local_files_only=True)
    class_name = PRESETS[source.preset][0] if source.preset else config.architectures[0]
    # no device_map: it needs accelerate, which the gpu extra does not bring; load, then move
    model = getattr(transformers, class_name).from_pretrained(
        source.path, local_files_only=True, dtype=torch_dtype
    )
    return model.to(device).eval()


def load_tokenizer(source: WeightSource):
    """The checkpoint's tokenizer (verified with it by :func:`load_model`); None for dummy
    weights."""
    if source.dummy:
        return None
    return _transformers().AutoTokenizer.from_pretrained(source.path, local_files_only=True)
