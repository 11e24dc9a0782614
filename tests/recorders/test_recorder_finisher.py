"""The finisher process: sessions are judged and written there, handed over on a socket the loop
drives (no thread of the recorder process); a finisher that dies costs no session, and the next
channel starts a new one."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import pickle
import threading

import numpy as np

import recorders.finisher as finisher
from fdb.audio import Audio
from fdb.session_records import SessionRecord
from recorders.session import record_session
from tests.recorders.recorder_fakes import Script, ScriptedServer

TD = {"type": "server_vad", "silence_duration_ms": 500}


def _speech(seconds: float = 0.4, rate: int = 16000) -> Audio:
    t = np.arange(int(seconds * rate)) / rate
    return Audio((0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), rate)


async def _record(url: str, out, sample: str) -> SessionRecord:
    return await record_session(
        url,
        _speech(),
        out,
        sample_id=sample,
        variant="main",
        profile="turn-based",
        turn_detection=TD,
        model="m",
        timeout_s=5.0,
    )


def test_sessions_are_finished_in_the_finisher_process_without_a_recorder_thread(
    tmp_path, monkeypatch
):
    writers: list[int] = []
    original = finisher.write_recording

    def spy(*args, **kwargs):  # runs where the files are written
        writers.append(os.getpid())
        return original(*args, **kwargs)

    monkeypatch.setattr(
        finisher, "write_recording", spy
    )  # the child has its own module: no entry there

    async def main():
        async with ScriptedServer(Script(reply_at_packet=2, reply_ms=160)) as server:
            channel = await finisher.finisher_channel()
            before = {t.name for t in threading.enumerate()}
            records = await asyncio.gather(
                *(_record(server.url, tmp_path / f"s{k}", f"fin/{k}") for k in range(3))
            )
            return channel, {t.name for t in threading.enumerate()} - before, records

    channel, new_threads, records = asyncio.run(main())
    assert [r.status for r in records] == ["ok"] * 3, [r.failure for r in records]
    assert all(r.verdict.status == "pass" for r in records)
    for k, record in enumerate(records):
        assert (
            SessionRecord.model_validate(
                json.loads((tmp_path / f"s{k}" / "session.json").read_text())
            )
            == record
        )
    assert writers == []  # written by the finisher process, not in this one
    assert channel.broken  # the loop ended: its channel was closed with it
    assert new_threads <= {
        "fdb-recorder-work_0"
    }  # the input's worker at most: nothing to hand sessions over


class _DiesWhenUnpickled:
    """A job that kills the finisher process as it reads it: a death while a session is pending."""

    def __reduce__(self):
        return (os._exit, (3,))


def test_a_finisher_that_dies_with_sessions_pending_costs_none_of_them(tmp_path, monkeypatch):
    writers: list[int] = []
    original = finisher.write_recording

    def spy(*args, **kwargs):
        writers.append(os.getpid())
        return original(*args, **kwargs)

    monkeypatch.setattr(finisher, "write_recording", spy)
    monkeypatch.setattr(
        finisher.FinisherChannel,
        "finish",
        lambda self, done, out_dir, kwargs: self._call(_DiesWhenUnpickled(), None, None),
    )

    async def main():
        async with ScriptedServer(Script(reply_at_packet=2, reply_ms=160)) as server:
            return await asyncio.gather(
                *(_record(server.url, tmp_path / f"d{k}", f"dies/{k}") for k in range(2))
            )

    records = asyncio.run(main())
    assert [r.status for r in records] == ["ok", "ok"], [r.failure for r in records]
    assert writers == [os.getpid()] * 2  # the finisher broke: each session was written here instead
    for k in range(2):
        assert (tmp_path / f"d{k}" / "session.json").exists() and (
            tmp_path / f"d{k}" / "output.pcm"
        ).exists()


def test_a_finisher_killed_mid_batch_costs_no_session_and_is_restarted(tmp_path):
    async def main():
        async with ScriptedServer(Script(reply_at_packet=2, reply_ms=160)) as server:
            first = await finisher.finisher_channel()
            process, _ = finisher._PROCESS
            process.kill()
            process.join(5)
            # the channel learns of the death when its socket closes; sessions finishing now are
            # written by this process instead
            records = await asyncio.gather(
                *(_record(server.url, tmp_path / f"k{k}", f"kill/{k}") for k in range(2))
            )
            second = await finisher.finisher_channel()
            later = await _record(server.url, tmp_path / "after", "kill/after")
            return first, process.pid, second, records, later

    first, dead_pid, second, records, later = asyncio.run(main())
    assert first.broken and second is not first
    assert finisher._PROCESS is not None and finisher._PROCESS[0].pid != dead_pid
    assert [r.status for r in records] == ["ok", "ok"], [r.failure for r in records]
    assert later.status == "ok"
    for name in ("k0", "k1", "after"):
        assert (tmp_path / name / "session.json").exists() and (
            tmp_path / name / "trace.jsonl"
        ).exists()


def test_sessions_that_ask_while_the_channel_opens_wait_for_it():
    async def main():
        channels = await asyncio.gather(*(finisher.finisher_channel() for _ in range(5)))
        return channels, await asyncio.gather(
            *(c._call(finisher._PING, None, None) for c in channels)
        )

    channels, replies = asyncio.run(main())
    assert all(c is channels[0] for c in channels) and replies == [None] * 5


def test_blobs_travel_beside_the_pickle_and_come_back_as_plain_bytes():
    audio, pcm = os.urandom(300_000), os.urandom(200_000)
    message = (7, {"audio": finisher.Blob(audio), "pcm": finisher.Blob(pcm), "text": "x"})
    head, payload, *buffers = finisher.encode_message(message)
    assert len(payload) < 1000  # the 500 kB are not copied into the pickle
    assert [bytes(b) for b in buffers] == [audio, pcm]
    size, count = finisher.message_sizes(head[: finisher._HEADER.size])
    assert (size, count) == (len(payload), 2)
    job, fields = pickle.loads(payload, buffers=[bytearray(b) for b in buffers])
    assert job == 7 and fields["text"] == "x"
    assert type(fields["audio"]) is bytes and fields["audio"] == audio and fields["pcm"] == pcm
    # any other pickle (another protocol, the inline path) carries a Blob as plain bytes
    assert pickle.loads(pickle.dumps(finisher.Blob(b"abc"), protocol=4)) == b"abc"


def test_a_finished_session_hands_its_audio_over_beside_the_pickle_and_decodes_the_same():
    good = [base64.b64encode(bytes([k]) * n).decode() for k, n in ((1, 6), (2, 5), (3, 4))]

    def handed_over(deltas: list[str]) -> finisher.FinishedSession:
        done = finisher.FinishedSession(
            finisher.RawTrace(), 0.0, finisher.AudioText.of(deltas), {"failure": None}
        )
        _, payload, *buffers = finisher.encode_message(done)
        # the text is one buffer beside the pickle, the session's own (not a copy)
        assert len(buffers) == 1 and buffers[0].obj is done.audio.buffer
        assert bytes(buffers[0]) == "".join(deltas).encode("ascii", "replace")
        assert len(payload) < 1000
        return pickle.loads(payload, buffers=[bytes(b) for b in buffers])

    done = handed_over(good)
    assert done.audio.deltas() == good and list(done.audio.sizes) == [len(d) for d in good]
    assert done.audio.decode() == (b"\x01" * 6 + b"\x02" * 5 + b"\x03" * 4, None)
    bad = handed_over([good[0], "é" * 8, good[2]])  # neither base64 nor ASCII
    assert bad.audio.deltas()[1] == "?" * 8  # same length: the offsets after it hold
    output, problem = bad.audio.decode()
    assert output == b"\x01" * 6 and problem.startswith("audio delta 1:")
    # another protocol (or another pickler) carries the text in band, and it decodes the same
    again = pickle.loads(pickle.dumps(finisher.AudioText.of(good), protocol=4))
    assert again.deltas() == good and again.decode()[0] == done.audio.decode()[0]
    assert finisher.AudioText().decode() == (b"", None)


def test_loop_lag_statistics_are_worked_out_from_the_samples_where_the_session_is_finished():
    from array import array

    from recorders.looplag import LagSamples

    lags = array("d", [0.001, 0.002, 0.004, 0.150])  # s; the last tick is 150 ms late
    times = array("d", [10.0, 10.02, 10.04, 12.0])
    samples = pickle.loads(
        pickle.dumps(LagSamples(0.02, 80.0, (10.0, 12.0), lags, times), protocol=5)
    )
    stats = samples.stats()
    assert (stats.interval_ms, stats.ticks, stats.max_ms, stats.over_tolerance) == (
        20.0,
        4,
        150.0,
        1,
    )
    assert stats.mean_ms == round((1 + 2 + 4 + 150) / 4, 3) and stats.client_behind
    # the late tick outside the window (after the input and its tolerance): over it, but not behind
    late_after = LagSamples(0.02, 80.0, (10.0, 11.9), lags, times).stats()
    assert late_after.over_tolerance == 1 and not late_after.client_behind
    assert LagSamples(0.02, 80.0, None, array("d"), array("d")).stats().ticks == 0
    done = finisher.FinishedSession(
        finisher.RawTrace(),
        0.0,
        finisher.AudioText(),
        {
            "failure": None,
            "status": "ok",
            "close_code": 1000,
            "close_reason": None,
            "admission_denials": 0,
            "granted_session": {},
            "t0_wall": None,
            "elapsed_s": 1.0,
            "extra": {},
            "loop_lag": samples,
        },
    )
    assert done.outcome().loop_lag == stats
