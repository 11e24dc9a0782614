"""Where a Whisper lane's transcription first goes another way from one pass to the next (on a
GPU): every graph a pass replays, traced.

The sixteenth session (docs/gpu.md) found one captured decoder step, replayed 200 times from the
same state, bitwise the same every time, in every variant tried, while a whole pass of a clip
still differed from the pass before in most processes (``gpu_whisper_repeat.py``). So the state a
step starts from differs, or a step's result depends on what ran just before it. This traces a
pass: the engine of ``whisper_gpu`` (the whisper-large-v3 configuration, dummy weights, batches
of one, ``--lanes`` lanes) transcribes 16 clips on each lane, ``--passes`` times, one call at a
time, and every replay of a graph (the encoder's, the forced prompt's, each step's) keeps, on the
lane's stream and without waiting for it, its inputs (the step's token and position) and its
outputs (the cross-attention keys and values of every layer as integer checksums; every layer's
new self-attention key and value and the chosen token as they are). Each pass is then compared
with the lane's first, clip by clip, record by record: the first record that differs, whether
its inputs were the same, the first layer whose output differs (keys before values), how many
elements differ and by how much. Checksums of every weight, taken after the warm-up and after
each pass, tell whether anything wrote over the model::

    python benchmarks/gpu_whisper_trace.py [--lanes 2] [--passes 3] [--lane-thread] [--eager]
        [--reset] [--probes] [--sdpa default|math|efficient|flash]
        [--cross service|default|flash|efficient|math|cudnn] [--out FILE]
    python benchmarks/gpu_whisper_trace.py --tiny --passes 2  # checks it, on a CPU

``--lane-thread``: each call in the lane's own thread (``run_batch``), else in the calling
thread (the lane's work called directly, where the fifteenth session saw most differences);
``--reset``: each call starts with the lane's self-attention cache and tokens zeroed (whether what
an earlier call left there, masked out of every attention, changes a result); ``--probes``:
each decoder layer's intermediate results too (the self-attention's output, the sum after it,
the cross-attention's, the sum after it, the MLP's: copies captured inside the graphs, which
add kernels to them), so that the first value to differ names the operation; ``--cross``: the
cross-attention's kernel alone (``gpu_step_repeat.set_cross``; ``service``: the engine's own).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks.gpu_step_repeat import CROSS, kernel_choices, set_cross
from benchmarks.gpu_whisper_repeat import clips, engine_options, report


def checksum(torch, tensor):
    """Two int64 sums of ``tensor``'s 16-bit words (plain, and weighted by position) on its
    device, without a copy to the host: equal bytes give equal sums."""
    words = tensor.detach().contiguous().view(-1)
    size = words.element_size()
    words = words.view({1: torch.uint8, 2: torch.int16}.get(size, torch.int32))
    wide = words.to(torch.int64)
    weights = torch.arange(1, wide.numel() + 1, device=wide.device, dtype=torch.int64) % 65521
    return torch.stack([wide.sum(), (wide * weights).sum()])


PROBES = ("k", "v", "self_attn", "self_out", "cross_attn", "cross_out", "mlp")


class Tracer:
    """Wraps one lane's ``StaticWhisper`` so that each graph replay appends a record: ``(kind,
    inputs, outputs)`` of device tensors, queued on the current stream behind the replay.

    A record's values are in the order they are computed, layer by layer (``names``): each
    layer's new self-attention key and value, read from the cache after the replay (a launch a
    layer from the host). ``probes``: instead, each layer's key and value and intermediate
    results (the self-attention's output, the sum after it, the cross-attention's, the sum after
    it, the MLP's) copied by the captured graphs themselves into a buffer of their own
    (``StaticWhisper.probe``, set before the capture), which a record clones in one launch: the
    host's work between steps stays as it is in service, the GPU's grows."""

    def __init__(self, torch, static, probes: bool = False):
        self.torch, self.static, self.records = torch, static, []
        self._encode, self._prompt, self._step = (
            static._encode,
            static._replay_prompt,
            static._replay,
        )
        static._encode = self.encode
        static._replay_prompt = self.prompt
        static._replay = self.step
        layers = len(static.k)
        self.probed: dict[int, object] = {}  # elements -> [layers, probes, elements]
        if probes:
            static.probe = self.probe
        per_layer = PROBES if probes else PROBES[:2]
        self.names = [f"{name}{i}" for i in range(layers) for name in per_layer]

    def probe(self, name: str, layer: int, tensor) -> None:
        row = tensor[:1].reshape(-1)
        if row.numel() not in self.probed:  # made in the eager warm-up calls before the capture
            shape = (len(self.static.k), len(PROBES), row.numel())
            self.probed[row.numel()] = self.torch.zeros(
                shape, dtype=tensor.dtype, device=tensor.device
            )
        self.probed[row.numel()][layer, PROBES.index(name)].copy_(row)

    def values(self, columns):
        """Every name's values of row 0 (keys and values at ``columns``), in ``names``' order,
        stacked: [names, elements]."""
        s = self.static
        if s.probe is not None:
            elements = len(columns) * s.heads * s.head_dim
            return self.probed[elements].reshape(len(self.names), elements).clone()
        parts = []
        for k, v in zip(s.k, s.v, strict=True):
            parts += [k[:1].index_select(2, columns).reshape(-1)]
            parts += [v[:1].index_select(2, columns).reshape(-1)]
        return self.torch.stack(parts)

    def encode(self, n: int, frames: int) -> None:
        self._encode(n, frames)
        s, torch = self.static, self.torch
        sums = [
            checksum(torch, s._cross_view(flat, frames // 2)[:1]) for flat in s.cross_k + s.cross_v
        ]
        self.records.append(("encoder", None, torch.stack(sums)))

    def prompt(self, n: int, positions: int) -> None:
        self._prompt(n, positions)
        s = self.static
        columns = s.columns[: len(s.prompt)]
        self.records.append(("prompt", None, (self.values(columns), s.chosen[:1].clone())))

    def step(self, n: int, positions: int) -> None:
        s, torch = self.static, self.torch
        inputs = torch.cat([s.tokens[:1], s.position]).clone()
        self._step(n, positions)
        self.records.append(("step", inputs, (self.values(s.position), s.chosen[:1].clone())))

    def take(self) -> list:
        """The records so far on the host (NumPy), and a fresh list."""
        host = []
        for kind, inputs, outputs in self.records:
            if kind == "encoder":
                host.append((kind, None, outputs.cpu().numpy(), None))
            else:
                values, chosen = outputs
                host.append(
                    (
                        kind,
                        None if inputs is None else inputs.cpu().numpy(),
                        values.float().cpu().numpy(),
                        chosen.cpu().numpy(),
                    )
                )
        self.records = []
        return host


def first_divergence(got: list, want: list, names: list[str]) -> dict | None:
    """Where the records of one clip's pass ``got`` first differ from ``want`` (None: never):
    the record's index and kind, the step's position, whether its inputs were the same, the
    first value in computation order (``names``: ``k3``, ``self_out3``…; an encoder record's:
    its checksum's index; ``token`` after them all) that differs, the number of its elements
    that differ and the largest difference."""
    # lazy: NumPy comes with the repository's dependencies, imported where the records are
    import numpy as np

    for index, (a, b) in enumerate(zip(got, want, strict=False)):
        kind, inputs_a, values_a, chosen_a = a
        _, inputs_b, values_b, chosen_b = b
        same_inputs = inputs_a is None or bool(np.array_equal(inputs_a, inputs_b))
        values_same = np.array_equal(values_a, values_b)
        chosen_same = chosen_a is None or bool(np.array_equal(chosen_a, chosen_b))
        if same_inputs and values_same and chosen_same:
            continue
        where = {
            "record": index,
            "kind": kind,
            "position": None if inputs_a is None else int(inputs_a[-1]),
            "inputs_same": same_inputs,
        }
        if not values_same:
            layer = next(
                i for i in range(len(values_a)) if not np.array_equal(values_a[i], values_b[i])
            )
            name = names[layer] if kind != "encoder" else f"checksum{layer}"
            diff = np.abs(values_a[layer].astype(np.float64) - values_b[layer].astype(np.float64))
            where |= {
                "output": name,
                "elements_differ": int(np.count_nonzero(diff)),
                "max_abs_diff": float(diff.max()),
            }
        else:
            where |= {"output": "token", "elements_differ": 1, "max_abs_diff": None}
        if chosen_a is not None:
            where["tokens"] = [int(chosen_a[0]), int(chosen_b[0])]
        return where
    return None if len(got) == len(want) else {"record": min(len(got), len(want)), "kind": "length"}


def reset(torch, engine, lane: int) -> None:
    """Lane ``lane``'s self-attention keys and values, tokens and chosen tokens zeroed (on its
    stream, then waited for): a call starts from the state the warm-up left, whatever ran."""
    # lazy: serving.gpu.slots imports torch (optional: the gpu extra)
    from serving.gpu.slots import on_stream

    static = engine.statics[lane]
    with on_stream(engine.cuda_streams[lane]):
        for t in static.k + static.v + [static.tokens, static.chosen]:
            t.zero_()
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def weight_sums(torch, engine):
    """One checksum a parameter and buffer of the engine's model and a tensor each lane only
    reads (its suppression biases, column numbers and prompt), stacked (on the device)."""
    tensors = list(engine.model.parameters()) + list(engine.model.buffers())
    for s in engine.statics:
        tensors += [s.plain_bias, s.begin_bias, s.columns, s._prompt_ids]
    return torch.stack([checksum(torch, t) for t in tensors])


def run(args: argparse.Namespace) -> dict:
    # lazy: torch and the gpu extra are the device's
    import torch

    with kernel_choices(torch, args.sdpa):
        return _run(args, torch)


def _run(args: argparse.Namespace, torch) -> dict:
    # lazy: the gpu extra is the device's
    from serving.gpu.whisper import WhisperEngine
    from serving.gpu.whisper_static import describe_cross

    options = engine_options(args.tiny, args.dtype, lanes=args.lanes, encoder_graphs=not args.eager)
    engine = WhisperEngine.from_options(options)
    if args.eager:
        for static in engine.statics:
            static.graphs = False
    set_cross(torch, engine.statics, args.cross)
    engine._text = lambda ids: list(ids)
    # before the capture: the probes are copies inside the graphs
    tracers = [Tracer(torch, static, probes=args.probes) for static in engine.statics]
    engine.warm_graphs()
    for tracer in tracers:
        tracer.take()  # the warm-up's replays are not a pass
    weights = [weight_sums(torch, engine).cpu()]
    audio = clips()
    # traces[lane][pass][clip] = that call's records
    traces = {lane: [] for lane in range(args.lanes)}
    tokens = {lane: [] for lane in range(args.lanes)}
    try:
        for _ in range(args.passes):
            for lane in range(args.lanes):
                per_clip, texts = [], []
                for c in audio:
                    if args.reset:
                        reset(torch, engine, lane)
                    if args.lane_thread:
                        texts.append(engine.run_batch([c], lane)[0])
                    else:
                        texts.append(engine._run_on_lane([c], lane)[0])
                    per_clip.append(tracers[lane].take())
                traces[lane].append(per_clip)
                tokens[lane].append(texts)
            weights.append(weight_sums(torch, engine).cpu())
    finally:
        engine.close()
    diverged = {}
    for lane, passes in traces.items():
        diverged[str(lane)] = [
            {
                str(k): where
                for k, (got, want) in enumerate(zip(run_, passes[0], strict=True))
                if (where := first_divergence(got, want, tracers[lane].names)) is not None
            }
            for run_ in passes[1:]
        ]
    changed = [
        int((w != weights[0]).any(dim=1).sum()) for w in weights[1:]
    ]  # parameters whose bytes changed since the warm-up, after each pass
    return {
        "torch": torch.__version__,
        "device": "cpu (tiny: measures nothing)" if args.tiny else torch.cuda.get_device_name(),
        "options": {
            "lanes": args.lanes,
            "dtype": options.dtype,
            "graphs": not (args.eager or args.tiny),
            "calls_in": "the lane's thread" if args.lane_thread else "the calling thread",
            "reset": args.reset,
            "probes": args.probes,
            "sdpa": args.sdpa,
            "cross": args.cross,
            "cross_kernels": describe_cross(engine.statics[0].cross_kernels),
        },
        "records_per_clip": len(traces[0][0][0]),
        # a step's values, in computation order: each layer's key, value (and probes)
        "values_per_step": [len(tracers[0].names), int(traces[0][0][0][-1][2].shape[0])],
        "first_values": tracers[0].names[:7],
        "transcripts_differ": {
            str(lane): [sum(a != b for a, b in zip(t, ts[0], strict=True)) for t in ts[1:]]
            for lane, ts in tokens.items()
        },
        "diverged": diverged,
        "weights_changed": changed,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lanes", type=int, default=2)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--lane-thread", action="store_true")
    parser.add_argument("--eager", action="store_true")
    parser.add_argument(
        "--reset",
        action="store_true",
        help="each call starts with the lane's self-attention cache and tokens zeroed",
    )
    parser.add_argument(
        "--probes",
        action="store_true",
        help="each decoder layer's intermediate results traced too (copies inside the graphs)",
    )
    parser.add_argument(
        "--sdpa",
        choices=["default", "math", "efficient", "flash"],
        default="default",
        help="the attention kernels the graphs are captured with (math: no fused kernel)",
    )
    parser.add_argument(
        "--cross",
        choices=CROSS,
        default="service",
        help="the cross-attention's kernel (service: the engine's own; default: torch's choice)",
    )
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    report(run(args), args.out)


if __name__ == "__main__":
    main()
