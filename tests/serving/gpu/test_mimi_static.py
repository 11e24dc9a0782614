"""Static-shape streaming Mimi (serving/gpu/mimi_static.py) on CPU with a tiny configuration
(float32): its encoder equals transformers' streaming encode frame after frame, its decoder
equals transformers' decode of all codes so far, over 12 frames with a sliding window of 5
tokens (so the key ring wraps); three slots at different positions (a reset mid-way, rows off
for a call) each equal a fresh transformers stream; no call moves or reshapes a state tensor.
On CUDA (marked gpu): the captured graphs equal the eager calls, with no host sync."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

import torch  # noqa: E402 - after the skip

from benchmarks.gpu_mimi import TINY  # noqa: E402
from serving.gpu.mimi_static import MimiGraphs, StaticMimi  # noqa: E402

FRAMES = 12
# two SEANet stages (4 and 3) instead of Mimi's four (8, 6, 5, 4): a frame of 24 samples, the same
# structure (causal convs, strided and transposed convs, the 2x down/upsampling around transformers)
TINY_MIMI = TINY
FRAME = 4 * 3 * 2  # samples per frame (the real configuration: 8 * 6 * 5 * 4 * 2 = 1920)


def _model(device: str = "cpu"):
    from transformers import MimiConfig, MimiModel

    torch.manual_seed(0)
    model = MimiModel(MimiConfig(**TINY_MIMI)).eval()
    with torch.no_grad():  # random codebooks (fresh ones are all zero: every code would be 0)
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
        q = model.quantizer
        for rvq in (q.semantic_residual_vector_quantizer, q.acoustic_residual_vector_quantizer):
            for layer in rvq.layers:
                layer.codebook.embed_sum.normal_()
                layer.codebook._embed = None
    return model.to(device)


@pytest.fixture(scope="module")
def model():
    return _model()


def _audio(rows: int, frames: int, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, frames * FRAME, generator=g) * 0.3


def _stream_encode(model, audio: torch.Tensor) -> torch.Tensor:
    """transformers' streaming encode, one frame per call: codes [rows, K, frames]."""
    padding, past, codes = None, None, []
    with torch.no_grad():
        for f in range(audio.shape[1] // FRAME):
            out = model.encode(
                audio[:, None, f * FRAME : (f + 1) * FRAME],
                padding_cache=padding,
                encoder_past_key_values=past,
                use_streaming=True,
            )
            padding, past = out.padding_cache, out.encoder_past_key_values
            codes.append(out.audio_codes)
    return torch.cat(codes, dim=-1)


def _full_decode(model, codes: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model.decode(codes).audio_values[:, 0]


def test_encode_equals_transformers_streaming_encode(model):
    audio = _audio(3, FRAMES)
    ref = _stream_encode(model, audio)
    with torch.no_grad():
        assert torch.equal(ref, model.encode(audio[:, None]).audio_codes)  # streaming == whole
    assert all(
        ref[:, k].unique().numel() > 2 for k in range(ref.shape[1])
    )  # codes that say something
    mimi = StaticMimi(model, slots=3)
    assert mimi.frame == FRAME
    ours = torch.stack(
        [mimi.encode(audio[:, f * FRAME : (f + 1) * FRAME]) for f in range(FRAMES)], dim=-1
    )
    assert torch.equal(ours, ref)
    assert torch.equal(mimi.positions()[0], torch.full((3,), FRAMES))
    fewer = StaticMimi(model, slots=3, num_quantizers=2)
    assert torch.equal(fewer.encode(audio[:, :FRAME]), ref[:, :2, 0])


def test_decode_equals_transformers_decode_of_everything_so_far(model):
    codes = _stream_encode(model, _audio(3, FRAMES, seed=2))
    ref = _full_decode(model, codes)
    mimi = StaticMimi(model, slots=3)
    ours = torch.cat([mimi.decode(codes[:, :, f]) for f in range(FRAMES)], dim=-1)
    assert ours.shape == ref.shape
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-5 * ref.abs().max().item())
    # transformers' own frame-by-frame decode (decoder_past_key_values only) keeps no conv state:
    # its frames restart from zero padding, so it is not a stream of the same audio
    from transformers.cache_utils import DynamicCache

    past, frames = DynamicCache(config=model.config), []
    with torch.no_grad():
        for f in range(FRAMES):
            out = model.decode(codes[:, :, f : f + 1], decoder_past_key_values=past)
            past = out.decoder_past_key_values
            frames.append(out.audio_values[:, 0])
    assert not torch.allclose(torch.cat(frames, dim=-1), ref, atol=1e-3)


def test_slots_at_different_positions_reset_and_off_rows(model):
    """Slot 0 streams all 12 frames but is off at frame 5; slot 1 is reset at frame 4, slot 2 at
    frame 7 (a new session in that slot); each slot equals its own fresh transformers stream."""
    audio = _audio(3, FRAMES, seed=3)
    codes_in = _stream_encode(model, _audio(3, FRAMES, seed=4))
    starts = {0: 0, 1: 4, 2: 7}
    off = {(0, 5)}
    mimi = StaticMimi(model, slots=3)
    got_codes = {s: [] for s in starts}
    got_audio = {s: [] for s in starts}
    fed = {s: [] for s in starts}
    for f in range(FRAMES):
        resets = [s for s, start in starts.items() if start == f and f > 0]
        if resets:
            mimi.reset(resets)
            for s in resets:
                got_codes[s], got_audio[s], fed[s] = [], [], []
        active = torch.tensor([(s, f) not in off for s in range(3)])
        codes = mimi.encode(audio[:, f * FRAME : (f + 1) * FRAME], active)
        pcm = mimi.decode(codes_in[:, :, f], active)
        for s in range(3):
            if active[s]:
                got_codes[s].append(codes[s])
                got_audio[s].append(pcm[s])
                fed[s].append(f)
    assert torch.equal(mimi.positions()[0], torch.tensor([FRAMES - 1, FRAMES - 4, FRAMES - 7]))
    for s in range(3):
        frames = fed[s]
        assert len(frames) >= 5
        own_audio = torch.cat(
            [audio[s : s + 1, f * FRAME : (f + 1) * FRAME] for f in frames], dim=-1
        )
        assert torch.equal(torch.stack(got_codes[s], dim=-1), _stream_encode(model, own_audio)[0])
        ref = _full_decode(model, codes_in[s : s + 1, :, frames])[0]
        torch.testing.assert_close(
            torch.cat(got_audio[s]), ref, rtol=1e-5, atol=1e-5 * ref.abs().max().item()
        )


def test_calls_keep_every_state_tensor_in_place(model):
    mimi = StaticMimi(model, slots=3)
    states = mimi.state_tensors()
    before = [(t.data_ptr(), t.shape, t.stride()) for t in states]
    audio = _audio(3, 8, seed=5)
    graphs = MimiGraphs(mimi)  # no CUDA: the same calls, eagerly
    assert not graphs.use_graphs
    for f in range(8):
        codes = graphs.encode(
            audio[:, f * FRAME : (f + 1) * FRAME], torch.tensor([True, f % 3 > 0, True])
        )
        graphs.decode(codes)
        if f == 4:
            graphs.reset([1])
    after = mimi.state_tensors()
    assert len(after) == len(states)
    assert [(t.data_ptr(), t.shape, t.stride()) for t in after] == before
    assert any(t.abs().sum() > 0 for t in states if t.is_floating_point())  # they were written


@pytest.mark.gpu
def test_cuda_graphs_equal_eager_without_host_sync():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    model = _model("cuda")
    audio = _audio(4, FRAMES, seed=6).cuda()
    eager, captured = StaticMimi(model, slots=4), StaticMimi(model, slots=4)
    graphs = MimiGraphs(captured)
    graphs.warm([2, 4])
    active = torch.tensor([True, True, False, True], device="cuda")
    for f in range(FRAMES):
        frame = audio[:, f * FRAME : (f + 1) * FRAME]
        if f == 6:
            eager.reset([0])
            graphs.reset([0])
        torch.cuda.set_sync_debug_mode("error")
        try:
            want_codes = eager.encode(frame, active)
            want_pcm = eager.decode(want_codes, active)
            got_codes = graphs.encode(frame, active).clone()
            got_pcm = graphs.decode(got_codes, active).clone()
        finally:
            torch.cuda.set_sync_debug_mode("default")
        keep = active.nonzero()[:, 0]
        assert torch.equal(got_codes[keep], want_codes[keep])
        torch.testing.assert_close(got_pcm[keep], want_pcm[keep].float(), rtol=1e-4, atol=1e-4)
        small = graphs.encode(frame[:2]).clone()  # the bucket of 2 rows, rows 2-3 untouched
        assert small.shape == (2, model.config.num_quantizers)
        eager.encode(frame[:2])
    assert {("encode", 2), ("encode", 4), ("decode", 2), ("decode", 4)} <= set(graphs._graphs)


def test_prime_decoder_continues_from_a_reference(model):
    """CSM's voice reference: its last frames primed into one slot's decoder stream, then the
    slot's new frames equal the tail of a full decode of reference + new codes."""
    codes = _stream_encode(model, _audio(1, 6, seed=7))[0]  # [K, 6]
    graphs = MimiGraphs(StaticMimi(model, slots=2))
    graphs.prime_decoder(1, codes[:, :3])
    assert torch.equal(graphs.mimi.positions()[1], torch.tensor([0, 3]))
    rows = torch.zeros(2, codes.shape[0], dtype=torch.long)
    got = []
    for f in range(3, 6):
        rows[1] = codes[:, f]
        got.append(graphs.decode(rows, torch.tensor([False, True]))[1].clone())
    ref = _full_decode(model, codes[None])[0, 3 * FRAME :]
    torch.testing.assert_close(torch.cat(got), ref, rtol=1e-5, atol=1e-5 * ref.abs().max().item())
