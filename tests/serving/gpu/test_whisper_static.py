"""Whisper's static decoder (``serving.gpu.whisper_static``) chooses the tokens transformers'
``generate`` chooses: tiny random-weight models on CPU in float32, with the plain prompt, with a
multilingual prompt and suppressed tokens, with rows that end early, and a row's tokens do not
depend on the other rows of its batch (buckets hold stale rows of earlier batches). In a window
shorter than the model's, its tokens are ``generate``'s with a model whose encoder has that many
positions (the same weights, the position table cut)."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from tests.serving.gpu.conftest import TINY_WHISPER

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from serving.gpu.whisper_static import (  # noqa: E402
    StaticWhisper,
    buckets,
    encode,
    prompt_ids,
    window_frames,
    windows,
)
from serving.weights import WeightSource, load_model  # noqa: E402

BUDGET = 10
TINY = {**TINY_WHISPER, "decoder_layers": 2, "max_target_positions": 24}


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(7)
    source = WeightSource(load_format="dummy", preset="whisper-large-v3", overrides=TINY)
    model = load_model(source, "whisper_gpu", "cpu", "float32")
    with torch.no_grad():  # wider than the default init, so that greedy choices vary
        for p in model.parameters():
            p.normal_(0, 1.0)
    return model


def _features(rows: int, seed: int = 0, frames: int | None = None) -> torch.Tensor:
    frames = frames or 2 * TINY["max_source_positions"]
    rng = np.random.default_rng(seed)
    return torch.tensor(rng.normal(0, 1, (rows, TINY["num_mel_bins"], frames)), dtype=torch.float32)


def _generated(model, features, generation, **extra) -> list[list[int]]:
    """``generate``'s tokens (it leaves the prompt out), each row cut before its first end
    token."""
    with torch.inference_mode():
        out = model.generate(
            input_features=features,
            generation_config=copy.deepcopy(generation),
            max_new_tokens=BUDGET,
            **extra,
        )
    eos = generation.eos_token_id
    rows = []
    for row in out.tolist():
        rows.append(row[: row.index(eos)] if eos in row else row)
    return rows


def _static(model, generation, language=None) -> StaticWhisper:
    return StaticWhisper(
        model, generation, prompt_ids(generation, language), BUDGET, 4, graphs=False
    )


def test_plain_prompt_equals_generate(model):
    generation = copy.deepcopy(model.generation_config)
    features = _features(3)
    static = _static(model, generation)
    assert static.prompt == [TINY["decoder_start_token_id"]]
    assert static.transcribe(features, BUDGET) == _generated(model, features, generation)


def test_the_cross_attention_kernels_are_named_on_cuda_only_and_a_named_one_gives_the_tokens(model):
    """On a CPU the cross-attention keeps torch's kernel choice (on CUDA the engine names flash
    attention for small batches and the memory-efficient kernel above: torch's own choice there
    differed from pass to pass, docs/gpu.md); a named kernel list goes to that call alone and
    gives ``generate``'s tokens, and a batch takes the first entry whose bound its rows keep."""
    from torch.nn.attention import SDPBackend

    from serving.gpu.whisper_static import CROSS_KERNELS, describe_cross

    generation = copy.deepcopy(model.generation_config)
    features = _features(3, seed=5)
    static = _static(model, generation)
    assert static.cross_kernels == ((None, None),)
    assert describe_cross(static.cross_kernels) == [[None, None]]
    assert [static.cross_backends(n) for n in (1, 4, 5, 16)] == [None] * 4
    static.cross_kernels = ((None, [SDPBackend.MATH]),)
    before = torch.backends.cuda.flash_sdp_enabled()
    assert static.transcribe(features, BUDGET) == _generated(model, features, generation)
    assert torch.backends.cuda.flash_sdp_enabled() == before  # the process's choice put back
    static.cross_kernels = ((None, [SDPBackend.EFFICIENT_ATTENTION]),)  # none on a CPU: used
    with pytest.raises(RuntimeError, match="backend"):
        static.transcribe(features, BUDGET)
    # the rows of a batch choose: up to 2 rows the math kernel (the 3 rows here go on past it)
    static.cross_kernels = ((2, [SDPBackend.MATH]), (None, [SDPBackend.EFFICIENT_ATTENTION]))
    with pytest.raises(RuntimeError, match="backend"):
        static.transcribe(features, BUDGET)
    assert static.transcribe(features[:2], BUDGET) == _generated(model, features[:2], generation)
    static.cross_kernels = ((2, [SDPBackend.MATH]),)
    with pytest.raises(ValueError, match="no cross-attention kernel for 3 rows"):
        static.cross_backends(3)
    # the engine's own on CUDA: flash attention up to 4 rows, memory-efficient above
    static.cross_kernels = CROSS_KERNELS
    assert [static.cross_backends(n) for n in (1, 2, 4, 8, 16)] == [
        [SDPBackend.FLASH_ATTENTION]
    ] * 3 + [[SDPBackend.EFFICIENT_ATTENTION]] * 2
    assert describe_cross(CROSS_KERNELS) == [
        [4, ["SDPBackend.FLASH_ATTENTION"]],
        [None, ["SDPBackend.EFFICIENT_ATTENTION"]],
    ]


