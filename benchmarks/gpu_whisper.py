"""Whisper's transcription of one batch, part by part, with the static decoder
(serving.gpu.whisper_static, a CUDA graph per bucket) against transformers' ``generate``, in one
process on one model. The variants run round robin, so each median is taken under the same load::

    python benchmarks/gpu_whisper.py --device cuda --batches 1,16,32 --tokens 24 --reps 5
    python benchmarks/gpu_whisper.py --device cpu --tiny --batches 1,2 --reps 2  # checks it

The model is the whisper-large-v3 configuration with dummy weights (random: the compute path only,
the tokens are noise), or a tiny one (``--tiny``). Each utterance is 3 s of noise, padded to the
batch's window as in serving (``--window-s``, default 10: the whisper_gpu node's; ``generate``
always takes 30 s). Per batch size it prints the median ms of: the log-mel features on the
device, the encoder in the window and in 30 s, the cross-attention keys and values, one static
decoder step (graph replay), a whole static transcription of ``--tokens`` tokens (features
included) in the window with the forced prompt in one pass (the default) and a step a token
(``static_steps``), and in 30 s, a whole ``generate`` of as many (features included), the
engine's own ``run_batch`` (static, features included, on the engine's CUDA stream: what a server
runs); and how many rows' tokens the static decoder in 30 s and ``generate`` agree on (in
bfloat16 they may part where two scores are closer than its rounding). ``--out`` writes it as
JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

TINY = {
    "d_model": 64,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "encoder_attention_heads": 2,
    "decoder_attention_heads": 2,
    "encoder_ffn_dim": 128,
    "decoder_ffn_dim": 128,
    "num_mel_bins": 80,
    "max_source_positions": 1500,
    "max_target_positions": 448,
}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--batches", default="1,16,32")
    parser.add_argument("--tokens", type=int, default=24)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--window-s", type=float, default=10.0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)

    # lazy: torch and transformers are the optional gpu extra; the module imports without them
    import torch

    from serving.gpu.slots import bucket
    from serving.gpu.whisper import WhisperEngine
    from serving.gpu.whisper_static import encode
    from serving.graph.kinds import WhisperGpuOptions

    batches = [int(b) for b in args.batches.split(",")]
    weights = {"load_format": "dummy", "preset": "whisper-large-v3"}
    if args.tiny:
        weights["overrides"] = TINY
    o = WhisperGpuOptions(
        weights=weights,
        device=args.device,
        dtype=args.dtype,
        max_batch=max(batches),
        max_new_tokens=args.tokens,
        max_tokens_per_s=None,
        window_s=args.window_s,
    )
    started = time.perf_counter()
    engine = WhisperEngine.from_options(o)
    load_s = time.perf_counter() - started
    started = time.perf_counter()
    engine.warm_graphs()
    capture_s = time.perf_counter() - started
    static, model = (engine.statics[0] if engine.statics else None), engine.model
    cuda = args.device.startswith("cuda")

    def sync():
        if cuda:
            torch.cuda.synchronize()

    def features(clips, samples=None):
        samples = samples or engine.samples
        inputs = engine.features(
            [c[:samples] for c in clips],
            sampling_rate=16000,
            return_tensors="pt",
            padding="max_length",
            max_length=samples,
            truncation=True,
            device=args.device,
        )
        return inputs.input_features.to(args.device, engine.dtype)

    def timed(fn, *a):
        sync()
        t = time.perf_counter()
        out = fn(*a)
        sync()
        return (time.perf_counter() - t) * 1000, out

    def steps(n: int, positions: int) -> None:
        for _ in range(args.tokens):
            static._replay(n, positions)

    def generate(clips):
        extra = {"language": "en", "task": "transcribe"} if engine._multilingual() else {}
        out = model.generate(
            input_features=features(clips),
            generation_config=engine.generation,
            max_new_tokens=args.tokens,
            **extra,
        )
        return out.tolist()

    def one_round(clips, n: int):
        """The parts' ms, the static rows and generate's rows."""
        got = {}
        window = engine.window(clips)
        got["features"], feats = timed(features, clips, window)
        got["encoder"], enc = timed(encode, model.model.encoder, feats)
        got["encoder_30s"], _ = timed(encode, model.model.encoder, features(clips))
        got["cross"], _ = timed(static._cross, enc, len(clips))
        ms, _ = timed(steps, n, enc.shape[1])
        got["step"] = ms / args.tokens
        got["static"], _ = timed(lambda: static.transcribe(features(clips, window), args.tokens))
        passed, static.prompt_pass = static.prompt_pass, False  # a step a token (the A/B)
        got["static_steps"], _ = timed(
            lambda: static.transcribe(features(clips, window), args.tokens)
        )
        static.prompt_pass = passed
        got["static_30s"], rows = timed(lambda: static.transcribe(features(clips), args.tokens))
        got["generate"], gen = timed(generate, clips)
        got["engine"], _ = timed(engine.run_batch, clips)  # the served path: its own stream
        return got, rows, gen

    report: dict = {
        "weights": "dummy (whisper-large-v3 configuration): compute path only"
        if not args.tiny
        else "dummy (tiny configuration): checks the script, measures nothing",
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "dtype": args.dtype,
        "tokens": args.tokens,
        "window_s": args.window_s,
        "load_s": round(load_s, 1),
        "capture_s": round(capture_s, 1),
        "static_bytes": static.nbytes(),
        "batches": {},
    }
    with torch.inference_mode():
        for b in batches:
            rng = np.random.default_rng(b)
            clips = [rng.normal(0, 0.1, 48000).astype(np.float32) for _ in range(b)]
            times: dict[str, list[float]] = {
                k: []
                for k in (
                    "features",
                    "encoder",
                    "encoder_30s",
                    "cross",
                    "step",
                    "static",
                    "static_steps",
                    "static_30s",
                    "generate",
                    "engine",
                )
            }
            agree = None
            n = bucket(b, static.max_batch)
            for rep in range(args.reps + 1):  # the first round warms (not counted)
                got, rows, gen = one_round(clips, n)
                if rep == 0:
                    eos = engine.generation.eos_token_id
                    gen = [r[: r.index(eos)] if eos in r else r for r in gen]
                    agree = sum(a == g for a, g in zip(rows, gen, strict=True))
                    continue
                for k, v in got.items():
                    times[k].append(v)
            line = {k: round(statistics.median(v), 2) for k, v in times.items()}
            line["rows_agreeing"] = f"{agree}/{b}"
            report["batches"][str(b)] = line
            print(f"batch {b}: " + ", ".join(f"{k} {v}" for k, v in line.items()), flush=True)
    engine.close()
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    return report


if __name__ == "__main__":
    main()
