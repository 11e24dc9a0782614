"""Native full-duplex capacity on one GPU: Moshi (moshi-7b configuration) behind fdb's native
protocol.

One command on a CUDA machine (dummy weights)::

    python benchmarks/gpu_native.py --out DIR [--levels 8,16,32] [--dataset DIR]

It writes DIR/launch.yaml (system gpu-native, max_sessions and the engine's slots = the top
level), starts that server (log: DIR/sweep/logs/model-server.log), and runs the serving sweep
(``runs.sweep.sweep``, what ``python -m fdb sweep`` runs) with the PersonaPlex-style recorder
profile ``personaplex-native-80ms`` (24 kHz input, 80 ms units, one response per session) over a
synthetic cohort of candor_turn_taking samples (``benchmarks/cascade_capacity.py``'s; Piper speaks
it, so make it where Piper is and pass --dataset on a GPU machine without Piper). DIR/summary.json
holds per level the sweep's row (failed sessions, units, units later than one unit, unit lag
p50/p95, first audio) and whether the level meets the issue's goal: no failed session and at most
1% of units later than one unit (80 ms). Dummy weights: the model's audio is noise; the protocol,
the batching and the timing are real.

``--tiny``: a 2-layer configuration on CPU (checks the path, measures nothing about a GPU).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import yaml
from rich.console import Console

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.cascade_capacity import SUBSET, _free_port, synthetic_tree  # noqa: E402
from benchmarks.gpu_tts import MIMI_TINY, _kernels, _timed  # noqa: E402
from benchmarks.support.gpu_sweep import sweep_args  # noqa: E402
from fdb.io import atomic_write_json, atomic_write_text  # noqa: E402
from fdb.records.serving import ServingRow  # noqa: E402
from runs.server import ManagedServer  # noqa: E402
from runs.sweep import SweepOptions, parse_levels, sweep  # noqa: E402
from runs.sweep_args import parse_record_options  # noqa: E402

PROFILE = "personaplex-native-80ms"
GOAL_LATE_SHARE = 0.01
TINY = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "head_dim": 16,
    "ffn_dim": 128,
    "vocab_size": 100,
    "depth_decoder_config": {
        "hidden_size": 32,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "ffn_dim": 64,
        "input_size": 64,
    },
    "audio_encoder_config": MIMI_TINY,
}


def profile_steps(tiny: bool, batches: list[int], device: str, codec: str = "streaming") -> dict:
    """The engine's parts at each batch, in this process before the server starts: Mimi encode
    and decode and the captured temporal + depth step (CUDA events, median of 20), with the
    fused layers the server runs; then the step again on the modules' own operations
    (``fuse`` off), eager and captured, with each eager step's kernel count: the A/B of
    serving.gpu.slots.fuse_layers."""
    # lazy: torch and serving.gpu (built on it) are optional; the module imports without them
    import torch

    from serving.gpu.moshi import MoshiEngine, MoshiOptions
    from serving.weights import WeightSource, load_model

    device = "cpu" if tiny else device
    source = WeightSource("dummy", preset="moshi-7b", overrides=TINY if tiny else {})
    model = load_model(source, "native", device, "float32" if tiny else "bfloat16")
    results: dict = {}
    for fuse in (True, False):
        engine = MoshiEngine(
            model,
            MoshiOptions(max_batch=max(batches), codec=codec, fuse=fuse),
            dummy=True,
            weights_label=source.label(),
        )
        part = results.setdefault("fused" if fuse else "modules", {})
        part.update(_profile_engine(engine, batches, device, fuse))
        engine.shutdown()
        engine = None
        if device != "cpu":
            torch.cuda.empty_cache()
    model = None  # noqa: F841 - frees the GPU memory before the server starts
    if device != "cpu":
        torch.cuda.empty_cache()
    return results


def _profile_engine(engine, batches: list[int], device: str, fuse: bool) -> dict:
    # lazy: torch is the optional gpu/embedded extra; the module imports without it (--help)
    import torch

    from serving.gpu.lm_slots import length_bucket

    part: dict = {
        "warm_s": engine.warm_s,
        "graphs": {"-".join(map(str, k)): v is not False for k, v in engine._graphs.items()},
    }
    length = length_bucket(501, engine.opts.max_len)  # the step attends 512 positions
    with torch.inference_mode():
        engine.pos.fill_(500)  # 40 s into a session
        for n in batches:
            engine.active[:n] = True
            row = {
                "step_ms": _timed(
                    lambda n=n: engine._run_graph("step", n, engine._step, length), device
                ),
                "eager_step_ms": _timed(lambda n=n: engine._step(n, length), device),
            }
            if fuse:
                row["encode_ms"] = _timed(lambda n=n: engine._encode(n), device)
                row["decode_ms"] = _timed(lambda n=n: engine._decode(n), device)
                row["frame_ms"] = round(row["encode_ms"] + row["step_ms"] + row["decode_ms"], 3)
            if device != "cpu":
                row.update(_kernels(lambda n=n: engine._step(n, length)))
            part[str(n)] = row
            print(f"moshi {'fused' if fuse else 'modules'} batch {n}: {row}", flush=True)
    return part


def launch_file(
    path: Path, sessions: int, device: str, tiny: bool, codec: str = "streaming"
) -> Path:
    model = {
        "kind": "moshi_gpu",
        "device": "cpu" if tiny else device,
        "max_batch": sessions,
        "codec": codec,
        "weights": {
            "load_format": "dummy",
            "preset": "moshi-7b",
            **({"overrides": TINY} if tiny else {}),
        },
    }
    if tiny:
        model["dtype"] = "float32"
    raw = {
        "system": "gpu-native",
        "max_sessions": sessions,
        "session_nodes": {"moshi": model},  # merged into gpu-native's one (native) node
    }
    return atomic_write_text(path, yaml.safe_dump(raw, sort_keys=False))


def level_summary(row: ServingRow) -> dict:
    late = row.unit_miss_rate
    return {
        "concurrency": row.concurrency,
        "sweep_row": row.model_dump(mode="json"),
        "meets_goal": bool(
            row.sessions_failed == 0 and late is not None and late <= GOAL_LATE_SHARE
        ),
    }


def run(args: argparse.Namespace) -> dict:
    out = args.out
    levels = parse_levels(args.levels)
    profile = (
        None if args.skip_profile else profile_steps(args.tiny, levels, args.device, args.codec)
    )
    sessions = args.sessions or max(levels)
    os.environ.setdefault("SERVER_PORT", str(_free_port()))
    root = synthetic_tree(args.dataset or out / "dataset", sessions)
    record = parse_record_options(
        [
            "--dataset-root",
            str(root),
            "--per-subset",
            "0",
            "--profile",
            PROFILE,
            "--subset-count",
            f"{SUBSET}={sessions}",
        ]
    )
    opts = SweepOptions(output=out / "sweep", concurrency=levels, dataset="v1.0", record=record)
    config = launch_file(out / "launch.yaml", max(levels), args.device, args.tiny, args.codec)
    server = ManagedServer(
        system="gpu-native",
        host="127.0.0.1",
        port=int(os.environ["SERVER_PORT"]),
        config=config,
        log_path=opts.output / "logs" / "model-server.log",
        ready_timeout_s=args.ready_timeout_s,
    )
    server.start()
    try:
        opts.record = record.model_copy(update={"url": server.ws_url})
        data = sweep(opts, Console(stderr=True))
    finally:
        server.stop()
    rows = [ServingRow.model_validate(row) for row in data["rows"]]
    summary_levels = [level_summary(row) for row in rows]
    meeting = [lv["concurrency"] for lv in summary_levels if lv["meets_goal"]]
    summary = {
        "schema": "fdb-gpu-native-benchmark-1",
        "system": "gpu-native",
        "profile": PROFILE,
        "tiny": args.tiny,
        "device": "cpu" if args.tiny else args.device,
        "codec": args.codec,
        "weights": "dummy (moshi-7b configuration): compute path only, the audio is noise",
        "launch": str(config),
        "sessions": sessions,
        "step_profile": profile,
        "levels": summary_levels,
        "goal": {"late_unit_share_at_most": GOAL_LATE_SHARE, "sessions": 16},
        "highest_level_meeting_goal": max(meeting) if meeting else None,
        "sweep_capacity_line": data["capacity"]["line"],
        "command": sys.argv,
    }
    atomic_write_json(out / "summary.json", summary)
    return summary


def main() -> None:
    def extra(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--skip-profile", action="store_true", help="no in-process step profile first"
        )
        parser.add_argument(
            "--codec",
            choices=["streaming", "window"],
            default="streaming",
            help="Moshi's Mimi: streaming (serving.gpu.mimi_static, captured) or window "
            "(transformers' Mimi over the last 8 frames, eager): run both for an A/B",
        )

    args = sweep_args(
        __doc__,
        "8,16,32",
        "gpu-native-",
        "a 2-layer Moshi on CPU: checks the path end to end",
        extra,
    )
    summary = run(args)
    for level in summary["levels"]:
        row = level["sweep_row"]
        print(
            f"{level['concurrency']:>4} sessions: failed {row['sessions_failed']}, units "
            f"{row['units']}, late {row['unit_misses']} ({row['unit_miss_rate']}), lag p50/p95 "
            f"{row['unit_lag_p50_ms']}/{row['unit_lag_p95_ms']} ms, "
            f"goal {'met' if level['meets_goal'] else 'missed'}"
        )
    print(f"highest level meeting the goal: {summary['highest_level_meeting_goal']}")


if __name__ == "__main__":
    main()