def test_the_kernels_by_device_dtype_and_fdb_whisper_cross(monkeypatch):
    """CUDA in half precision: flash attention up to 4 rows; in float32 the memory-efficient
    kernel alone (flash attention takes half precision only); a CPU: torch's choice.
    FDB_WHISPER_CROSS names one kernel for every batch; a bad name or flash in float32 is an
    error that says what to set."""
    from torch.nn.attention import SDPBackend

    from fdb.errors import FdbError
    from serving.gpu.whisper_static import CROSS_KERNELS, cross_kernels

    monkeypatch.delenv("FDB_WHISPER_CROSS", raising=False)
    efficient = ((None, [SDPBackend.EFFICIENT_ATTENTION]),)
    assert cross_kernels("cpu", torch.bfloat16) == ((None, None),)
    assert cross_kernels("cuda", torch.bfloat16) == CROSS_KERNELS
    assert cross_kernels("cuda", torch.float16) == CROSS_KERNELS
    assert cross_kernels("cuda", torch.float32) == efficient
    monkeypatch.setenv("FDB_WHISPER_CROSS", "efficient")
    assert cross_kernels("cuda", torch.bfloat16) == efficient
    assert cross_kernels("cpu", torch.bfloat16) == ((None, None),)  # a CPU keeps torch's
    monkeypatch.setenv("FDB_WHISPER_CROSS", "flash")
    assert cross_kernels("cuda", torch.bfloat16) == ((None, [SDPBackend.FLASH_ATTENTION]),)
    with pytest.raises(FdbError, match="flash attention takes float16 or bfloat16"):
        cross_kernels("cuda", torch.float32)
    monkeypatch.setenv("FDB_WHISPER_CROSS", "cudnn")
    with pytest.raises(FdbError, match="'cudnn' is not a cross-attention kernel") as bad:
        cross_kernels("cuda", torch.bfloat16)
    assert "set it to flash or efficient" in bad.value.one_line()
    assert cross_kernels("cuda", torch.bfloat16, choice="efficient") == efficient


