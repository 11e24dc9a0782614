"""One Mimi encode and decode call, side by side: transformers' Mimi (streaming, and the 8-frame
window serving/gpu used before the static codec) against serving.gpu.mimi_static eagerly and as
CUDA graphs. The variants run round robin, so each median is taken under the same load::

    python benchmarks/gpu_mimi.py --device cuda --batch 16 --reps 50 --dtype bfloat16
    python benchmarks/gpu_mimi.py --device cpu --tiny --batch 4 --reps 20      # checks the script

The configuration is kyutai's Mimi (transformers' ``MimiConfig()`` defaults: moshi-7b's and
csm-1b's codec) with random weights, or a tiny one (``--tiny``); ``--codebooks`` 8 (Moshi) or 32
(CSM). It prints one line per variant (median ms of ``--reps`` calls) and, with ``--out``, writes
them as JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# tests/serving/gpu/test_mimi_static.py's configuration too: every structural part of Mimi,
# 24-sample frames
TINY = dict(
    upsampling_ratios=[4, 3],
    hidden_size=16,
    num_filters=4,
    codebook_size=32,
    codebook_dim=8,
    vector_quantization_hidden_dimension=8,
    num_quantizers=4,
    num_semantic_quantizers=1,
    upsample_groups=16,
    num_hidden_layers=2,
    intermediate_size=32,
    num_attention_heads=2,
    num_key_value_heads=1,
    sliding_window=5,
)


def variants(
    device: str, dtype, batch: int, codebooks: int, tiny: bool
) -> list[tuple[str, object]]:
    # lazy: torch and transformers are the optional gpu extra; the module imports without them
    import torch
    from transformers import MimiConfig, MimiModel
    from transformers.cache_utils import DynamicCache

    from serving.gpu.mimi_static import MimiGraphs, StaticMimi

    config = MimiConfig(**TINY) if tiny else MimiConfig()
    k = min(codebooks, config.num_quantizers)
    torch.manual_seed(0)
    mimi = MimiModel(config).eval().to(device, dtype)
    frame = config.frame_size
    x = torch.randn(batch, 1, frame, device=device, dtype=dtype) * 0.3
    codes = torch.randint(0, config.codebook_size, (batch, k, 1), device=device)
    state = {"padding": None, "kv": None, "dkv": DynamicCache(config=config)}

    def stream_encode():
        out = mimi.encode(
            x,
            num_quantizers=k,
            padding_cache=state["padding"],
            encoder_past_key_values=state["kv"],
            use_streaming=True,
        )
        state["padding"], state["kv"] = out.padding_cache, out.encoder_past_key_values

    def stream_decode():
        state["dkv"] = mimi.decode(
            codes, decoder_past_key_values=state["dkv"]
        ).decoder_past_key_values

    window = torch.randn(batch, 1, 8 * frame, device=device, dtype=dtype) * 0.3
    window_codes = torch.randint(0, config.codebook_size, (batch, k, 8), device=device)
    eager = StaticMimi(mimi, batch, num_quantizers=k)
    graphs = MimiGraphs(StaticMimi(mimi, batch, num_quantizers=k))
    graphs.warm([batch])
    pcm, frame_codes = x[:, 0], codes[:, :, 0]
    rows = [
        ("transformers streaming encode", stream_encode),
        ("transformers encode of an 8-frame window", lambda: mimi.encode(window, num_quantizers=k)),
        ("StaticMimi encode, eager", lambda: eager.encode(pcm)),
        ("transformers decode, 1 frame + decoder KV", stream_decode),
        ("transformers decode of an 8-frame window", lambda: mimi.decode(window_codes)),
        ("StaticMimi decode, eager", lambda: eager.decode(frame_codes)),
    ]
    if graphs.use_graphs:
        rows += [
            ("MimiGraphs encode (CUDA graph)", lambda: graphs.encode(pcm)),
            ("MimiGraphs decode (CUDA graph)", lambda: graphs.decode(frame_codes)),
        ]
    return rows


def main() -> int:
    # lazy: torch is the optional gpu/embedded extra; the module imports without it (--help)
    import torch

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    parser.add_argument("--batch", type=int, default=16, help="slots (sessions) per call")
    parser.add_argument("--codebooks", type=int, default=8, help="8 (Moshi) or 32 (CSM)")
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument(
        "--tiny", action="store_true", help="a tiny configuration (checks the script)"
    )
    parser.add_argument("--out", type=Path, default=None, help="write the medians as JSON here")
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    rows = variants(args.device, dtype, args.batch, args.codebooks, args.tiny)
    times: dict[str, list[float]] = {name: [] for name, _ in rows}
    with torch.inference_mode():
        for _, fn in rows:  # warm-up
            fn()
            fn()
        for _ in range(args.reps):
            for name, fn in rows:
                sync()
                started = time.perf_counter()
                fn()
                sync()
                times[name].append((time.perf_counter() - started) * 1000)
    where = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    medians = {name: round(statistics.median(t), 3) for name, t in times.items()}
    print(
        f"Mimi ({'tiny' if args.tiny else 'kyutai'} configuration), batch {args.batch}, "
        f"{args.codebooks} codebooks, {args.dtype}, {where}: median of {args.reps} calls, ms"
    )
    for name, ms in medians.items():
        print(f"{ms:10.3f}  {name}")
    if args.out is not None:
        args.out.write_text(
            json.dumps(
                {
                    "device": where,
                    "batch": args.batch,
                    "dtype": args.dtype,
                    "codebooks": args.codebooks,
                    "reps": args.reps,
                    "median_ms": medians,
                },
                indent=2,
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
