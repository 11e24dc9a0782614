"""Builders of recorded sessions (session.json, trace.jsonl, output.pcm) for listening tests."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from fdb.audio import float_to_pcm16
from fdb.io import atomic_write_json

OUT_RATE = 24000


def write_session(folder: Path, replies: list[dict], chunk_s: float = 0.2) -> None:
    """``replies``: {"id", "audio" (float32 at 24 kHz), "t" (first receipt s), "transcript",
    "status" ("completed"/"cancelled"), "done_t" (receipt of response.done), "rate_x" (arrival
    speed vs real time; < 1 makes late-arrival gaps)}."""
    folder.mkdir(parents=True, exist_ok=True)
    pcm, events = bytearray(), []
    for r in replies:
        step = int(chunk_s * OUT_RATE)
        t = r["t"]
        for k in range(0, len(r["audio"]), step):
            data = float_to_pcm16(r["audio"][k : k + step])
            events.append(
                {
                    "t": t,
                    "dir": "recv",
                    "type": "response.output_audio.delta",
                    "event": {
                        "response_id": r["id"],
                        "delta": None,
                        "audio_offset": len(pcm),
                        "audio_bytes": len(data),
                    },
                }
            )
            pcm += data
            t += chunk_s / r.get("rate_x", 4.0)
        done = {
            "id": r["id"],
            "status": r.get("status", "completed"),
            "output": [{"content": [{"type": "output_audio", "transcript": r["transcript"]}]}],
        }
        events.append(
            {
                "t": r.get("done_t", t),
                "dir": "recv",
                "type": "response.done",
                "event": {"response": done},
            }
        )
    events.sort(key=lambda e: e["t"])
    (folder / "trace.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (folder / "output.pcm").write_bytes(bytes(pcm))
    atomic_write_json(
        folder / "session.json",
        {
            "schema": "fdb-session-1",
            "output_rate": OUT_RATE,
            "trace_format": "realtime-turn-based-pcm16-v1",
        },
    )


def cut_middle(audio: np.ndarray, share: float = 0.4) -> np.ndarray:
    n = len(audio)
    a, b = int(n * (0.5 - share / 2)), int(n * (0.5 + share / 2))
    return np.concatenate([audio[:a], audio[b:]])


def add_clicks(
    audio: np.ndarray, rate: int, per_s: float = 10.0, amplitude: float = 0.8
) -> np.ndarray:
    out = audio.copy()
    step = int(rate / per_s)
    for j, k in enumerate(range(step // 2, len(out), step)):
        out[k : k + 3] = amplitude * (1 if j % 2 == 0 else -1)
    return out


def pitch_up(audio: np.ndarray, rate: int, semitones: float = 4.0) -> np.ndarray:
    # lazy: librosa is the optional embedded extra (and slow to import); only pitch_up needs it
    import librosa

    return librosa.effects.pitch_shift(audio.astype(np.float32), sr=rate, n_steps=semitones).astype(
        np.float32
    )