def test_multilingual_prompt_and_suppressed_tokens_equal_generate(model):
    generation = copy.deepcopy(model.generation_config)
    generation.lang_to_id = {"<|en|>": 50, "<|de|>": 51}
    generation.task_to_id = {"transcribe": 52, "translate": 53}
    generation.no_timestamps_token_id = 54
    generation.is_multilingual = True
    features = _features(3, seed=1)
    free = _static(model, generation, "en").transcribe(features, BUDGET)
    often = np.bincount([t for row in free for t in row], minlength=64).argsort()[::-1]
    generation.suppress_tokens = [int(often[0]), int(often[1])]  # the two most chosen tokens
    generation.begin_suppress_tokens = [int(often[2])]
    static = _static(model, generation, "en")
    assert static.prompt == [TINY["decoder_start_token_id"], 50, 52, 54]
    got = static.transcribe(features, BUDGET)
    assert got == _generated(model, features, generation, language="en", task="transcribe")
    assert not {int(often[0]), int(often[1])} & {t for row in got for t in row}
    assert got != free  # the suppression changed the choice
    with pytest.raises(ValueError, match="needs a language for the static decoder"):
        prompt_ids(generation, None)  # generate would detect it
    with pytest.raises(ValueError, match="'xx' is not in the checkpoint's lang_to_id"):
        prompt_ids(generation, "xx")


