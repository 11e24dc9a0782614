"""The finisher: one worker process that judges and writes finished sessions, off the paced loop.

Judging a finished session and writing its files (trace rows parsed and validated, the oracle,
JSON, fsync-ed writes) is the heavy part of a recording; in the recorder's own process it would
hold the interpreter lock against the loop that paces every other session. It runs in one
worker process at low priority (nice 10), started on first use.

The recorder hands a finished session over without any thread of its own: the loop pickles it
and writes it, length-prefixed and with its audio beside the pickle rather than in it (``Blob``),
to a Unix socket that the loop itself drives (``FinisherChannel``); the reply (the
``SessionRecord``, or the exception) comes back the same way. A ``ProcessPoolExecutor`` needs
two threads in the recorder process (one moves work items, one pickles them and writes the
pipe); each time one of them took the interpreter lock the paced loop waited for it, and at the
end of a batch, when hundreds of sessions finish within a second, packets went out late
(measured: docs/benchmarks.md#recorder-finisher).

One process serves every event loop of the recorder process: each loop opens its own socket
pair and passes one end to the process (``multiprocessing.reduction.send_handle``), which serves
all its channels with a selector. If the process dies, the pending sessions' futures fail with
``FinisherBroken`` and the caller finishes them itself; the next channel starts a new process.
"""

from __future__ import annotations

import asyncio
import binascii
import itertools
import json
import math
import multiprocessing
import os
import pickle
import selectors
import socket
import struct
import weakref
from array import array
from collections.abc import Iterable
from dataclasses import dataclass
from multiprocessing import reduction
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from fdb.session_records import SessionRecord, TraceEvent
from recorders.looplag import LagSamples
from recorders.recording import SessionOutcome, write_input_wav, write_recording

FINISHER_NICE = 10
# A message is its header (the pickle's length and how many out-of-band buffers follow), each
# buffer's length, the pickle (protocol 5), then the buffers themselves (``Blob``).
_HEADER = struct.Struct("!QI")
_LENGTH = struct.Struct("!Q")
_PING = "ping"  # a job with no session: the reply says the process is up and its imports done
_READ_LIMIT = 64 * 1024 * 1024
# Sessions handed to the process and not yet answered, per channel. The others wait as objects,
# not pickled: a pickled session is a copy of its audio, and hundreds of them queued in the
# socket's buffer would double the recorder's memory at the end of a batch.
IN_FLIGHT = 2


class FinisherBroken(RuntimeError):
    """The finisher process is gone or its channel broke; the caller finishes the session itself."""


class Blob(bytes):
    """``bytes`` that the finisher channel sends beside its pickle instead of through it.

    A finished session carries about 1 MB (its input PCM as a Blob, its received audio as an
    ``AudioText``, which travels the same way): pickling that in-band copied it into the
    pickle, on the paced loop, for every session (measured: docs/benchmarks.md#recorder-finisher),
    and at the end of a batch hundreds of sessions finish within a second. With pickle protocol 5
    a Blob is an out-of-band buffer: the loop writes it to the socket as it is. Elsewhere (another
    protocol, another pickler) it pickles as plain bytes, and it always unpickles as ``bytes``.
    """

    def __reduce_ex__(self, protocol: int):  # type: ignore[override]
        if protocol >= 5:
            return _from_buffer, (pickle.PickleBuffer(self),)
        return _from_buffer, (bytes(self),)


def _from_buffer(data: Any) -> bytes:
    return bytes(data)


def encode_message(message: Any) -> list[bytes | memoryview]:
    """``message`` as the pieces of one channel message (header, lengths, pickle, buffers)."""
    buffers: list[pickle.PickleBuffer] = []
    payload = pickle.dumps(message, protocol=5, buffer_callback=buffers.append)
    views = [buffer.raw() for buffer in buffers]
    head = _HEADER.pack(len(payload), len(views)) + b"".join(_LENGTH.pack(v.nbytes) for v in views)
    return [head, payload, *views]


def message_sizes(header: bytes) -> tuple[int, int]:
    """(pickle length, number of buffers) from a message's header."""
    return _HEADER.unpack(header)


