"""Where a turn-based cascade's first audio goes: the stages between the end of the user's speech
and the reply's first audio, from the recorded traces of a sweep (or any recording).

    python benchmarks/cascade_stages.py SWEEP_DIR [--out stages.json]

For each session's first reply, on the client's clock (trace ``t``):

- ``asr``: ``conversation.item.input_audio_transcription.completed`` minus ``speech_stopped``;
- ``dialog``: ``response.created`` minus the transcript;
- ``reply``: the first ``response.output_audio.delta`` minus ``response.created`` (the reply
  model's first words, the chunker and the speech model's first frame);
- ``total``: first audio minus ``speech_stopped``.

Reported per concurrency folder (``concurrency-N``) as p50 / p90 / max over sessions, in seconds.
The server sends a reply's text with its audio, so the reply model and the speech model are one
stage seen from the client; ``speech_stopped`` itself comes the turn detection's silence after
the speech end (``benchmarks/gpu_cascade.py`` measures first audio from the speech end itself).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

STAGES = ("asr", "dialog", "reply", "total")


def session_stages(trace: Path) -> dict[str, float] | None:
    """The stages of the first reply of one trace.jsonl; None when it has no reply."""
    marks: dict[str, float] = {}
    with trace.open(encoding="utf-8") as lines:
        for line in lines:
            row = json.loads(line)
            kind, t = row.get("type"), row.get("t")
            if row.get("dir") != "recv":
                continue
            names = {
                "input_audio_buffer.speech_stopped": "stopped",
                "conversation.item.input_audio_transcription.completed": "transcript",
                "response.created": "created",
                "response.output_audio.delta": "audio",
            }
            name = names.get(kind)
            if name and name not in marks and (name == "stopped" or "stopped" in marks):
                marks[name] = t
            if "audio" in marks:
                break
    if not {"stopped", "transcript", "created", "audio"} <= marks.keys():
        return None
    return {
        "asr": marks["transcript"] - marks["stopped"],
        "dialog": marks["created"] - marks["transcript"],
        "reply": marks["audio"] - marks["created"],
        "total": marks["audio"] - marks["stopped"],
    }


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(v for v in values if not math.isnan(v))
    if not ordered:
        return math.nan
    return round(ordered[max(0, math.ceil(q * len(ordered)) - 1)], 3)


def summarize(sweep: Path) -> dict:
    levels = {}
    for level in sorted(sweep.glob("concurrency-*"), key=lambda p: int(p.name.split("-")[1])):
        rows = [s for s in map(session_stages, sorted(level.rglob("trace.jsonl"))) if s]
        levels[level.name] = {
            "sessions_with_reply": len(rows),
            **{
                stage: {
                    "p50": _quantile([r[stage] for r in rows], 0.5),
                    "p90": _quantile([r[stage] for r in rows], 0.9),
                    "max": _quantile([r[stage] for r in rows], 1.0),
                }
                for stage in STAGES
            },
        }
    return levels


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("sweep", type=Path, help="a sweep's output folder (concurrency-N inside)")
    parser.add_argument("--out", type=Path, default=None, help="write the summary as JSON here")
    args = parser.parse_args()
    levels = summarize(args.sweep)
    if not levels:
        sys.exit(f"no concurrency-N folder under {args.sweep}: pass a sweep's output folder")
    for name, level in levels.items():
        print(f"{name}: {level['sessions_with_reply']} sessions with a reply (seconds p50/p90/max)")
        for stage in STAGES:
            s = level[stage]
            print(f"  {stage:>7}: {s['p50']} / {s['p90']} / {s['max']}")
    if args.out:
        args.out.write_text(json.dumps(levels, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
