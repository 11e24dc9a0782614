"""Which part of Whisper's decoder step gives a different result from one replay to the next (on
a GPU).

The fifteenth session (docs/gpu.md) found a Whisper lane's transcripts differing from one pass to
the next in many processes while its encoder's output never did: the difference is made in the
decoder's steps. This replays one captured step ``--replays`` times from the same state and
places the first difference: the engine of ``whisper_gpu`` (the whisper-large-v3 configuration,
dummy weights, one lane, batches of one) transcribes a clip, which leaves every input of a step
written (cross-attention keys and values, the prompt's and earlier steps' self-attention keys and
values); then, with ``tokens`` and ``position`` fixed, the step's graph (or the eager step with
``--eager``) runs again and again, each time after the self-attention cache is put back as it
was, and each replay's outputs are compared bitwise with the first's: every decoder layer's new
key and value (written at the step's position, in layer order: the first layer that differs is
where it starts) and the chosen token::

    python benchmarks/gpu_step_repeat.py [--replays 200] [--position 12] [--part step|prompt]
        [--eager] [--sdpa default|math|efficient|flash] [--blas default|cublas|cublaslt]
        [--deterministic] [--lane-thread] [--cross service|default|flash|efficient|math|cudnn]
        [--max-batch 16 --time-rows 1,16] [--out FILE]
    python benchmarks/gpu_step_repeat.py --tiny --replays 3  # checks it, on a CPU

``--part prompt``: the forced prompt's pass (its graph writes the prompt's columns and the first
token) instead of a step. ``--sdpa``: the attention kernels the graph is captured with
(``math``: no fused attention kernel); ``--blas``: the library of its matrix products;
``--deterministic``: torch's deterministic algorithms (cuBLAS needs
``CUBLAS_WORKSPACE_CONFIG=:4096:8`` in the environment); ``--lane-thread``: the replays in the
lane's own thread (else the calling thread). The process's choices are put back afterwards.
``--cross``: the decoder's cross-attention kernel alone (:func:`set_cross`; ``service``: the
engine's own). Afterwards, with graphs, the step's graph of each bucket in ``--time-rows`` is
replayed 50 times back to back and timed on the GPU (``step_ms``: the mean of a replay, for the
cost of a kernel choice; buckets up to ``--max-batch``, the engine's, 1 by default).
"""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

from benchmarks.gpu_whisper_repeat import digest, engine_options, report

CLIP_S = 3


def outputs(torch, static, columns: slice) -> list[str]:
    """Each decoder layer's keys and values at ``columns`` (row 0), then the chosen token."""
    out = []
    for k, v in zip(static.k, static.v, strict=True):
        out.append(digest(torch, k[:1, :, columns]))
        out.append(digest(torch, v[:1, :, columns]))
    out.append(digest(torch, static.chosen[:1]))
    return out