class RawTrace:
    """A session's trace rows as it is recorded: absolute ``CLOCK`` times, events as JSON text.

    The rows are kept in columns (times in ``array('d')``, NaN for a missing time; direction,
    type and text in lists of strings) rather than as a tuple per row: a tuple is a container
    the garbage collector tracks, and hundreds of sessions adding rows thousands of times a
    second made the collector pause the loop that paces every session, far more often and for
    longer than with columns (measured: docs/benchmarks.md#recorder-gc). Arrays
    and strings are not tracked, so a row allocates nothing the collector counts.
    """

    __slots__ = ("times", "scheduled", "ends", "dirs", "types", "texts")

    def __init__(self) -> None:
        self.times, self.scheduled, self.ends = array("d"), array("d"), array("d")
        self.dirs: list[str] = []
        self.types: list[str] = []
        self.texts: list[str] = []

    def append(
        self, t: float, direction: str, type_: str, text: str, scheduled: float | None = None
    ) -> int:
        """Add a row; returns its index."""
        self.times.append(t)
        self.scheduled.append(_NAN if scheduled is None else scheduled)
        self.ends.append(_NAN)
        self.dirs.append(direction)
        self.types.append(type_)
        self.texts.append(text)
        return len(self.texts) - 1

    def set_end(self, index: int, t_end: float) -> None:
        self.ends[index] = t_end

    def __len__(self) -> int:
        return len(self.texts)

    def copy(self) -> RawTrace:
        other = RawTrace()
        other.times, other.scheduled, other.ends = (
            array("d", self.times),
            array("d", self.scheduled),
            array("d", self.ends),
        )
        other.dirs, other.types, other.texts = list(self.dirs), list(self.types), list(self.texts)
        return other

    def __getstate__(self) -> tuple:
        return self.times, self.scheduled, self.ends, self.dirs, self.types, self.texts

    def __setstate__(self, state: tuple) -> None:
        self.times, self.scheduled, self.ends, self.dirs, self.types, self.texts = state


_NAN = math.nan


def trace_from_raw(raw: RawTrace, origin: float) -> list[TraceEvent]:
    """Raw trace rows (loop clock, JSON text) as events on the clock that starts at ``origin``."""

    def rel(value: float) -> float | None:
        return None if math.isnan(value) else round(value - origin, 6)

    return [
        TraceEvent(
            t=rel(t), dir=d, type=k, event=json.loads(text), scheduled=rel(sched), t_end=rel(end)
        )
        for t, d, k, text, sched, end in zip(
            raw.times, raw.dirs, raw.types, raw.texts, raw.scheduled, raw.ends, strict=True
        )
    ]


class AudioText:
    """The received audio deltas' base64 text, as ASCII bytes in one buffer, and each delta's
    length.

    ``append`` adds a delta as it arrives (one copy into the buffer). The
    session hands the buffer to the finisher as it is: pickled with protocol 5 it is an
    out-of-band buffer, written to the channel without a copy. Keeping the deltas as strings
    and joining them at the hand-over made two fresh copies of the text in one go, whose page
    faults cost the paced loop time for every session (measured:
    docs/benchmarks.md#recorder-finisher). Decoding is the finisher's work
    (``decode``).

    A delta that is not ASCII is not base64 either: its characters outside ASCII are kept
    as ``?`` (same length), so it stays undecodable where ``decode`` reaches it.
    """

    __slots__ = ("buffer", "sizes")

    def __init__(
        self, buffer: bytes | bytearray | memoryview | None = None, sizes: Iterable[int] = ()
    ):
        self.buffer = bytearray() if buffer is None else buffer
        self.sizes = array("q", sizes)

    @classmethod
    def of(cls, deltas: Iterable[str]) -> AudioText:
        text = cls()
        for delta in deltas:
            text.append(delta)
        return text

    def append(self, delta: str) -> None:
        data = delta.encode("ascii", "replace")
        self.buffer += data
        self.sizes.append(len(data))

    def deltas(self) -> list[str]:
        """Each delta's text (``?`` for what was not ASCII)."""
        view, out, offset = memoryview(self.buffer), [], 0
        for size in self.sizes:
            out.append(bytes(view[offset : offset + size]).decode("ascii"))
            offset += size
        return out

    def decode(self) -> tuple[bytes, str | None]:
        """The received audio, and the first delta that does not decode (strict base64), if
        any: the audio stops before it."""
        view, parts, offset = memoryview(self.buffer), [], 0
        for k, size in enumerate(self.sizes):
            try:
                parts.append(binascii.a2b_base64(view[offset : offset + size], strict_mode=True))
            except (binascii.Error, ValueError) as exc:
                return b"".join(parts), f"audio delta {k}: {exc}"
            offset += size
        return b"".join(parts), None

    def __reduce_ex__(self, protocol: int):  # type: ignore[override]
        buffer = pickle.PickleBuffer(self.buffer) if protocol >= 5 else bytes(self.buffer)
        return AudioText, (buffer, self.sizes)


