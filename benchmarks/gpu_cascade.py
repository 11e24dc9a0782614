"""GPU cascade capacity: how many concurrent gpu-cascade sessions one GPU sustains (issue #27).

One command on a CUDA machine, with dummy weights of the whisper-large-v3 and qwen3-4b
configurations (``serving/gpu/gpu-cascade.yaml``)::

    python benchmarks/gpu_cascade.py --out DIR [--levels 8,16,32,48] [--sessions 48]

It writes DIR/launch.yaml (gpu-cascade with max_sessions = the top level), starts that server
(its log: DIR/sweep/logs/model-server.log; the models load and warm before it reports ready),
writes a synthetic v1.0 cohort of ``--sessions`` candor_turn_taking samples (a Piper-spoken
question, then silence) to DIR/dataset, runs the serving sweep (``runs.sweep.sweep``, what
``python -m fdb sweep`` runs: every level records the whole cohort at that concurrency, in a
fresh client process) into DIR/sweep (concurrency-N/, serving.json, SERVING.md, serving.png), and
writes DIR/summary.json: per level the sweep's row (failed sessions, 503s, pacing, reply RTF
p90, whether it meets the sweep's targets) with the first audio after the annotated speech end
(p50 / p90 s, as ``benchmarks/cascade_capacity.py`` measures it) and whether the level meets the
issue's goal (sweep targets met, RTF p90 < 1, first audio p90 <= 0.5 s); and the highest level
that meets it. Dummy weights: the compute path is real, the words are noise, and the speech
(CSM, csm-1b configuration, on the same GPU) speaks noise.

The sessions' turn detection is the sweep's (server_vad, 500 ms of silence) unless
``--turn-detection`` sets another: a reply cannot start before the turn ends, so with 500 ms of
silence no first audio comes sooner than 0.5 s after the speech end; the goal needs a shorter
silence or ``'{"type": "semantic_vad", "eagerness": "high"}'`` (Smart Turn ends a complete turn
after a shorter pause).

``--stagger-s S`` spreads the sessions' phases: sample j of N starts with S*j/N s of silence
(``cascade_capacity.staggered_tree``, a copy of the cohort under DIR), so the turns end spread
over S s more, as independent users' would, instead of the synthetic cohort's one burst (every
question starts 0.512 s in and lasts 2-4 s: 32 turns end within about 1.5 s).

``--tiny``: the same on CPU with 1-layer configurations (a minute or two on 2 cores; checks the
whole path, measures nothing about a GPU). ``--device cuda:1`` picks the GPU.
"""

from __future__ import annotations

import argparse
import os
import sys
from fractions import Fraction
from pathlib import Path

import yaml
from rich.console import Console

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.cascade_capacity import (  # noqa: E402
    SUBSET,
    _free_port,
    speech_end_latencies,
    staggered_tree,
    synthetic_tree,
)
from benchmarks.gpu_tts import TINY as TINY_CSM  # noqa: E402
from benchmarks.support.gpu_sweep import DATASET_HELP, sweep_args  # noqa: E402
from fdb.datasets.official import load_v10  # noqa: E402
from fdb.io import atomic_write_json, atomic_write_text  # noqa: E402
from fdb.records.serving import ServingRow  # noqa: E402
from fdb.stats import quantile_ms  # noqa: E402
from runs.server import ManagedServer  # noqa: E402
from runs.sweep import SweepOptions, level_dir, parse_levels, sweep  # noqa: E402
from runs.sweep_args import parse_record_options  # noqa: E402

