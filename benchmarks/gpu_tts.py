"""CSM TTS on one CUDA GPU: what one step costs, and `fdb tts-bench` against
`fdb serve --system gpu-tts`.

Run on a GPU machine (dummy weights unless --config points the node at a checkpoint)::

    python benchmarks/gpu_tts.py --out OUT [--concurrency 1,2,4,8,16,32,64] [--seed-tts DIR]

1. The step profile (in this process): the batched frame step (backbone, 31 depth-decoder
   steps, sampling) at batch 1, 16 and 64, eager and as a CUDA graph replay (CUDA events, median
   of 20), and for the eager step the number of kernels and their summed GPU time from
   torch.profiler: launches against GPU-busy time, i.e. what bounds a step.
2. The serving numbers, as a user gets them: `python -m fdb serve --system gpu-tts` on a free
   port, then `python -m fdb tts-bench --url … --frame-rate 12.5 --no-quality` at each level.
   TTS.md, tts.json and the server log land in OUT.

Every figure from dummy weights measures the compute path only (the audio is noise, and each
request's length is set by its text at the dummy speaking rate): OUT/summary.json says so.
``--tiny`` runs everything on CPU with a tiny configuration, to check the script itself.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.cascade_capacity import _free_port  # noqa: E402
from fdb.io import atomic_write_text  # noqa: E402
from runs.server import ManagedServer  # noqa: E402

MIMI_TINY = {  # the tiny Mimi of the tiny CSM (and of gpu_native's tiny Moshi)
    "model_type": "mimi",
    "upsample_groups": 32,
    "hidden_size": 32,
    "num_filters": 4,
    "num_hidden_layers": 1,
    "intermediate_size": 64,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "codebook_dim": 16,
    "vector_quantization_hidden_dimension": 16,
    "num_quantizers": 32,
}
TINY = {
    "num_hidden_layers": 2,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "text_vocab_size": 300,
    "depth_decoder_config": {
        "num_hidden_layers": 1,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 16,
        "backbone_hidden_size": 64,
    },
    "codec_config": MIMI_TINY,
}


def profile_steps(tiny: bool, batches: list[int], codec: str = "streaming") -> dict:
    """The batched frame step at each batch, eager and as a CUDA graph replay, with its kernel
    count and their GPU time, and Mimi's decode: with the fused layers the server runs, then on
    the modules' own operations (``fuse`` off), the A/B of serving.gpu.slots.fuse_layers."""
    # lazy: torch and serving.gpu (built on it) are optional; the module imports without them
    import torch

    from serving.gpu.csm import CsmEngine, CsmOptions
    from serving.weights import WeightSource, load_model

    device = "cpu" if tiny else "cuda"
    source = WeightSource("dummy", preset="csm-1b", overrides=TINY if tiny else {})
    model = load_model(source, "tts", device, "float32" if tiny else "bfloat16")
    results: dict = {}
    for fuse in (True, False):
        engine = CsmEngine(
            model,
            CsmOptions(max_batch=max(batches), max_len=1024, codec=codec, fuse=fuse),
            dummy=True,
            weights_label=source.label(),
        )
        engine.pos.fill_(200)  # a realistic prompt + some audio already in the cache
        results["fused" if fuse else "modules"] = _profile_engine(engine, batches, device, fuse)
        engine.close()
        if fuse:
            results["prefill"] = _profile_prefill(engine, device)
        engine = None
        if device == "cuda":
            torch.cuda.empty_cache()
    model = None  # noqa: F841 - frees the GPU memory before the server starts
    if device == "cuda":
        torch.cuda.empty_cache()
    return results


def _profile_engine(engine, batches: list[int], device: str, fuse: bool) -> dict:
    # lazy: torch is the optional gpu/embedded extra; the module imports without it (--help)
    import torch

    part: dict = {}
    with torch.inference_mode():
        for n in batches:
            row = {"eager_ms": _timed(lambda n=n: engine._step(n), device)}
            if fuse:
                # transformers' Mimi over a window of 8 frames, eagerly (the window codec)
                row["mimi_eager_ms"] = _timed(lambda n=n: engine._decode(n), device)
                # the codec the server runs: streaming = StaticMimi, a graph replay on CUDA
                row["mimi_served_ms"] = _timed(lambda n=n: engine._run_decode(n), device)
            if device == "cuda":
                graph = engine._capture(n)
                row["graph_ms"] = _timed(graph.replay, device)
                row.update(_kernels(lambda n=n: engine._step(n)))
                if fuse:
                    row["frames_per_s"] = round(
                        n / ((row["graph_ms"] + row["mimi_served_ms"]) / 1000), 1
                    )
            part[str(n)] = row
            print(f"step {'fused' if fuse else 'modules'} batch {n}: {row}", flush=True)
    return part