@dataclass
class FinishedSession:
    """A finished session as plain data: the raw trace rows, the received audio and the
    outcome's other fields (``loop_lag`` as the ticker's raw ``LagSamples``)."""

    raw: RawTrace
    origin: float
    audio: AudioText  # the audio deltas' base64 text as received
    fields: dict[str, Any]

    def outcome(self) -> SessionOutcome:
        output, problem = self.audio.decode()
        raw, fields = self.raw, dict(self.fields)
        if isinstance(fields.get("loop_lag"), LagSamples):
            fields["loop_lag"] = fields["loop_lag"].stats()
        if problem is not None and fields["failure"] is None:
            failure = f"undecodable audio delta ({problem})"
            fields.update(status="error", failure=failure)
            last = raw.times[-1] if len(raw) else self.origin
            raw = raw.copy()
            raw.append(last, "note", "failure", json.dumps({"status": "error", "reason": failure}))
        return SessionOutcome(trace=trace_from_raw(raw, self.origin), output=output, **fields)


def finish_recording(done: FinishedSession, out_dir: Path, kwargs: dict[str, Any]) -> SessionRecord:
    """Write input.wav, judge and write one finished session (runs in the finisher process, or
    inline). input.wav is written here, after the session, not before it: at the start of a
    batch hundreds of sessions prepare at once, and their WAV writes held the interpreter lock
    against the loop that already paces the first ones (benchmarks/recorder_capacity.py)."""
    pcm, profile = kwargs["pcm"], kwargs["profile"]
    input_sha = write_input_wav(out_dir, pcm, profile.formats.input_rate)
    return write_recording(out_dir, done.outcome(), input_wav_sha256=input_sha, **kwargs)


def _lower_priority() -> None:
    """The finisher's work waits; the paced loop does not: on a busy machine the kernel should
    run the recorder (and the server it measures) first. Best effort."""
    try:
        os.nice(FINISHER_NICE)
    except OSError:
        pass


# ------------------------------------------------------------------- the finisher process
def _recv_exactly(sock: socket.socket, size: int) -> bytearray | None:
    buffer = bytearray(size)
    view, got = memoryview(buffer), 0
    while got < size:
        count = sock.recv_into(view[got:])
        if count == 0:
            return None
        got += count
    return buffer


def _recv_message(channel: socket.socket) -> Any:
    """One message from ``channel`` (``encode_message``); None when the socket has closed."""
    header = _recv_exactly(channel, _HEADER.size)
    if header is None:
        return None
    size, count = message_sizes(header)
    lengths = _recv_exactly(channel, _LENGTH.size * count) if count else b""
    if lengths is None:
        return None
    payload = _recv_exactly(channel, size)
    buffers = [_recv_exactly(channel, n) for (n,) in _LENGTH.iter_unpack(lengths)]
    if payload is None or any(b is None for b in buffers):
        return None
    return pickle.loads(payload, buffers=buffers)


def _serve_one(channel: socket.socket) -> bool:
    """Read one job from ``channel``, run it, send the reply; False when the channel is done."""
    try:
        message = _recv_message(channel)
        if message is None:
            return False
        job, done, out_dir, kwargs = message
    except Exception:  # a closed socket or a job that does not decode: the channel is done
        return False
    try:
        reply = (job, True, None if done == _PING else finish_recording(done, out_dir, kwargs))
    except Exception as exc:  # the caller gets it as the call's exception
        reply = (job, False, exc)
    try:
        pieces = encode_message(reply)
        if not reply[1]:  # an exception the recorder could not rebuild goes back as text
            pickle.loads(pieces[1], buffers=pieces[2:])
    except Exception as exc:
        pieces = encode_message(
            (
                job,
                False,
                RuntimeError(f"finisher: {reply[2]!r} (its reply did not pickle: {exc!r})"),
            )
        )
    try:
        channel.sendall(b"".join(pieces))
    except OSError:
        return False
    return True