PROFILE = REPO / "serving" / "gpu" / "gpu-cascade.yaml"
GOAL_FIRST_AUDIO_P90_S = 0.5
TINY = {  # 1 layer, hidden 32: loads and runs on a CPU in seconds
    "asr": {
        "max_batch": 8,
        "weights": {
            "load_format": "dummy",
            "preset": "whisper-large-v3",
            "overrides": {
                "d_model": 32,
                "encoder_layers": 1,
                "decoder_layers": 1,
                "encoder_attention_heads": 2,
                "decoder_attention_heads": 2,
                "encoder_ffn_dim": 64,
                "decoder_ffn_dim": 64,
                "num_mel_bins": 128,
                "vocab_size": 64,
                "max_source_positions": 1500,
                "max_target_positions": 32,
                "decoder_start_token_id": 1,
                "pad_token_id": 0,
                "bos_token_id": 1,
                "eos_token_id": 2,
            },
        },
    },
    "llm": {
        "max_batch": 8,
        "block_size": 32,
        "max_prompt_tokens": 1024,
        "weights": {
            "load_format": "dummy",
            "preset": "qwen3-4b",
            "overrides": {
                "hidden_size": 32,
                "num_hidden_layers": 1,
                "intermediate_size": 64,
                "num_attention_heads": 2,
                "num_key_value_heads": 1,
                "head_dim": 16,
                "vocab_size": 300,
            },
        },
    },
}


def launch_file(
    path: Path,
    max_sessions: int,
    device: str,
    tiny: bool,
    asr_tokens: int,
    codec: str = "streaming",
    asr_decoder: str = "static",
    llm_engine: str = "slots",
    asr_window_s: float | None = 10.0,
    prefetch_ms: int | None = None,
    vad_device: str | None = None,
    graphs: bool = True,
    priorities: dict[str, int] | None = None,
    asr_tokens_per_s: float | None = None,
    first_chunk_words: int | None = None,
    overlap: bool = True,
    csm_overlap: bool = False,
    asr_lanes: int | None = None,
) -> Path:
    """gpu-cascade's launch file with max_sessions, the device, the recognizer's token cap,
    decoder and window, the reply model's engine, CSM's codec, the system's ``prefetch_ms`` (None:
    the profile's), the VAD (``vad_device``: ``silero_gpu`` on that device; None: the CPU stage)
    ``graphs``: Whisper's encoder graphs and CSM's and the reply model's prefill graphs (the
    defaults; False turns all three off, for the A/B), ``priorities``: the CUDA stream priority
    of the engines named (asr, llm, tts: each node's ``stream_priority``), the recognizer's
    ``max_tokens_per_s`` (None: the node's default), the system's ``first_chunk.max_words``
    (None: the default rule), ``overlap``: the recognizer's and the reply model's decode loops
    launch a step before they read the last (the defaults; False for the A/B), ``csm_overlap``:
    CSM's too (not its default), ``asr_lanes``: the recognizer's ``lanes`` (None: the node's
    default), and (--tiny) the CPU configuration."""
    raw = yaml.safe_load(PROFILE.read_text(encoding="utf-8"))
    raw["max_sessions"] = max_sessions
    for name in ("asr", "llm"):
        node = raw["session_nodes"][name]
        node["device"] = "cpu" if tiny else device
        if tiny:
            node.update(TINY[name], dtype="float32")
    raw["session_nodes"]["asr"]["max_new_tokens"] = asr_tokens
    raw["session_nodes"]["asr"]["decoder"] = asr_decoder
    raw["session_nodes"]["asr"]["window_s"] = asr_window_s
    if asr_tokens_per_s is not None:
        raw["session_nodes"]["asr"]["max_tokens_per_s"] = asr_tokens_per_s
    if asr_lanes is not None:
        raw["session_nodes"]["asr"]["lanes"] = asr_lanes
    if prefetch_ms is not None:
        raw["prefetch_ms"] = prefetch_ms
    if first_chunk_words is not None:
        raw["first_chunk"] = {"max_words": first_chunk_words}
    if vad_device is not None:
        raw["session_nodes"]["vad"] = {
            "kind": "silero_gpu",
            "device": vad_device,
            "inputs": ["input"],
        }
    raw["session_nodes"]["llm"]["engine"] = llm_engine
    if not overlap:
        raw["session_nodes"]["asr"]["overlap"] = False
        raw["session_nodes"]["llm"]["overlap"] = False
    tts = raw["backends"]["tts"]
    if not graphs:
        raw["session_nodes"]["asr"]["encoder_graphs"] = False
        raw["session_nodes"]["llm"]["prefill_graphs"] = False
        tts["prefill_graphs"] = False
    tts["device"] = "cpu" if tiny else device
    tts["codec"] = codec
    if csm_overlap:
        tts["overlap"] = True
    for name, priority in (priorities or {}).items():
        (tts if name == "tts" else raw["session_nodes"][name])["stream_priority"] = priority
    if tiny:
        tts.update(dtype="float32", max_batch=4, max_len=256)
        tts["weights"] = {**tts["weights"], "overrides": TINY_CSM}
    return atomic_write_text(path, yaml.safe_dump(raw, sort_keys=False))


