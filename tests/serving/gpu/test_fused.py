"""The fused decode path of serving/gpu/slots.py on CPU: fused projections, RMSNorm and rotary
embedding compute what the transformers modules compute, store no second copy of a weight, give
CSM and Moshi the same frames as the modules' path, and dispatch far fewer operations a step
(the kernel count that bounds a step on a GPU, docs/gpu.md)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

pytest.importorskip("transformers")

import torch  # noqa: E402 - after the skip
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from benchmarks.gpu_native import TINY as MOSHI_TINY  # noqa: E402
from benchmarks.gpu_tts import TINY as CSM_TINY  # noqa: E402
from serving.gpu.csm import CsmEngine, CsmOptions  # noqa: E402
from serving.gpu.moshi import MoshiEngine, MoshiOptions  # noqa: E402
from serving.gpu.slots import (  # noqa: E402
    SlotCache,
    decode_layer,
    fuse_layers,
    gumbel,
    prefill_rows,
    rms_norm,
    rope_tables,
    sample_top_k,
)
from serving.weights import WeightSource, load_model  # noqa: E402

FRAME = 1920


@pytest.fixture(scope="module")
def csm():
    torch.manual_seed(0)
    return load_model(
        WeightSource("dummy", preset="csm-1b", overrides=CSM_TINY), "tts", "cpu", "float32"
    )


@pytest.fixture(scope="module")
def moshi():
    torch.manual_seed(0)
    model = load_model(
        WeightSource("dummy", preset="moshi-7b", overrides=MOSHI_TINY), "native", "cpu", "float32"
    )
    for module in model.audio_encoder.modules():  # dummy codebooks are zero
        if hasattr(module, "embed_sum"):
            module.embed_sum.normal_(std=0.05)
            module._embed = None
    return model


def test_rotary_tables_and_rms_norm_equal_the_modules():
    from transformers.models.csm.modeling_csm import CsmRMSNorm, apply_rotary_pos_emb
    from transformers.models.moshi.modeling_moshi import MoshiRMSNorm

    g = torch.Generator().manual_seed(3)
    q, k = torch.randn(3, 4, 1, 16, generator=g), torch.randn(3, 2, 1, 16, generator=g)
    angles = torch.randn(3, 1, 8, generator=g)
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)
    want_q, want_k = apply_rotary_pos_emb(q, k, cos, sin)
    tables = rope_tables(cos, sin)
    torch.testing.assert_close(tables(q), want_q, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(tables(k), want_k, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(tables.plain(q), want_q)
    for cls in (CsmRMSNorm, MoshiRMSNorm):
        norm = cls(64, eps=1e-5)
        norm.weight.data.normal_(generator=g)
        x = torch.randn(3, 1, 64, generator=g)
        torch.testing.assert_close(rms_norm(norm, x), norm(x), atol=1e-6, rtol=1e-6)
        half, xh = norm.to(torch.bfloat16), x.to(torch.bfloat16)  # one rounding, not two
        torch.testing.assert_close(rms_norm(half, xh), half(xh), atol=2e-2, rtol=2e-2)


def test_precomputed_gumbel_noise_samples_the_same_tokens():
    g = torch.Generator().manual_seed(4)
    logits, uniform = torch.randn(64, 300, generator=g), torch.rand(64, 50, generator=g)
    assert torch.equal(
        sample_top_k(logits, 50, 0.8, noise=uniform),
        sample_top_k(logits, 50, 0.8, gumbel_noise=gumbel(uniform)),
    )


def test_fused_layers_share_the_weights_and_decode_what_the_modules_decode(csm):
    backbone = csm.backbone_model
    config = csm.config
    attn = backbone.layers[0].self_attn
    plans = fuse_layers(backbone.layers, config.num_key_value_heads, attn.head_dim)
    assert all(plan is not None for plan in plans)
    plan = plans[0]
    # the modules' weights are views into the fused matrices: no second copy
    assert attn.q_proj.weight.data_ptr() == plan.qkv.data_ptr()
    assert attn.k_proj.weight.untyped_storage().data_ptr() == plan.qkv.untyped_storage().data_ptr()
    mlp = backbone.layers[0].mlp
    assert mlp.gate_proj.weight.data_ptr() == plan.gate_up.data_ptr()
    g = torch.Generator().manual_seed(5)
    pos = torch.tensor([6, 11, 3])
    x = torch.randn(3, 1, config.hidden_size, generator=g)

    def decode(use_plans: bool) -> torch.Tensor:
        cache = SlotCache(len(backbone.layers), 4, config.num_key_value_heads, 32, attn.head_dim,
                          "cpu", torch.float32)  # fmt: skip
        for tensor in cache.k + cache.v:
            tensor.normal_(generator=torch.Generator().manual_seed(6))
        mask = (torch.arange(32)[None, :] <= pos[:, None])[:, None, None, :]
        tables = rope_tables(*backbone.rotary_emb(x, pos[:, None]))
        h = x
        for layer, k, v, p in zip(backbone.layers, cache.k, cache.v, plans, strict=True):
            h = decode_layer(layer, h, tables, k, v, pos, mask, plan=p if use_plans else None)
        return h

    def prefill(use_plans: bool) -> tuple[torch.Tensor, torch.Tensor]:
        cache = SlotCache(len(backbone.layers), 2, config.num_key_value_heads, 32, attn.head_dim,
                          "cpu", torch.float32)  # fmt: skip
        # two prompts in one pass (rows 1 and 0), the second right-padded from 5 to 9 tokens
        h = torch.randn(2, 9, config.hidden_size, generator=torch.Generator().manual_seed(9))
        h[1, 5:] = 0
        tables = rope_tables(*backbone.rotary_emb(h, torch.arange(9)[None]))
        rows = torch.tensor([1, 0])
        for layer, k, v, p in zip(backbone.layers, cache.k, cache.v, plans, strict=True):
            h = prefill_rows(layer, h, k, v, rows, tables, plan=p if use_plans else None)
        return torch.cat([h[0], h[1, :5]]), cache.k[-1][[1, 0], :, :9]

    with torch.inference_mode():
        torch.testing.assert_close(decode(True), decode(False), atol=1e-5, rtol=1e-5)
        for fused, plain in zip(prefill(True), prefill(False), strict=True):
            torch.testing.assert_close(fused, plain, atol=1e-5, rtol=1e-5)


def _dispatched(fn) -> int:
    """Operations dispatched by ``fn()`` (views excluded): about one CUDA kernel each."""
    views = {"view", "transpose", "reshape", "select", "slice", "expand", "as_strided",
             "unsqueeze", "squeeze", "t", "permute", "alias", "empty", "_unsafe_view", "detach",
             "empty_strided", "split", "chunk", "narrow", "empty_like", "numpy_T",
             "split_with_sizes", "lift_fresh"}  # fmt: skip

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func._schema.name.removeprefix("aten::")
            if name not in views:
                self.ops[name] += 1
            return func(*args, **(kwargs or {}))

    counter = Count()
    with torch.inference_mode(), counter:
        fn()
    return sum(counter.ops.values())


def _csm_engines(model) -> dict[bool, CsmEngine]:
    options = {"max_batch": 2, "max_len": 64, "temperature": 0}
    return {
        fuse: CsmEngine(model, CsmOptions(**options, fuse=fuse), dummy=True, weights_label="dummy")
        for fuse in (False, True)
    }


def test_csm_fused_step_makes_the_same_codes(csm):
    engines = _csm_engines(csm)
    try:
        g = torch.Generator().manual_seed(7)
        start = torch.randn(2, 1, csm.config.hidden_size, generator=g)
        codes = {}
        for fuse, engine in engines.items():
            engine.pos[:2] = torch.tensor([5, 9])
            engine.step_in[:2] = start
            with torch.inference_mode():
                engine._step(2)
                engine._step(2)
            codes[fuse] = engine.out_codes[:2].clone()
        assert torch.equal(codes[True], codes[False])
    finally:
        for engine in engines.values():
            engine.close()


def test_csm_fused_step_dispatches_far_fewer_operations():
    """In bfloat16, as served (float32 hides RMSNorm's casts): with the csm-1b configuration's
    16 + 4 layers (narrow widths) a step dispatches 6,389 operations on the modules' path and
    2,709 fused; these 2 + 1 tiny layers dispatch 1,798 and 758."""
    torch.manual_seed(0)
    model = load_model(
        WeightSource("dummy", preset="csm-1b", overrides=CSM_TINY), "tts", "cpu", "bfloat16"
    )
    engines = _csm_engines(model)
    try:
        ops = {fuse: _dispatched(lambda e=engine: e._step(2)) for fuse, engine in engines.items()}
    finally:
        for engine in engines.values():
            engine.close()
    assert ops[True] < 0.5 * ops[False], ops


def test_moshi_fused_engine_speaks_the_modules_frames(moshi):
    rng = np.random.default_rng(8)
    frames = [rng.normal(0, 0.1, FRAME).astype(np.float32) for _ in range(4)]
    audio = {}
    for fuse in (False, True):
        options = MoshiOptions(max_batch=2, max_len=32, text_top_k=1, audio_top_k=1, fuse=fuse)
        engine = MoshiEngine(moshi, options, dummy=True, weights_label="dummy")
        try:
            slot = engine.open()
            audio[fuse] = [engine.submit(slot, f).result(timeout=60)[1].copy() for f in frames]
            engine.close(slot)
        finally:
            engine.shutdown()
    for fused, plain in zip(audio[True], audio[False], strict=True):
        np.testing.assert_allclose(fused, plain, rtol=0, atol=1e-5)