def _serve(control: Connection) -> None:
    """The finisher process: take channels from ``control``, serve their jobs until it closes."""
    _lower_priority()
    selector = selectors.DefaultSelector()
    selector.register(control.fileno(), selectors.EVENT_READ, None)
    while True:
        for key, _ in selector.select():
            if key.data is None:
                try:
                    fd = reduction.recv_handle(control)
                except (EOFError, OSError):
                    return
                channel = socket.socket(fileno=fd)
                channel.setblocking(True)
                selector.register(channel, selectors.EVENT_READ, channel)
            elif not _serve_one(key.data):
                selector.unregister(key.data)
                key.data.close()


# ---------------------------------------------------------------- the recorder's side
_PROCESS: tuple[multiprocessing.process.BaseProcess, Connection] | None = None


def _process() -> tuple[multiprocessing.process.BaseProcess, Connection]:
    """The finisher process and the control end of its pipe, started if none is running."""
    global _PROCESS
    if _PROCESS is None or not _PROCESS[0].is_alive():
        context = multiprocessing.get_context("forkserver")
        mine, theirs = context.Pipe(duplex=True)
        process = context.Process(
            target=_serve, args=(theirs,), daemon=True, name="fdb-recorder-finisher"
        )
        process.start()
        theirs.close()
        _PROCESS = (process, mine)
    return _PROCESS


class FinisherChannel:
    """One event loop's socket to the finisher process; ``finish`` is awaited per session."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.broken = False
        self._jobs = itertools.count()
        self._pending: dict[int, asyncio.Future[tuple[bool, Any]]] = {}
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task | None = None
        self._in_flight = asyncio.Semaphore(IN_FLIGHT)
        self.opening: asyncio.Task | None = None  # ``open()``, awaited by every first caller

    async def open(self) -> None:
        try:
            process, control = _process()
            mine, theirs = socket.socketpair()
            try:
                reduction.send_handle(control, theirs.fileno(), process.pid)
            except OSError as exc:
                mine.close()
                raise FinisherBroken(f"cannot reach the finisher process: {exc}") from exc
            finally:
                theirs.close()
            reader, self._writer = await asyncio.open_unix_connection(sock=mine, limit=_READ_LIMIT)
            self._reader_task = self.loop.create_task(self._read(reader))
            await self._call(
                _PING, None, None
            )  # the process has started and imported what it needs
        except BaseException:
            self.broken = True
            raise

    async def finish(
        self, done: FinishedSession, out_dir: Path, kwargs: dict[str, Any]
    ) -> SessionRecord:
        """``finish_recording(done, out_dir, kwargs)`` in the finisher process."""
        return await self._call(done, out_dir, kwargs)

    async def _call(self, done: Any, out_dir: Path | None, kwargs: dict[str, Any] | None) -> Any:
        async with self._in_flight:
            if self.broken or self._writer is None:
                raise FinisherBroken("the finisher channel is closed")
            job = next(self._jobs)
            pieces = encode_message((job, done, out_dir, kwargs))
            future: asyncio.Future[tuple[bool, Any]] = self.loop.create_future()
            self._pending[job] = future
            self._writer.writelines(pieces)
            ok, value = await future
        if not ok:
            raise value
        return value

    async def _read(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                size, count = message_sizes(await reader.readexactly(_HEADER.size))
                lengths = await reader.readexactly(_LENGTH.size * count) if count else b""
                payload = await reader.readexactly(size)
                buffers = [await reader.readexactly(n) for (n,) in _LENGTH.iter_unpack(lengths)]
                job, ok, value = pickle.loads(payload, buffers=buffers)
                future = self._pending.pop(job, None)
                if future is not None and not future.done():
                    future.set_result((ok, value))
        except Exception:  # a closed socket or a reply that does not decode: the channel is done
            pass
        finally:
            self.broken = True
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(
                        FinisherBroken("the finisher process ended before replying")
                    )
            self._pending.clear()
            if self._writer is not None:
                self._writer.close()


_CHANNELS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, FinisherChannel] = (
    weakref.WeakKeyDictionary()
)


async def finisher_channel() -> FinisherChannel:
    """The running loop's channel to the finisher process (opened, and the process started,
    on first use, or again after it broke). Sessions that ask while it opens wait for it."""
    loop = asyncio.get_running_loop()
    channel = _CHANNELS.get(loop)
    if channel is None or channel.broken:
        channel = _CHANNELS[loop] = FinisherChannel(loop)
        channel.opening = loop.create_task(channel.open())
    assert channel.opening is not None
    await asyncio.shield(channel.opening)  # a waiter cancelled here does not cancel the opening
    return channel
