"""A verified checkpoint (serving/weights.py): a tiny Qwen3 saved in the Hugging Face layout
with a SHA256SUMS made like sha256sum makes it, pinned by that file's sha256. load_model loads
exactly the saved weights; every way the checkpoint can differ from its pin is a one-line
FdbError naming the file (or the launch file's field)."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from fdb.errors import FdbError
from serving.weights import SUMS_NAME, WeightSource, load_model, verify_checkpoint
from tests.serving.gpu.conftest import TINY_QWEN

pytest.importorskip("transformers")


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_sums(root: Path, skip: tuple[str, ...] = ()) -> str:
    """``sha256sum $(find . -type f ! -name SHA256SUMS | sort) > SHA256SUMS`` in ``root``;
    the pin."""
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.name != SUMS_NAME)
    lines = [
        f"{_sha(p)}  ./{p.relative_to(root).as_posix()}"
        for p in files
        if p.relative_to(root).as_posix() not in skip
    ]
    (root / SUMS_NAME).write_text("\n".join(lines) + "\n")
    return _sha(root / SUMS_NAME)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """(the tiny model, its checkpoint directory, the pin)."""
    model = load_model(
        WeightSource("dummy", preset="qwen3-4b", overrides=TINY_QWEN), "llm", "cpu", "float32"
    )
    root = tmp_path_factory.mktemp("ckpt") / "qwen3-tiny"
    model.save_pretrained(root)
    return model, root, write_sums(root)


@pytest.fixture
def copy(saved, tmp_path):
    """A fresh copy of the checkpoint, to break."""
    _, root, pin = saved
    target = tmp_path / "copy"
    shutil.copytree(root, target)
    return target, pin


def _refused(root: Path, pin: str) -> str:
    with pytest.raises(FdbError) as raised:
        load_model(WeightSource("checkpoint", path=str(root), sha256=pin), "llm", "cpu", "float32")
    line = raised.value.one_line()
    assert "\n" not in line
    return raised.value.message


def test_a_pinned_checkpoint_loads_the_saved_weights(saved):
    import torch

    model, root, pin = saved
    listed = verify_checkpoint(root, pin.upper(), "llm")  # the pin is case-blind
    assert "config.json" in listed and "model.safetensors" in listed
    source = WeightSource.parse({"path": str(root), "sha256": pin}, "weights")
    loaded = load_model(source, "llm", "cpu", "float32")
    assert type(loaded).__name__ == "Qwen3ForCausalLM" and not loaded.training
    saved_state, loaded_state = model.state_dict(), loaded.state_dict()
    assert saved_state.keys() == loaded_state.keys()
    for name, tensor in saved_state.items():
        assert torch.equal(tensor, loaded_state[name]), name
    assert source.label() == f"checkpoint {root} (SHA256SUMS {pin[:12]}…)"


def test_a_wrong_pin_names_the_sums_file(saved):
    _, root, pin = saved
    wrong = "0" * 64
    message = _refused(root, wrong)
    assert message == f"llm checkpoint {root / SUMS_NAME} has sha256 {pin}, expected {wrong}"


def test_a_changed_file_is_named(copy):
    root, pin = copy
    config = root / "config.json"
    config.write_text(config.read_text().replace("\n", "\n ", 1))
    message = _refused(root, pin)
    assert message.startswith(f"llm checkpoint file {config} has sha256 {_sha(config)}, expected ")


def test_a_missing_listed_file_is_named(copy):
    root, pin = copy
    (root / "model.safetensors").unlink()
    assert _refused(root, pin) == f"llm checkpoint file {root / 'model.safetensors'} is missing"


def test_a_missing_sums_file_is_named(copy):
    root, pin = copy
    (root / SUMS_NAME).unlink()
    assert _refused(root, pin) == f"llm checkpoint {root} has no {SUMS_NAME}"


def test_a_weights_file_the_sums_do_not_list_is_refused(copy):
    """The pin covers what loads: a safetensors file left out of SHA256SUMS would load
    unverified."""
    root, _ = copy
    pin = write_sums(root, skip=("model.safetensors",))
    assert (
        _refused(root, pin)
        == f"llm checkpoint file {root / 'model.safetensors'} is not listed in {SUMS_NAME}"
    )


@pytest.mark.parametrize(
    ("weights", "says"),
    [
        ("{path: DIR}", "weights: a checkpoint needs path and sha256"),
        ("{path: DIR, sha256: abc123}", "weights: sha256 'abc123' is not 64 hex digits"),
        ("{path: DIR, sha256: PIN, preset: csm1b}", "weights: preset 'csm1b' is not known"),
        (
            "{load_format: dummy, preset: qwen3-4b}",
            "weights: preset 'qwen3-4b' is not a model of this kind (use one of csm-1b)",
        ),
    ],
)
def test_a_launch_files_weights_mapping_is_checked_when_it_loads(tmp_path, weights, says):
    from serving.systems import load_config_file

    launch = tmp_path / "launch.yaml"
    weights = weights.replace("DIR", str(tmp_path)).replace("PIN", "a" * 64)
    launch.write_text(
        f"system: gpu-tts\nbackends:\n  tts:\n    kind: csm_gpu\n    weights: {weights}\n"
    )
    with pytest.raises(FdbError) as raised:
        load_config_file(launch)
    line = raised.value.one_line()
    assert "\n" not in line
    assert raised.value.message == f"{launch}: backends: tts.weights: {says}"


def test_a_configuration_leaves_the_callers_mappings_as_they_were():
    """transformers' composite configurations pop ``model_type`` from the nested mappings they
    are given; the preset and the overrides are copied first, so the same overrides (one tiny
    Mimi shared by two presets, as the benchmarks do) build a configuration every time."""
    import copy

    from benchmarks.gpu_native import TINY as MOSHI_TINY
    from benchmarks.gpu_tts import MIMI_TINY
    from benchmarks.gpu_tts import TINY as CSM_TINY
    from serving.weights import PRESETS, preset_config

    before = copy.deepcopy((MOSHI_TINY, CSM_TINY, PRESETS["moshi-7b"], PRESETS["csm-1b"]))
    for _ in range(2):
        assert preset_config("moshi-7b", MOSHI_TINY).audio_encoder_config.model_type == "mimi"
        assert preset_config("csm-1b", CSM_TINY).codec_config.model_type == "mimi"
    assert (MOSHI_TINY, CSM_TINY, PRESETS["moshi-7b"], PRESETS["csm-1b"]) == before
    assert MIMI_TINY["model_type"] == "mimi"


def test_a_dummy_whisper_large_v3_has_the_published_forced_prompt():
    """A dummy whisper-large-v3 decodes the real checkpoint's four-token prompt (its published
    generation config's ids), in any of its 100 languages; a tiny vocabulary gets none of it."""
    from benchmarks.gpu_whisper import TINY
    from serving.gpu.whisper_static import prompt_ids

    model = load_model(
        WeightSource("dummy", preset="whisper-large-v3", overrides=TINY), "asr", "cpu", "float32"
    )
    generation = model.generation_config
    assert prompt_ids(generation, "en") == [50258, 50259, 50360, 50364]
    assert prompt_ids(generation, "de")[1] == 50261
    assert generation.lang_to_id["<|yue|>"] == 50358 and len(generation.lang_to_id) == 100
    from tests.serving.gpu.test_whisper_static import TINY as SMALL_VOCAB

    tiny = load_model(
        WeightSource("dummy", preset="whisper-large-v3", overrides=SMALL_VOCAB), "asr", "cpu"
    )
    assert getattr(tiny.generation_config, "lang_to_id", None) is None