def test_the_forced_prompt_in_one_pass_gives_the_tokens_of_a_step_each(model):
    """A prompt of start, language, task and no-timestamps tokens: one pass of its four positions
    (``prompt_pass``, the default) writes the keys and values the three forced steps write, and
    chooses the same tokens as they and ``generate`` do: one pass for four steps; a bucket with a
    stale row and a shorter window too."""
    generation = copy.deepcopy(model.generation_config)
    generation.lang_to_id = {"<|en|>": 50}
    generation.task_to_id = {"transcribe": 52}
    generation.no_timestamps_token_id = 54
    generation.is_multilingual = True
    full = 2 * TINY["max_source_positions"]

    def static(prompt_pass: bool):
        engine = StaticWhisper(
            model,
            generation,
            prompt_ids(generation, "en"),
            BUDGET,
            4,
            graphs=False,
            frames=[full // 2, full],
            prompt_pass=prompt_pass,
        )
        calls = {"step": 0, "pass": 0}
        step, whole = engine._replay, engine._replay_prompt
        engine._replay = lambda n, p: calls.__setitem__("step", calls["step"] + 1) or step(n, p)
        engine._replay_prompt = lambda n, p: (
            calls.__setitem__("pass", calls["pass"] + 1) or whole(n, p)
        )
        return engine, calls

    for rows, frames, seed in ((3, full, 5), (1, full // 2, 6)):
        features = _features(rows, seed, frames)
        (one, one_calls), (each, each_calls) = static(True), static(False)
        got = one.transcribe(features, BUDGET)
        assert got == each.transcribe(features, BUDGET)
        assert one_calls == {"step": BUDGET - 1, "pass": 1}
        assert each_calls == {"step": 3 + BUDGET, "pass": 0}  # 4 steps for the pass
        for k_one, k_each in zip(one.k, each.k, strict=True):  # the prompt's keys
            assert torch.allclose(k_one[:rows, :, :4], k_each[:rows, :, :4], atol=1e-5)
        if frames == full:
            assert got == _generated(model, features, generation, language="en", task="transcribe")


def test_rows_that_end_early_equal_generate(model):
    generation = copy.deepcopy(model.generation_config)
    features = _features(3, seed=2)
    free = _static(model, generation).transcribe(features, BUDGET)
    # row 0 ends at the first token it had not chosen before (after at least one)
    k = next(i for i in range(1, BUDGET) if free[0][i] not in free[0][:i])
    generation.eos_token_id = free[0][k]
    generation.pad_token_id = generation.eos_token_id
    got = _static(model, generation).transcribe(features, BUDGET)
    assert got[0] == free[0][:k]
    assert got == _generated(model, features, generation)


@pytest.mark.parametrize("overlap", [True, False])
def test_a_batch_that_ends_stops_one_step_later_with_overlap(model, overlap):
    """Every row ends at an end token: with overlap the loop learns it one step late (the next
    step was launched before the flag was read) and stops there; the tokens are the same."""
    generation = copy.deepcopy(model.generation_config)
    features = _features(1, seed=4)
    free = _static(model, generation).transcribe(features, BUDGET)
    k = next(i for i in range(1, BUDGET - 2) if free[0][i] not in free[0][:i])
    generation.eos_token_id = generation.pad_token_id = free[0][k]
    static = StaticWhisper(
        model, generation, prompt_ids(generation, None), BUDGET, 4, graphs=False, overlap=overlap
    )
    replays = []
    replay = static._replay
    static._replay = lambda n, positions: replays.append(n) or replay(n, positions)
    assert (
        static.transcribe(features, BUDGET)
        == [free[0][:k]]
        == _generated(model, features, generation)
    )
    assert len(replays) == k + 1 + (1 if overlap else 0)


def test_a_row_does_not_depend_on_its_batch(model):
    generation = copy.deepcopy(model.generation_config)
    static = _static(model, generation)
    static.warm(buckets(4))  # every bucket's step, once
    features = _features(3, seed=3)
    together = static.transcribe(features, BUDGET)  # bucket 4: one stale row
    alone = [static.transcribe(features[i : i + 1], BUDGET)[0] for i in range(3)]
    assert together == alone
    assert static.transcribe(features[:2], 4) == [row[:4] for row in together[:2]]
    assert buckets(4) == [1, 2, 4] and buckets(6) == [1, 2, 4, 6]


def test_too_long_a_decode_is_refused(model):
    with pytest.raises(ValueError, match="more than the decoder's 24 positions"):
        StaticWhisper(model, model.generation_config, [1], 24, 2, graphs=False)
    static = StaticWhisper(model, model.generation_config, [1], 4, 2, graphs=False)
    with pytest.raises(ValueError, match="a batch of 3 utterances"):
        static.transcribe(_features(3), 4)


def test_the_window_is_the_utterance_plus_a_second_in_steps_of_window_s():
    assert [window_frames(s, 10, 3000) for s in (0.5, 3, 8.99, 9.5, 19, 25, 40)] == [
        1000,
        1000,
        1000,
        2000,
        2000,
        3000,
        3000,
    ]
    assert window_frames(3, None, 3000) == 3000 and window_frames(3, 15, 3000) == 1500
    assert window_frames(3, 10.01, 3000) == 1002  # even: the encoder halves the frames
    assert windows(10, 3000) == [1000, 2000, 3000] and windows(15, 3000) == [1500, 3000]
    assert windows(None, 3000) == [3000] and windows(10, 200) == [200]


def test_encode_is_the_encoders_forward_in_the_whole_window(model):
    features = _features(2, seed=4)
    with torch.inference_mode():
        ours = encode(model.model.encoder, features)
        theirs = model.model.encoder(features).last_hidden_state
    assert torch.equal(ours, theirs)


def test_a_shorter_window_equals_generate_with_that_many_encoder_positions(model):
    generation = copy.deepcopy(model.generation_config)
    full = 2 * TINY["max_source_positions"]
    static = StaticWhisper(
        model,
        generation,
        prompt_ids(generation, None),
        BUDGET,
        4,
        graphs=False,
        frames=[full // 2, full],
    )
    short = _features(3, seed=5, frames=full // 2)
    cut = copy.deepcopy(model)  # the same weights, an encoder of half the positions
    cut.config.max_source_positions = TINY["max_source_positions"] // 2
    table = cut.model.encoder.embed_positions
    table.weight = torch.nn.Parameter(table.weight[: full // 4].clone())
    table.num_embeddings = full // 4
    got = static.transcribe(short, BUDGET)
    assert got == _generated(cut, short, generation)
    # the whole window still decodes as before, after a shorter one used the same buffers
    whole = _features(3, seed=5)
    assert static.transcribe(whole, BUDGET) == _generated(model, whole, generation)
    assert got != static.transcribe(torch.nn.functional.pad(short, (0, full // 2)), BUDGET)
    with pytest.raises(ValueError, match=r"a window of 60 frames \(one of \[100, 200\]\)"):
        static.transcribe(_features(1, frames=60), BUDGET)
    with pytest.raises(ValueError, match="even, at most the model's 200 frames"):
        StaticWhisper(model, generation, [1], 4, 2, graphs=False, frames=[400])