def _profile_prefill(engine, device: str) -> dict:
    """What admitting requests costs every other request in flight (the engine's thread is
    stopped first, so no slot is stepped): the prefill of a 60-character text alone, with a 3 s
    voice reference (its codes cached, as for a reference sent again; the decoder primed with
    its last frames), and a burst of 16 such texts in one pass (``CsmEngine._admit``)."""
    # lazy: torch and serving.gpu (built on it) are optional; the module imports without them
    import torch

    from serving.gpu.csm import _Request

    text = "The quick brown fox jumps over the lazy dog near the river."
    reference = np.random.default_rng(0).normal(0, 0.1, 3 * 24000).astype(np.float32)
    burst = min(16, engine.opts.max_batch)
    rows = {}
    with torch.inference_mode():
        for name, ref, count in (
            ("text_only_ms", None, 1),
            ("with_3s_reference_ms", reference, 1),
            (f"burst_of_{burst}_ms", None, burst),
        ):
            requests = [_Request(text=text, ref_audio=ref, ref_text=text) for _ in range(count)]
            batch = [(r, i, *engine._checked_prompt(r)) for i, r in enumerate(requests)]
            rows[name] = _timed(lambda b=batch: engine._prefill(b), device)
    for i in range(burst):
        engine._slots[i] = None
    print(f"prefill: {rows}", flush=True)
    return rows


def _timed(fn, device: str, repeats: int = 20) -> float:
    # lazy: torch is the optional gpu/embedded extra; the module imports without it (--help)
    import torch

    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t) * 1000)
    return round(statistics.median(times), 3)


def _kernels(fn) -> dict:
    """Kernels launched by one eager step and their summed GPU time (torch.profiler)."""
    # lazy: torch is the optional gpu/embedded extra; the module imports without it (--help)
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    busy_us = sum(e.device_time for e in kernels)
    return {"kernels_per_step": len(kernels), "kernel_time_ms": round(busy_us / 1000, 3)}


def launch_file(path: Path, tiny: bool, codec: str) -> Path:
    """gpu-tts's launch file with ``codec``; with ``tiny`` the tiny CSM on CPU in float32."""
    tts = {
        "kind": "csm_gpu",
        "codec": codec,
        "weights": {"load_format": "dummy", "preset": "csm-1b"},
    }
    if tiny:
        tts.update(device="cpu", dtype="float32", max_batch=4)
        tts["weights"]["overrides"] = TINY
    raw = {"system": "gpu-tts", "backends": {"asr": "none", "llm": "none", "tts": tts}}
    return atomic_write_text(path, yaml.safe_dump(raw, sort_keys=False))


def serve_and_bench(args, out: Path) -> dict:
    config = args.config
    if config is None and (args.tiny or args.codec != "streaming"):
        config = launch_file(out / "launch.yaml", args.tiny, args.codec)
    server = ManagedServer(
        system="gpu-tts",
        host="127.0.0.1",
        port=_free_port(),
        config=config,
        log_path=out / "server.log",
        ready_timeout_s=600,
    )
    server.start()
    try:
        bench = [
            sys.executable,
            "-m",
            "fdb",
            "tts-bench",
            "--url",
            server.http_url,
            "--output",
            str(out / "tts-bench"),
            "--concurrency",
            args.concurrency,
            "--num-prompts",
            str(args.num_prompts),
            "--num-warmups",
            "2",
            "--frame-rate",
            "12.5",
            "--no-quality",
            "--timeout-s",
            "300",
        ]
        if args.seed_tts:
            bench += ["--seed-tts", str(args.seed_tts)]
        started = time.monotonic()
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        done = subprocess.run(bench, env=env, cwd=ROOT, capture_output=True, text=True)
        (out / "tts-bench.log").write_text(done.stdout + done.stderr)
        return {
            "tts_bench_exit": done.returncode,
            "tts_bench_s": round(time.monotonic() - started, 1),
        }
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--concurrency", default="1,2,4,8,16,32,64")
    parser.add_argument("--num-prompts", type=int, default=64)
    parser.add_argument("--seed-tts", type=Path, default=None)
    parser.add_argument(
        "--config", type=Path, default=None, help="a launch.yaml instead of --system gpu-tts"
    )
    parser.add_argument("--batches", default="1,16,64")
    parser.add_argument(
        "--tiny", action="store_true", help="CPU, tiny configuration: checks the script"
    )
    parser.add_argument("--skip-profile", action="store_true")
    parser.add_argument(
        "--codec",
        choices=["streaming", "window"],
        default="streaming",
        help="CSM's Mimi decode: streaming (serving.gpu.mimi_static, captured) or window "
        "(transformers' Mimi over the last 8 frames, eager): run both for an A/B",
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    summary: dict = {
        "weights": "dummy (csm-1b configuration): compute path only, the audio is noise",
        "codec": args.codec,
        "command": sys.argv,
    }
    if not args.skip_profile:
        summary["step_profile"] = profile_steps(
            args.tiny, [int(b) for b in args.batches.split(",")], args.codec
        )
    summary.update(serve_and_bench(args, args.out))
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
