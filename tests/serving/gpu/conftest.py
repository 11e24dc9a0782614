"""Tiny configurations of the GPU models (1 layer, hidden 32) that load on CPU in about a second."""

from __future__ import annotations

TINY_WHISPER = {
    "d_model": 32,
    "encoder_layers": 1,
    "decoder_layers": 1,
    "encoder_attention_heads": 2,
    "decoder_attention_heads": 2,
    "encoder_ffn_dim": 64,
    "decoder_ffn_dim": 64,
    "num_mel_bins": 80,
    "vocab_size": 64,
    "max_source_positions": 100,
    "max_target_positions": 32,
    "decoder_start_token_id": 1,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
}
TINY_QWEN = {
    "hidden_size": 32,
    "num_hidden_layers": 1,
    "intermediate_size": 64,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 16,
    "vocab_size": 300,
}


def tiny_asr(**extra) -> dict:
    return {
        "kind": "whisper_gpu",
        "device": "cpu",
        "dtype": "float32",
        "max_batch": 4,
        "max_new_tokens": 4,
        "weights": {
            "load_format": "dummy",
            "preset": "whisper-large-v3",
            "overrides": TINY_WHISPER,
        },
        **extra,
    }


def tiny_llm(**extra) -> dict:
    return {
        "kind": "causal_lm_gpu",
        "device": "cpu",
        "dtype": "float32",
        "max_batch": 4,
        "max_new_tokens": 8,
        "block_size": 32,
        "max_prompt_tokens": 256,
        "weights": {"load_format": "dummy", "preset": "qwen3-4b", "overrides": TINY_QWEN},
        **extra,
    }