def level_summary(row: ServingRow, latencies: tuple[list[float], int]) -> dict:
    values, missing = latencies
    p50, p90 = quantile_ms(values, Fraction(1, 2)), quantile_ms(values, Fraction(9, 10))
    rtf_ok = row.rtf_p90 is not None and row.rtf_p90 < 1
    fast = p90 is not None and p90 / 1000 <= GOAL_FIRST_AUDIO_P90_S and missing == 0
    return {
        "concurrency": row.concurrency,
        "sweep_row": row.model_dump(mode="json"),
        "first_audio_after_speech_end_s": {
            "p50": None if p50 is None else p50 / 1000,
            "p90": None if p90 is None else p90 / 1000,
            "n": len(values),
            "no_reply": missing,
        },
        "meets_goal": bool(row.meets_targets and rtf_ok and fast),
    }


def run(args: argparse.Namespace) -> dict:
    out = args.out
    levels = parse_levels(args.levels)
    sessions = args.sessions or max(levels)
    os.environ.setdefault("SERVER_PORT", str(_free_port()))
    # the synthetic cohort is spoken by Piper: on a machine without it, bring one made elsewhere
    root = synthetic_tree(args.dataset or out / "dataset", sessions)
    if args.stagger_s:
        dest = out / f"dataset-stagger-{args.stagger_s:g}s"
        root = staggered_tree(root, dest, args.stagger_s, sessions)
    record = parse_record_options(
        [
            "--dataset-root",
            str(root),
            "--per-subset",
            "0",
            "--subset-count",
            f"{SUBSET}={sessions}",
            *(["--turn-detection", args.turn_detection] if args.turn_detection else []),
        ]
    )
    opts = SweepOptions(output=out / "sweep", concurrency=levels, dataset="v1.0", record=record)
    config = launch_file(
        out / "launch.yaml",
        max(levels),
        args.device,
        args.tiny,
        args.asr_tokens,
        args.codec,
        args.asr_decoder,
        args.llm_engine,
        None if args.asr_window_s == "none" else float(args.asr_window_s),
        args.prefetch_ms,
        args.vad_device,
        not args.no_graphs,
        args.stream_priority,
        args.asr_tokens_per_s,
        args.first_chunk_words,
        not args.no_overlap,
        args.csm_overlap,
        args.asr_lanes,
    )
    server = ManagedServer(
        system="gpu-cascade",
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
    loaded, _ = load_v10(root, [SUBSET], strict=False)
    turn_end = {
        s.sample_id: s.turn_end_s for s in loaded.get(SUBSET, []) if s.turn_end_s is not None
    }
    rows = [ServingRow.model_validate(row) for row in data["rows"]]
    summary_levels = [
        level_summary(row, speech_end_latencies(level_dir(opts.output, row.concurrency), turn_end))
        for row in rows
    ]
    meeting = [lv["concurrency"] for lv in summary_levels if lv["meets_goal"]]
    summary = {
        "schema": "fdb-gpu-cascade-benchmark-1",
        "system": "gpu-cascade",
        "tiny": args.tiny,
        "turn_detection": record.turn_detection,
        "asr_max_new_tokens": args.asr_tokens,
        "asr_max_tokens_per_s": args.asr_tokens_per_s,
        "first_chunk_max_words": args.first_chunk_words,
        "device": "cpu" if args.tiny else args.device,
        "weights": "dummy (compute path only)",
        "launch": str(config),
        "codec": args.codec,
        "asr_decoder": args.asr_decoder,
        "llm_engine": args.llm_engine,
        "asr_window_s": args.asr_window_s,
        "prefetch_ms": args.prefetch_ms,
        "vad_device": args.vad_device,
        "stagger_s": args.stagger_s,
        "graphs": not args.no_graphs,
        "overlap": not args.no_overlap,
        "csm_overlap": args.csm_overlap,
        "asr_lanes": args.asr_lanes,
        "stream_priority": args.stream_priority,
        "sessions": sessions,
        "levels": summary_levels,
        "goal": {"first_audio_p90_s": GOAL_FIRST_AUDIO_P90_S, "rtf_p90_below": 1.0, "sessions": 32},
        "highest_level_meeting_goal": max(meeting) if meeting else None,
        "sweep_capacity_line": data["capacity"]["line"],
        "command": sys.argv,
    }
    atomic_write_json(out / "summary.json", summary)
    return summary


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--asr-tokens",
        type=int,
        default=24,
        help="the recognizer's max_new_tokens. Dummy "
        "weights never end a transcript early, so every one costs all of them: 24, about a 5 s "
        "question's transcript (the cohort's questions are 2-4 s)",
    )
    parser.add_argument(
        "--asr-tokens-per-s",
        type=float,
        help="the recognizer's max_tokens_per_s (default: the node's, 8): a batch decodes this "
        "many tokens a second of its longest utterance. Dummy weights never end a transcript, so "
        "each costs the whole bound, where a real recognizer ends at English's 3-5 tokens a "
        "second: 4 gives a dummy transcript a real one's length",
    )
    parser.add_argument(
        "--first-chunk-words",
        type=int,
        help="the system's first_chunk.max_words (default 7): a reply's first speakable chunk "
        "ends after this many words if no clause or sentence ends it first. The dummy reply "
        "model's stand-in tokenizer makes 2 words of 3 tokens and no clause marks, so 7 words "
        "are 11 tokens and 4 are 6",
    )
    parser.add_argument(
        "--turn-detection",
        help="the sessions' turn detection as JSON (default: the sweep's "
        "server_vad with 500 ms of silence, which alone puts the first audio 0.5 s after the "
        'speech end), e.g. \'{"type": "semantic_vad", "eagerness": "high"}\'',
    )
    parser.add_argument(
        "--codec",
        choices=["streaming", "window"],
        default="streaming",
        help="CSM's Mimi decode: streaming (serving.gpu.mimi_static, captured) or window "
        "(transformers' Mimi over the last 8 frames, eager)",
    )
    parser.add_argument(
        "--asr-decoder",
        choices=["static", "generate"],
        default="static",
        help="Whisper's decoder: static (serving.gpu.whisper_static, a CUDA graph per bucket) "
        "or generate (transformers' generate, the A/B)",
    )
    parser.add_argument(
        "--llm-engine",
        choices=["slots", "continuous_batching"],
        default="slots",
        help="the reply model's decode loop: slots (serving.gpu.lm_slots) or "
        "continuous_batching (transformers' manager, the A/B)",
    )
    parser.add_argument(
        "--asr-window-s",
        default="10",
        help="the recognizer's window_s (static decoder): a batch is encoded in its longest "
        "utterance plus 1 s rounded up to a multiple of this; 'none': always 30 s",
    )
    parser.add_argument(
        "--vad-device",
        help="the VAD as silero_gpu (one batched Silero for every session) on this device, e.g. "
        "cuda (default: the CPU vad stage, a model per session)",
    )
    parser.add_argument(
        "--no-graphs",
        action="store_true",
        help="Whisper's encoder pass and CSM's and the reply model's prefills eagerly "
        "(encoder_graphs, prefill_graphs false; default: as CUDA graphs), for the A/B",
    )
    parser.add_argument(
        "--no-overlap",
        action="store_true",
        help="the recognizer's and the reply model's decode loops read each step's result "
        "before they launch the next (overlap false; default: the next step is launched first), "
        "for the A/B",
    )
    parser.add_argument(
        "--csm-overlap",
        action="store_true",
        help="CSM's loop launches the next frame's step before it reads the last one's audio "
        "(the csm_gpu backend's overlap true; default: each frame is read first), for the A/B",
    )
    parser.add_argument(
        "--asr-lanes",
        type=int,
        default=None,
        metavar="N",
        help="the recognizer's lanes: batches that may run at once, so an utterance that comes "
        "while a batch runs starts at once on a free lane (whisper_gpu's lanes; default: the "
        "profile's, 2), for the A/B",
    )
    parser.add_argument(
        "--stream-priority",
        type=priorities,
        default={},
        metavar="NODE=P,...",
        help="the CUDA stream priority of these engines (asr, llm, tts), e.g. tts=-2,llm=-1: "
        "0 is CUDA's default and lower is more urgent (each node's stream_priority; default: "
        "the profile's)",
    )
    parser.add_argument(
        "--stagger-s",
        type=float,
        default=0.0,
        help="spread the sessions' phases over this many seconds: sample j of N starts with "
        "S*j/N s of silence (cascade_capacity.staggered_tree), so their turns end spread out as "
        "independent users' would; 0 (default): every question starts 0.512 s in, the turns end "
        "in one burst",
    )
    parser.add_argument(
        "--prefetch-ms",
        type=int,
        help="the system's prefetch_ms (default: the profile's, 200 ms): a pause this long "
        "starts the turn's transcription and reply before the turn ends; it must be shorter than "
        "the turn detection's silence to start anything",
    )