def first_differing(runs: list[list[str]]) -> dict:
    """How many replays differ from the first, and the first output (in layer order: "k3",
    "v3", "token") that any replay has different."""
    first = runs[0]
    differ = [r for r in runs[1:] if r != first]
    names = [f"{kv}{i}" for i in range((len(first) - 1) // 2) for kv in ("k", "v")] + ["token"]
    where = next(
        (names[j] for j in range(len(first)) if any(r[j] != first[j] for r in differ)), None
    )
    return {"replays": len(runs), "differ": len(differ), "first_output_differing": where}


@contextlib.contextmanager
def kernel_choices(torch, sdpa: str = "default", blas: str = "default", deterministic=False):
    """Within: the attention kernels ``sdpa`` (``math``: no fused kernel; ``efficient``,
    ``flash``: that one only), the matrix products' library ``blas`` and torch's deterministic
    algorithms as asked; the process's own choices put back after."""
    backends = ("flash", "mem_efficient", "cudnn")
    enabled = {name: getattr(torch.backends.cuda, f"{name}_sdp_enabled")() for name in backends}
    library = torch.backends.cuda.preferred_blas_library()
    was_deterministic = torch.are_deterministic_algorithms_enabled()
    if sdpa != "default":
        wanted = {"flash": "flash", "efficient": "mem_efficient"}.get(sdpa)
        for name in backends:
            getattr(torch.backends.cuda, f"enable_{name}_sdp")(name == wanted)
    if blas != "default":
        torch.backends.cuda.preferred_blas_library(blas)
    if deterministic:
        torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        for name, on in enabled.items():
            getattr(torch.backends.cuda, f"enable_{name}_sdp")(on)
        torch.backends.cuda.preferred_blas_library(library)
        torch.use_deterministic_algorithms(was_deterministic)


CROSS = ("service", "default", "flash", "efficient", "math", "cudnn")


def set_cross(torch, statics, name: str) -> None:
    """Each lane's decoder cross-attention captured with kernel ``name`` (one of
    :data:`CROSS`): ``service`` leaves the engine's own (``StaticWhisper.cross_kernels``),
    ``default`` leaves the choice to torch, else that kernel alone for every batch."""
    if name == "service":
        return
    # lazy: whisper_static imports torch (the gpu extra is the device's)
    from serving.gpu.whisper_static import CROSS_CHOICES

    backend = torch.nn.attention.SDPBackend
    kernels = {**CROSS_CHOICES, "math": backend.MATH, "cudnn": backend.CUDNN_ATTENTION}
    chosen = None if name == "default" else [kernels[name]]
    for static in statics:
        static.cross_kernels = ((None, chosen),)


def step_ms(torch, static, rows: list[int], positions: int, replays: int = 50) -> dict:
    """The mean GPU time of one replay of the step's graph of each bucket in ``rows`` (ms),
    ``replays`` back to back on the current stream."""
    # lazy: serving.gpu.slots imports torch (optional: the gpu extra)
    from serving.gpu.slots import bucket

    times = {}
    for n in rows:
        b = bucket(n, static.max_batch)
        static._replay(b, positions)  # captured if it was not
        start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
        start.record()
        for _ in range(replays):
            static._replay(b, positions)
        end.record()
        end.synchronize()
        times[str(b)] = round(start.elapsed_time(end) / replays, 4)
    return times


def run(args: argparse.Namespace) -> dict:
    # lazy: torch and the gpu extra are the device's
    import numpy as np
    import torch

    with kernel_choices(torch, args.sdpa, args.blas, args.deterministic):
        return _run(args, torch, np)


def _run(args: argparse.Namespace, torch, np) -> dict:
    # lazy: the gpu extra is the device's
    from serving.gpu.whisper import HOP, WhisperEngine
    from serving.gpu.whisper_static import describe_cross

    engine = WhisperEngine.from_options(
        engine_options(args.tiny, "bfloat16", lanes=1, max_batch=args.max_batch)
    )
    static = engine.statics[0]
    if args.eager:
        static.graphs = False
    set_cross(torch, engine.statics, args.cross)
    engine.warm_graphs()
    t = np.arange(CLIP_S * 16000) / 16000
    clip = (0.3 * np.sin(2 * np.pi * 247 * t) * np.sin(2 * np.pi * 0.8 * t)).astype(np.float32)
    engine.run_batch([clip])  # every input of a step written
    positions = engine.window([clip]) // HOP // 2
    if not 0 < args.position < static.length:
        raise SystemExit(f"--position {args.position}: 1 to {static.length - 1}")

    if args.part == "prompt" and not static.prompt_pass:
        raise SystemExit("--part prompt: this configuration decodes its prompt a step a token")
    # what the replayed graph writes: the step's column, or the prompt's
    columns = (
        slice(0, len(static.prompt))
        if args.part == "prompt"
        else slice(args.position, args.position + 1)
    )

    def replays() -> list[list[str]]:
        # lazy: serving.gpu.slots imports torch (optional: the gpu extra)
        from serving.gpu.slots import on_stream

        stream = engine.cuda_streams[0]
        with on_stream(stream), torch.inference_mode():
            cache = [t.clone() for t in static.k + static.v]
            static.tokens[:1].fill_(int(static.chosen[0]))
            static.position.fill_(args.position)
            static.bias.copy_(static.plain_bias)
            runs = []
            for _ in range(args.replays):
                for held, saved in zip(static.k + static.v, cache, strict=True):
                    held.copy_(saved)
                if args.part == "prompt":
                    static._replay_prompt(1, positions)
                else:
                    static._replay(1, positions)
                if stream is not None:
                    stream.synchronize()
                runs.append(outputs(torch, static, columns))
            timed = step_ms(torch, static, args.time_rows, positions) if static.graphs else None
        return runs, timed

    runs, timed = engine.batcher.in_lane(0, replays) if args.lane_thread else replays()
    engine.close()
    return {
        "torch": torch.__version__,
        "device": "cpu (tiny: measures nothing)" if args.tiny else torch.cuda.get_device_name(),
        "options": {
            "graphs": static.graphs,
            "sdpa": args.sdpa,
            "blas": args.blas,
            "deterministic": args.deterministic,
            "part": args.part,
            "position": args.position if args.part == "step" else None,
            "replays_in": "the lane's thread" if args.lane_thread else "the calling thread",
            "cross": args.cross,
            "cross_kernels": describe_cross(static.cross_kernels),
        },
        **first_differing(runs),
        "distinct_tokens": len({r[-1] for r in runs}),
        "step_ms": timed,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replays", type=int, default=200)
    parser.add_argument("--position", type=int, default=12)
    parser.add_argument(
        "--part",
        choices=["step", "prompt"],
        default="step",
        help="the graph replayed: a step at --position, or the forced prompt's pass",
    )
    parser.add_argument("--eager", action="store_true", help="no CUDA graph: the step eagerly")
    parser.add_argument(
        "--sdpa", choices=["default", "math", "efficient", "flash"], default="default"
    )
    parser.add_argument(
        "--blas",
        choices=["default", "cublas", "cublaslt"],
        default="default",
        help="the library torch's matrix products go to (torch.backends.cuda)",
    )
    parser.add_argument(
        "--deterministic",
        action="store_true",
        help="torch.use_deterministic_algorithms (with CUBLAS_WORKSPACE_CONFIG=:4096:8 set)",
    )
    parser.add_argument("--lane-thread", action="store_true")
    parser.add_argument(
        "--cross",
        choices=CROSS,
        default="service",
        help="the cross-attention's kernel (service: the engine's own; default: torch's choice)",
    )
    parser.add_argument(
        "--time-rows",
        type=lambda text: [int(n) for n in text.split(",")],
        default=[1],
        help="the batch sizes whose bucket's step is timed, comma-separated",
    )
    parser.add_argument("--max-batch", type=int, default=1, help="the engine's largest batch")
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    result = run(args)
    report(result, args.out)


if __name__ == "__main__":
    main()
