"""Whether two CUDA graphs captured in one thread may replay at once (on a GPU).

Two "lanes", each an MLP stack of Whisper-large-v3's widths (1280 -> 5120 -> 1280, eight layers,
then a 51,866-way projection, bf16) with inputs and outputs of its own, are captured as CUDA
graphs by ``serving.gpu.slots.capture`` in one of three ways: both in one thread; each in a
thread of its own that lives on (as a batcher's lane threads do); each in a thread of its own
that has ended before the next starts. Then each lane's graph is replayed from its own thread on
its own stream, both at once, ``--reps`` times, and each output is compared with that lane's
replay alone. cuBLAS keeps a workspace per handle and stream, a graph keeps the workspace it was
captured with, and torch gives each thread a handle of its own from a pool, where a thread that
has ended returns its handle for the next one to take. So graphs captured in one thread, or in
threads one after another, may share a workspace. A fourth way captures both in one thread,
each on a capture stream of its own (``capture``'s ``owner``, as serving's engines do). The
counts say what each costs (docs/gpu.md, tenth session)::

    python benchmarks/gpu_graph_workspace.py [--rows 1,4] [--reps 200] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

WIDTH, HIDDEN, VOCAB, LAYERS = 1280, 5120, 51866, 8


MODES = (
    "one thread",
    "a live thread each",
    "a thread each, ended before the next",
    "one thread, a capture stream each (capture's owner)",
)


def trial(torch, layers, head, rows: int, mode: str, reps: int, streams: list) -> dict:
    """Mismatches of each lane's concurrent replays against its lone replay (``streams``: the
    two lanes' replay streams, made once: torch's pool has 32 a priority, and every stream
    serving.gpu.slots hands out is held for good)."""
    # lazy: serving.gpu.slots imports torch (the gpu extra)
    from serving.gpu.slots import capture

    def net(x):
        for up, down in layers:
            x = x + down(torch.nn.functional.gelu(up(x)))
        return head(x)

    lanes = []
    for seed, stream in zip((1, 2), streams, strict=True):
        g = torch.Generator(device="cuda").manual_seed(seed)
        x = torch.randn(rows, 1, WIDTH, device="cuda", dtype=torch.bfloat16, generator=g)
        lanes.append(
            {
                "x": x,
                "out": torch.zeros(rows, 1, VOCAB, device="cuda", dtype=torch.bfloat16),
                "stream": stream,
            }
        )

    class Owner:  # what serving's engines pass as capture's owner
        pass

    def capture_lane(lane):
        owner = Owner() if mode == MODES[3] else None
        with torch.inference_mode():
            lane["graph"] = capture(lambda: lane["out"].copy_(net(lane["x"])), owner=owner)
        torch.cuda.synchronize()

    live = [ThreadPoolExecutor(1) for _ in lanes]
    for lane, executor in zip(lanes, live, strict=True):
        if mode in (MODES[0], MODES[3]):
            capture_lane(lane)
        elif mode == MODES[1]:
            executor.submit(capture_lane, lane).result()
        else:
            thread = threading.Thread(target=capture_lane, args=(lane,))
            thread.start()
            thread.join()
    for lane in lanes:
        with torch.cuda.stream(lane["stream"]):
            lane["graph"].replay()
        lane["stream"].synchronize()
        lane["alone"] = lane["out"].clone()
    wrong = [0, 0]
    start = threading.Barrier(2)

    def replay(k):
        lane = lanes[k]
        with torch.cuda.stream(lane["stream"]):
            start.wait()
            for _ in range(reps):
                lane["graph"].replay()
                lane["stream"].synchronize()
                wrong[k] += not torch.equal(lane["out"], lane["alone"])

    threads = [threading.Thread(target=replay, args=(k,)) for k in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for executor in live:
        executor.shutdown()
    return {"rows": rows, "captured": mode, "replays": 2 * reps, "wrong": sum(wrong)}


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="1,4")
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    # lazy: torch with CUDA is the gpu extra's
    import torch

    torch.manual_seed(0)
    layers = [
        (
            torch.nn.Linear(WIDTH, HIDDEN).cuda().bfloat16(),
            torch.nn.Linear(HIDDEN, WIDTH).cuda().bfloat16(),
        )
        for _ in range(LAYERS)
    ]
    for _, down in layers:
        down.weight.data *= 0.3
    head = torch.nn.Linear(WIDTH, VOCAB, bias=False).cuda().bfloat16()
    # lazy: serving.gpu.slots imports torch (the gpu extra)
    from serving.gpu.slots import engine_stream

    streams = [engine_stream("cuda"), engine_stream("cuda")]
    results = []
    for rows in (int(r) for r in args.rows.split(",")):
        for mode in MODES:
            result = trial(torch, layers, head, rows, mode, args.reps, streams)
            print(
                f"{rows} rows, captured in {result['captured']}: {result['wrong']} of "
                f"{result['replays']} concurrent replays differ from the lone replay",
                flush=True,
            )
            results.append(result)
    if args.out:
        args.out.write_text(
            json.dumps(
                {
                    "device": torch.cuda.get_device_name(),
                    "torch": torch.__version__,
                    "trials": results,
                },
                indent=2,
            )
            + "\n"
        )
    return results


if __name__ == "__main__":
    main()
