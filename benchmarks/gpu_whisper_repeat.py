"""Whether Whisper's engine gives an utterance the same tokens every time (on a GPU).

The engine of ``whisper_gpu`` (the whisper-large-v3 configuration, dummy weights, batches of
one, 24 tokens) transcribes 16 tone clips alone on each lane, ``--passes`` times, and then all
16 at once through its batcher (the lanes beside each other), ``--rounds`` times. Each pass and
round is compared with each lane's first pass: how many transcripts differ, and at which token
the first difference comes. The passes alone run in each lane's own thread, as its batches do.
In the eleventh session lane 1 alone gave one clip of 16 a different token at step 14 on its
second pass (an H200, the CUDA tests' process); this tells a kernel that is not bitwise
repeatable from memory that two users share, by switching the parts off one at a time::

    python benchmarks/gpu_whisper_repeat.py [--lanes 2] [--no-overlap] [--eager]
        [--no-encoder-graphs] [--dtype bfloat16] [--passes 3] [--rounds 3] [--main-thread]
        [--sync] [--out FILE]
    python benchmarks/gpu_whisper_repeat.py --tiny --passes 2 --rounds 1  # checks it, on a CPU

``--eager``: no CUDA graphs (the encoder and every decoder step launched from Python);
``--no-encoder-graphs``: the encoder eager, the decoder's steps in graphs; ``--main-thread``: the
passes alone in the calling thread (the lane's work called there directly, as the lanes' CUDA
test ran them before the fifteenth session); ``--sync``: the device synchronized before each.
Each pass also keeps a digest of each clip's encoder output (its last cross-attention keys), so
a difference is placed in the encoder or the decoder.
``--tiny``: a tiny configuration on the CPU (float32), which checks the script and measures
nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
from pathlib import Path

import numpy as np

CLIPS, TOKENS = 16, 24


def clips(n: int = CLIPS) -> list[np.ndarray]:
    """The CUDA test's clips: 3 s tones of their own, so that each clip's tokens differ."""
    t = np.arange(3 * 16000) / 16000
    return [
        (
            0.3 * np.sin(2 * np.pi * (150 + 97 * i) * t) * np.sin(2 * np.pi * (0.5 + i / 3) * t)
        ).astype(np.float32)
        for i in range(n)
    ]


def first_difference(a: list[int], b: list[int]) -> int | None:
    """The first token index where ``a`` and ``b`` differ (None: the same)."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def compare(got: list[list[int]], want: list[list[int]]) -> dict:
    steps = [first_difference(g, w) for g, w in zip(got, want, strict=True)]
    differ = [s for s in steps if s is not None]
    return {"differ": len(differ), "first_steps": differ}


def digest(torch, tensor) -> str:
    """The first 16 hex digits of the sha256 of ``tensor``'s bytes."""
    raw = tensor.detach().contiguous().view(torch.uint8).cpu().numpy().tobytes()
    return hashlib.sha256(raw).hexdigest()[:16]


def report(result: dict, out: Path | None) -> None:
    """``result`` as JSON on stdout and, with ``out``, in that file (written whole or not)."""
    # lazy: fdb is the repository's, on PYTHONPATH where the script runs
    from fdb.io import atomic_write_text

    text = json.dumps(result, indent=1)
    print(text)
    if out:
        atomic_write_text(out, text + "\n")


def encoder_digest(torch, engine, lane: int, clip: np.ndarray) -> str:
    """A digest of the bytes of lane ``lane``'s last cross-attention keys for ``clip`` (its
    encoder output, just transcribed on that lane; the transcription has synchronized)."""
    # lazy: serving.gpu.whisper needs the gpu extra (torch, transformers)
    from serving.gpu.whisper import HOP

    static = engine.statics[lane]
    if engine.cuda_streams[lane] is not None:
        engine.cuda_streams[lane].synchronize()  # the lane's work done before the read
    positions = engine.window([clip]) // HOP // 2
    return digest(torch, static._cross_view(static.cross_k[-1], positions)[:1])


