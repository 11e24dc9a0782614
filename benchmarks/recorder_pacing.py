"""How many paced sessions one recorder process holds: send lateness and client CPU per session.

Starts a minimal echo server of the turn-based session protocol in a child process (its CPU is
not counted), then records one session alone (the baseline) and N concurrent sessions of the
same audio through ``recorders.batch.record_many``, and prints the max and p99 send lateness of
the 80 ms input packets and the recorder's CPU seconds per session-second of audio.

    python benchmarks/recorder_pacing.py --sessions 32 --seconds 10
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import multiprocessing as mp
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import picows

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fdb.audio import Audio  # noqa: E402
from fdb.session_records import read_trace  # noqa: E402
from recorders.batch import SessionJob, record_many  # noqa: E402
from recorders.eventloop import run as run_loop  # noqa: E402
from recorders.pacing import sends_from_trace  # noqa: E402

TD = {"type": "server_vad", "silence_duration_ms": 500}


# --------------------------------------------------------------------------- echo server
class _EchoSession(picows.WSListener):
    """One connection of the sink: acknowledges every append, closes 200 ms units and echoes
    the input as one reply's audio. It is a picows listener (frames parsed in C, answers
    written from the read callback), so the sink takes as little as it can of the two cores it
    shares with the recorder being measured."""

    def on_ws_connected(self, transport) -> None:
        self.t, self.samples, self.units, self.rid = transport, 0, 0, "resp_echo"
        self.send({"type": "session.created", "session": {"id": "s"}})

    def send(self, event: dict) -> None:
        self.t.send(picows.WSMsgType.TEXT, json.dumps(event).encode())

    def on_ws_frame(self, transport, frame) -> None:
        if frame.msg_type == picows.WSMsgType.CLOSE:
            transport.send_close(frame.get_close_code(), frame.get_close_message())
            transport.disconnect()
            return
        if frame.msg_type != picows.WSMsgType.TEXT:
            return
        event = json.loads(frame.get_payload_as_utf8_text())
        kind = event["type"]
        if kind == "input_audio_buffer.append":
            self.on_append(event)
        elif kind == "session.update":
            self.send(
                {
                    "type": "session.updated",
                    "client_event_id": event["event_id"],
                    "session": {
                        "audio": {
                            "input": {
                                "format": {"rate": 16000},
                                "turn_detection": event["session"]["audio"]["input"][
                                    "turn_detection"
                                ],
                            },
                            "output": {"format": {"type": "audio/pcm", "rate": 24000}},
                        }
                    },
                }
            )
        elif kind == "sglang.input_audio.end":
            ms = self.samples / 16
            self.send(
                {"type": "sglang.input_audio.ended", "accepted_end_ms": ms, "tail_policy": "flush"}
            )
            if self.samples > self.units * 3200:
                self.send(_unit(self.units, (self.samples - self.units * 3200) / 16))
            self.send(
                {
                    "type": "response.done",
                    "response": {
                        "id": self.rid,
                        "status": "completed",
                        "status_details": {"type": "completed", "reason": "stop"},
                    },
                }
            )
            self.send(
                {
                    "type": "sglang.input_audio.drained",
                    "accepted_end_ms": ms,
                    "consumed_ms": ms,
                    "discarded_ms": 0,
                    "padding_ms": 0,
                }
            )
        elif kind == "session.close":
            self.send({"type": "session.closed", "reason": "client_closed"})
            transport.send_close(picows.WSCloseCode.OK)

    def on_append(self, event: dict) -> None:
        audio, seq = event["audio"], event["sglang"]["seq"]
        self.samples += len(base64.b64decode(audio)) // 2
        self.send(
            {
                "type": "sglang.input_audio.accepted",
                "seq": seq,
                "accepted_end_ms": self.samples / 16,
                "client_event_id": event["event_id"],
            }
        )
        if seq == 0:
            self.send(
                {"type": "response.created", "response": {"id": self.rid, "status": "in_progress"}}
            )
        # the audio text goes back as it came, never through the JSON encoder
        self.t.send(
            picows.WSMsgType.TEXT,
            b"".join(
                (
                    b'{"type": "response.output_audio.delta", "response_id": "',
                    self.rid.encode(),
                    b'", "item_id": "i", "delta": "',
                    audio.encode(),
                    b'"}',
                )
            ),
        )
        while self.samples - self.units * 3200 >= 3200:
            self.send(_unit(self.units, 200))
            self.units += 1


def _unit(k: int, ms: float) -> dict:
    return {
        "type": "sglang.unit.done",
        "unit_id": f"unit_{k}",
        "sglang": {"media_time": {"t_start_ms": k * 200, "duration_ms": ms}},
    }


def _serve(ports: mp.Queue) -> None:
    async def main() -> None:
        server = await picows.ws_create_server(
            lambda request: _EchoSession(), "127.0.0.1", 0, max_frame_size=16 * 2**20
        )
        ports.put(server.sockets[0].getsockname()[1])
        await asyncio.Future()

    asyncio.run(main())


# --------------------------------------------------------------------------- measurement
def measure(url: str, sessions: int, seconds: float, out: Path) -> dict:
    t = np.arange(int(seconds * 16000)) / 16000
    audio = Audio((0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), 16000)
    jobs = [
        SessionJob(
            url,
            audio,
            out / f"s{k:03d}",
            f"bench/{k}",
            "main",
            "turn-based",
            TD,
            timeout_s=seconds + 30,
        )
        for k in range(sessions)
    ]
    cpu, wall = time.process_time(), time.perf_counter()
    records = run_loop(record_many(jobs, concurrency=sessions))
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    lateness = np.array(
        [
            s.lateness_s * 1000
            for job in jobs
            for s in sends_from_trace(read_trace(job.out_dir / "trace.jsonl"))
        ]
    )
    return {
        "sessions": sessions,
        "ok": sum(r.status == "ok" and r.verdict.status == "pass" for r in records),
        "packets": int(lateness.size),
        "violations": sum(r.pacing.violations for r in records),
        "max_ms": float(lateness.max()),
        "p99_ms": float(np.percentile(lateness, 99)),
        "cpu_per_session_s": cpu / (sessions * seconds),
        "wall_s": wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sessions", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    ports: mp.Queue = mp.Queue()
    server = mp.Process(target=_serve, args=(ports,), daemon=True)
    server.start()
    url = f"ws://127.0.0.1:{ports.get(timeout=30)}/v1/realtime"
    try:
        with tempfile.TemporaryDirectory() as tmp:
            rows = [
                measure(url, 1, args.seconds, Path(tmp) / "base"),
                measure(url, args.sessions, args.seconds, Path(tmp) / "load"),
            ]
    finally:
        server.terminate()
        server.join()
    print(
        f"{'sessions':>8} {'ok':>4} {'packets':>8} {'late>80ms':>9} {'max ms':>8} {'p99 ms':>8} "
        f"{'CPU s per session-s':>20} {'wall s':>7}"
    )
    for r in rows:
        print(
            f"{r['sessions']:>8} {r['ok']:>4} {r['packets']:>8} {r['violations']:>9} "
            f"{r['max_ms']:>8.2f} {r['p99_ms']:>8.2f} {r['cpu_per_session_s']:>20.5f} "
            f"{r['wall_s']:>7.2f}"
        )
    base, load = rows
    print(
        f"p99 lateness at {load['sessions']} sessions: {load['p99_ms']:.2f} ms "
        f"(baseline 1 session: {base['p99_ms']:.2f} ms); recorder CPU "
        f"{100 * load['cpu_per_session_s']:.2f}% of one core per session "
        f"({load['cpu_per_session_s'] / base['cpu_per_session_s']:.2f}x the baseline)"
    )


if __name__ == "__main__":
    main()