def priorities(text: str) -> dict[str, int]:
    """``--stream-priority``'s NODE=P,... (NODE one of asr, llm, tts; P an integer, 0 or below)."""
    out: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.partition("=")
        if not sep or name not in ("asr", "llm", "tts"):
            raise argparse.ArgumentTypeError(f"{part!r}: NODE=P with NODE one of asr, llm, tts")
        try:
            out[name] = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{part!r}: P must be an integer") from None
        if out[name] > 0:
            raise argparse.ArgumentTypeError(f"{part!r}: P is 0 or below (lower is more urgent)")
    return out


def main() -> None:
    args = sweep_args(
        __doc__,
        "8,16,32,48",
        "gpu-cascade-",
        "1-layer models on CPU: checks the path end to end",
        _options,
        device_help="the GPU the two models run on",
        dataset_help=(
            f"{DATASET_HELP}: make it where Piper is and carry it to a GPU machine without Piper"
        ),
        ready_help="how long the server may take to load",
    )
    summary = run(args)
    for level in summary["levels"]:
        row, first = level["sweep_row"], level["first_audio_after_speech_end_s"]
        print(
            f"{level['concurrency']:>4} sessions: failed {row['sessions_failed']}, RTF p90 "
            f"{row['rtf_p90']}, first audio p50/p90 {first['p50']}/{first['p90']} s (no reply "
            f"{first['no_reply']}), goal {'met' if level['meets_goal'] else 'missed'}"
        )
    print(
        f"highest level meeting the goal: {summary['highest_level_meeting_goal']}; "
        f"{summary['sweep_capacity_line']}; summary: {args.out / 'summary.json'}"
    )


if __name__ == "__main__":
    main()