def engine_options(tiny: bool, dtype: str, **fields):
    """The ``whisper_gpu`` options these scripts measure: the whisper-large-v3 configuration
    with dummy weights in ``dtype`` on CUDA (``tiny``: a tiny one in float32 on the CPU), batches
    of one (unless ``fields`` has ``max_batch``), ``TOKENS`` tokens, no per-second bound;
    ``fields``: the rest."""
    # lazy: the gpu extra is the device's
    from serving.graph.kinds import WhisperGpuOptions

    weights = {"load_format": "dummy", "preset": "whisper-large-v3"}
    if tiny:
        # lazy: only --tiny needs the tiny configuration (run with the repository on PYTHONPATH)
        from benchmarks.gpu_whisper import TINY

        weights["overrides"] = TINY
    return WhisperGpuOptions(
        weights=weights,
        device="cpu" if tiny else "cuda",
        dtype="float32" if tiny else dtype,
        max_new_tokens=TOKENS,
        max_tokens_per_s=None,
        **{"max_batch": 1, **fields},
    )


def run(args: argparse.Namespace) -> dict:
    # lazy: torch and the gpu extra are the device's
    import torch

    from serving.gpu.whisper import WhisperEngine

    options = engine_options(
        args.tiny,
        args.dtype,
        lanes=args.lanes,
        overlap=not args.no_overlap,
        encoder_graphs=not (args.eager or args.no_encoder_graphs),
    )
    engine = WhisperEngine.from_options(options)
    if args.eager:
        for static in engine.statics:
            static.graphs = False
    engine._text = lambda ids: list(ids)  # the token ids
    engine.warm_graphs()
    audio = clips()
    passes = {lane: [] for lane in range(args.lanes)}
    encoded = {lane: [] for lane in range(args.lanes)}  # each clip's encoder output, a digest
    for _ in range(args.passes):
        for lane in range(args.lanes):
            tokens, digests = [], []
            for c in audio:
                # in the lane's own thread, as its batches run (its cuBLAS handle, for the
                # eager passes); one call at a time, with no batch of the batcher running
                if args.sync and torch.cuda.is_available():
                    torch.cuda.synchronize()
                if args.main_thread:
                    # the lane's work itself, in this thread (run_batch would take it to the
                    # lane's thread)
                    tokens.append(engine._run_on_lane([c], lane)[0])
                else:  # run_batch takes it to the lane's thread
                    tokens.append(engine.run_batch([c], lane)[0])
                digests.append(encoder_digest(torch, engine, lane, c))
            passes[lane].append(tokens)
            encoded[lane].append(digests)
    first = {lane: runs[0] for lane, runs in passes.items()}
    result: dict = {
        "torch": torch.__version__,
        "device": "cpu (tiny: measures nothing)" if args.tiny else torch.cuda.get_device_name(),
        "options": {
            "lanes": args.lanes,
            "dtype": options.dtype,
            "overlap": options.overlap,
            "graphs": not (args.eager or args.tiny),  # none on a CPU
            "encoder_graphs": options.encoder_graphs and not args.tiny,
            "passes_in": "the calling thread" if args.main_thread else "each lane's thread",
            "synchronized": args.sync,
        },
        "alone": {
            str(lane): [compare(run, first[lane]) for run in runs[1:]]
            for lane, runs in passes.items()
        },
        # the clips whose encoder output (the last layer's cross-attention keys) was not bitwise
        # the first pass's: a difference there is the encoder's, else the decoder's
        "encoder_alone_differ": {
            str(lane): [sum(a != b for a, b in zip(run, runs[0], strict=True)) for run in runs[1:]]
            for lane, runs in encoded.items()
        },
        "lanes_alone_differ": compare(first[args.lanes - 1], first[0])["differ"],
    }

    async def rounds():
        return [
            await asyncio.gather(*[engine.transcribe(c) for c in audio]) for _ in range(args.rounds)
        ]

    try:
        got = asyncio.run(rounds())
    finally:
        engine.close()
    lanes = engine.batcher.batch_lanes
    result["at_once"] = [
        compare(texts, [first[lanes[r * len(audio) + k]][k] for k in range(len(audio))])
        for r, texts in enumerate(got)
    ]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lanes", type=int, default=2)
    parser.add_argument("--no-overlap", action="store_true")
    parser.add_argument("--eager", action="store_true")
    parser.add_argument("--no-encoder-graphs", action="store_true")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--main-thread",
        action="store_true",
        help="the passes alone in the calling thread (as the CUDA test runs them), not the lane's",
    )
    parser.add_argument(
        "--sync", action="store_true", help="the whole device synchronized before each call"
    )
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    result = run(args)
    report(result, args.out)


if __name__ == "__main__":
    main()
