"""Record one paced /v1/realtime session into a directory (docs/formats.md, "Recording").

The client connects, waits for session.created, sends session.update and waits for
session.updated, then sends the input in 80 ms packets on an absolute schedule while it
receives and logs every server event. At the input end a ``drain`` profile sends
sglang.input_audio.end, waits for sglang.input_audio.drained, sends session.close and waits for
session.closed; a ``tail`` profile (legacy, OpenAI) sends a no-op session.update ``tail_s``
later and closes once session.updated answers it. The client's event-loop lag is measured
throughout (``recorders.looplag``). The whole
session has one deadline. A bad server never raises out of ``record_session``: a disconnect, a
close code, an error event, invalid JSON or the deadline becomes the session's recorded failure,
and the trace and audio received so far are kept.

Hundreds of sessions of a batch start together; they prepare their input and open their
connection a few at a time (``OPENING_CONCURRENCY``, each slot held at most ``OPENING_HOLD_S``,
at most ``OPENING_RATE`` openings a second), so
the openings do not delay the packets of the sessions already sending. Writing the directory
(input.wav, trace, output, session.json) is left to one finisher process at low priority.
"""

from __future__ import annotations

import asyncio
import binascii
import datetime as dt
import json
import pickle
import weakref
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import picows

from fdb.audio import Audio
from fdb.dialects import Dialect, get_dialect, views
from fdb.errors import FdbError, SampleError
from fdb.io import redact_url
from fdb.session_records import SessionRecord, SessionStatus
from fdb.session_settings import SessionSettings
from recorders.eventloop import CLOCK, loop_local, paced_sleep, sleep_until
from recorders.finisher import (  # noqa: F401  (RawTrace and trace_from_raw are re-exported)
    AudioText,
    Blob,
    FinishedSession,
    FinisherBroken,
    RawTrace,
    finish_recording,
    finisher_channel,
    trace_from_raw,
)
from recorders.looplag import monitor
from recorders.pacing import SPREADER, send_paced, split_packets
from recorders.recording import (  # noqa: F401  (input_pcm16 is re-exported)
    SessionOutcome,
    input_pcm16,
    write_input_wav,
    write_recording,
)
from recorders.wire import CLOSE_CODES, event_id, parse_server_message
from recorders.wsclient import Closed, Refused, WsClient, open_client

MAX_MESSAGE_BYTES = 16 * 1024 * 1024
ADMISSION_RETRIES = 3
ADMISSION_BACKOFF_S = 0.25
CLOSE_GRACE_S = 2.0
_FLAGS = {
    views.SESSION_CREATED: "created",
    views.SESSION_UPDATED: "updated",
    views.INPUT_AUDIO_DRAINED: "drained",
    views.SESSION_CLOSED: "closed",
}


# Sessions that are opening (connect, upgrade, session.update, session.updated) at once, per event
# loop. A batch starts all its sessions together; unthrottled, hundreds of handshakes land in the
# same loop iterations as the first sessions' packets and delay them (measured:
# docs/benchmarks.md#recorder-openings). Opening them a few at a time costs the batch a short ramp.
# A slot is held from before the session's input is prepared until session.updated, and at most
# OPENING_HOLD_S: a server that never answers must not hold the batch back.
# Openings also start at most OPENING_RATE per second: with the C WebSocket client 8 slots alone
# opened sessions fast enough to keep the loop busy and the running sessions' packets late
# while a batch ramped up (measured: docs/benchmarks.md#recorder-openings). The ends of sessions
# follow the spacing of their starts, so they are spread as well.
OPENING_CONCURRENCY = 8
OPENING_HOLD_S = 2.0
OPENING_RATE = 125.0
_GATES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _OpeningGate] = (
    weakref.WeakKeyDictionary()
)


class _OpeningSlot:
    """An acquired opening slot; ``release`` gives it back once: at session.updated, at the
    session's end, or when OPENING_HOLD_S has passed, whichever comes first."""

    def __init__(self, gate: asyncio.Semaphore):
        self.gate, self.released = gate, False
        self.timer = asyncio.get_running_loop().call_later(OPENING_HOLD_S, self.release)

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.timer.cancel()
            self.gate.release()


class _OpeningGate:
    """A loop's opening slots (``OPENING_CONCURRENCY``) and the time the next opening may start."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.slots = asyncio.Semaphore(OPENING_CONCURRENCY)
        self.next_start = 0.0


async def _opening_slot() -> _OpeningSlot:
    gate = loop_local(_GATES, _OpeningGate)
    await gate.slots.acquire()
    now = CLOCK()
    start = max(now, gate.next_start)
    gate.next_start = start + 1.0 / OPENING_RATE
    if start > now:
        try:
            await sleep_until(start)
        except BaseException:
            gate.slots.release()
            raise
    return _OpeningSlot(gate.slots)


class _Session:
    """State of one session run; ``run()`` never raises for server-side problems."""

    def __init__(
        self,
        url: str,
        pcm: bytes,
        profile: Dialect,
        session_update: dict[str, Any],
        timeout_s: float,
    ):
        self.url, self.pcm, self.profile, self.timeout_s = url, pcm, profile, timeout_s
        self.session_update = session_update
        # Trace rows with absolute ``CLOCK`` times, in columns that the garbage collector never
        # sees (``RawTrace``).
        self.raw = RawTrace()
        # Received audio stays base64 text until the session is finished: decoding is the
        # finisher's work, off the loop that paces every session (``AudioText.decode``).
        self.audio = AudioText()
        self.output_bytes = 0
        self.t0: float | None = None
        self.t0_wall: str | None = None
        self.status: SessionStatus = "ok"
        self.failure: str | None = None
        self.phase = "connecting"
        self.admission_denials = 0
        self.granted_session: dict[str, Any] | None = None
        self.fatal = False  # error.sglang.fatal or a broken stream: do not send session.close
        self.sent_close = False
        self.close_code: int | None = None
        self.close_reason: str | None = None
        self.flags = {
            name: asyncio.Event() for name in ("created", "updated", "drained", "closed", "tail")
        }
        self.updates_answered = 0
        self.ws: WsClient | None = None
        # Off after a message that is not an event (the rest is not read), and once the session
        # is handed to the finisher (``as_finished``).
        self.receiving = True
        self.flow_task: asyncio.Task | None = None
        self.loop_lag = None
        self.slot: _OpeningSlot | None = (
            None  # held from before the input is prepared to session.updated
        )

    # ----------------------------------------------------------------- trace
    def log(
        self,
        direction: str,
        type_: str,
        event: dict[str, Any] | str,
        t: float | None = None,
        scheduled: float | None = None,
    ) -> int:
        """Append a trace row (``event`` as a dict or its JSON text); returns its index."""
        text = event if isinstance(event, str) else json.dumps(event)
        return self.raw.append(CLOCK() if t is None else t, direction, type_, text, scheduled)

    def set_end(self, index: int, t_end: float) -> None:
        self.raw.set_end(index, t_end)

    def note(self, type_: str, **fields: Any) -> None:
        self.log("note", type_, fields)

    def fail(self, status: SessionStatus, reason: str) -> None:
        """Record the session's failure (the first one wins) and stop the client flow."""
        if self.failure is None:
            self.status, self.failure = status, reason
            self.note("failure", status=status, reason=reason)
        if self.flow_task is not None and not self.flow_task.done():
            self.flow_task.cancel()

    @property
    def origin(self) -> float:
        """The trace clock's zero: the first packet's slot, where its send starts."""
        return self.t0 if self.t0 is not None else (self.raw.times[0] if len(self.raw) else 0.0)

    def as_finished(self, elapsed_s: float, extra: dict[str, Any] | None) -> FinishedSession:
        """Everything ``write_recording`` needs, as plain picklable data (raw trace rows). The
        received audio is handed over, not copied: from here on no message is read into it."""
        self.receiving = False
        return FinishedSession(
            raw=self.raw.copy(),
            origin=self.origin,
            audio=self.audio,
            fields=dict(
                status=self.status,
                failure=self.failure,
                close_code=self.close_code,
                close_reason=self.close_reason,
                admission_denials=self.admission_denials,
                granted_session=self.granted_session,
                t0_wall=self.t0_wall,
                elapsed_s=elapsed_s,
                extra=dict(extra or {}),
                loop_lag=self.loop_lag,
            ),
        )

    # ------------------------------------------------------------ connection
    async def _connect(self) -> WsClient | None:
        """Open the WebSocket; HTTP 503 is retried ADMISSION_RETRIES times, 0.25 s apart."""
        for attempt in range(1, ADMISSION_RETRIES + 2):
            self.note("connect", url=redact_url(self.url), attempt=attempt)
            try:
                return await open_client(
                    self.url,
                    self._on_message,
                    list(self.profile.client.headers),
                    MAX_MESSAGE_BYTES,
                    handshake_timeout=self.timeout_s,
                )
            except Refused as exc:
                code = exc.status
                if code != 503:
                    self.fail("error", f"server refused the WebSocket with HTTP {code}")
                    return None
                self.admission_denials += 1
                self.note("admission_denied", http_status=503, attempt=attempt)
                if attempt <= ADMISSION_RETRIES:
                    await asyncio.sleep(ADMISSION_BACKOFF_S)
            except (OSError, picows.WSError, ValueError) as exc:
                self.fail("error", f"cannot connect to {redact_url(self.url)}: {exc}")
                return None
        self.fail(
            "admission_denied", f"HTTP 503 on all {ADMISSION_RETRIES + 1} connection attempts"
        )
        return None

    async def run(self) -> None:
        ticker = monitor()
        start = ticker.acquire()
        try:
            async with asyncio.timeout(self.timeout_s):
                await self._converse()
        except TimeoutError:
            self.fail(
                "timeout", f"session deadline of {self.timeout_s:g} s passed while {self.phase}"
            )
        finally:
            t0, input_s = self.t0, len(self.pcm) / 2 / self.profile.formats.input_rate
            window = None if t0 is None else (t0, t0 + input_s)
            self.loop_lag = ticker.release(start, self.profile.pacing.tolerance_ms, window)
            await self._shutdown()

    def _opened(self) -> None:
        """Give the opening slot back (if it is still held)."""
        if self.slot is not None:
            self.slot.release()

    async def _converse(self) -> None:
        """Connect, run the client flow until it ends or the connection closes (the client
        delivers received messages to ``_on_message`` meanwhile), classify the end."""
        self.ws = await self._connect()
        if self.ws is None:
            return
        self.ws.closed.add_done_callback(lambda _: self._on_connection_lost())
        self.flow_task = asyncio.create_task(self._flow(self.ws))
        await asyncio.wait({self.ws.closed, self.flow_task}, return_when=asyncio.FIRST_COMPLETED)
        if self.flow_task.done() and not self.flow_task.cancelled():
            exc = self.flow_task.exception()
            if isinstance(exc, Closed):  # the connection is closing: its end names the cause
                await asyncio.wait({self.ws.closed}, timeout=CLOSE_GRACE_S)
                if not self.ws.closed.done():  # once closed, its done callback has named it
                    self._on_connection_lost()
            elif exc is not None:
                self.fail("error", f"client error while {self.phase}: {exc!r}")

    @property
    def finished(self) -> bool:
        """The server confirmed our session.close with session.closed (or, for a ``tail``
        profile, answered the no-op session.update after the input)."""
        if self.profile.end.mode == "tail":
            return self.flags["tail"].is_set()
        return self.sent_close and self.flags["closed"].is_set()

    async def _shutdown(self) -> None:
        """Bounded cleanup outside the deadline: say goodbye if useful, close, note the code."""
        self._opened()  # a session that ended before session.updated gives its slot back here
        if self.flow_task is not None and not self.flow_task.done():
            self.flow_task.cancel()
        ws = self.ws
        drain = self.profile.end.mode == "drain"
        if drain and self.failure is None and self.finished and ws is not None:
            done, _ = await asyncio.wait({ws.closed}, timeout=CLOSE_GRACE_S)  # the server closes
            if not done:
                self.note("server_did_not_close", waited_s=CLOSE_GRACE_S)
        polite = drain and self.failure and not self.sent_close and not self.fatal
        if ws is not None and ws.open and polite:
            try:
                self.sent_close = True  # outside the deadline: bounded (a peer that reads nothing)
                await asyncio.wait_for(self._send(ws, {"type": "session.close"}), CLOSE_GRACE_S)
                await asyncio.wait({ws.closed}, timeout=CLOSE_GRACE_S)
            except (Closed, TimeoutError):
                pass
        if ws is not None:
            await ws.close(CLOSE_GRACE_S)
            self.close_code, self.close_reason = ws.close_code, ws.close_reason or None
            self.note("connection.closed", code=self.close_code, reason=self.close_reason)
            if self.failure is None and self.close_code != 1000:
                self.fail(
                    "error",
                    f"connection closed with code {self.close_code} after the session ended",
                )
        if self.flow_task is not None:
            if not self.flow_task.done():
                self.flow_task.cancel()
            await asyncio.gather(self.flow_task, return_exceptions=True)

    # ------------------------------------------------------------------ send
    async def _send(
        self,
        ws: WsClient,
        event: dict[str, Any],
        trace_event: dict | None = None,
        t: float | None = None,
        scheduled: float | None = None,
    ) -> int:
        """Send ``event`` with a fresh event_id; the trace logs ``trace_event`` (no audio) at
        ``t``."""
        event = {"event_id": event_id(), **event}
        logged = event if trace_event is None else {**trace_event, "event_id": event["event_id"]}
        index = self.log("send", event["type"], logged, t, scheduled)
        ws.send(json.dumps(event))
        await ws.drained()
        return index

    async def _send_append(self, seq: int, packet: bytes, due: float, start: float) -> None:
        """One input packet. Its wire text is put together around the base64 audio (which needs
        no JSON escaping) as bytes, so the audio is never run through the JSON encoder nor
        copied into a ``str``; the trace logs the same event without the audio (the text
        ``json.dumps`` would give, made here without it: two encoder runs a packet cost the
        loop more than the send)."""
        assert self.ws is not None
        eid, sglang = event_id(), ""
        if self.profile.client.sends_seq:
            t_start = (
                f', "t_start_ms": {seq * self.profile.pacing.packet_ms}'
                if self.profile.client.sends_t_start
                else ""
            )
            sglang = f', "sglang": {{"seq": {seq}{t_start}}}'
        logged = (
            f'{{"type": "input_audio_buffer.append"{sglang}, "audio_bytes": {len(packet)}, '
            f'"event_id": "{eid}"}}'
        )
        index = self.raw.append(start, "send", "input_audio_buffer.append", logged, due)
        head = (
            f'{{"event_id": "{eid}", "type": "input_audio_buffer.append"{sglang}, "audio": "'
        ).encode()
        self.ws.send(b"".join((head, binascii.b2a_base64(packet, newline=False), b'"}')))
        await self.ws.drained()
        self.set_end(index, CLOCK())

    def _anchor(self, t0: float) -> None:
        self.t0 = t0
        self.t0_wall = dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")

    async def _flow(self, ws: WsClient) -> None:
        """The client's side of the session protocol, step by step."""
        self.phase = "waiting for session.created"
        await self.flags["created"].wait()
        await self._send(ws, {"type": "session.update", "session": self.session_update})
        self.phase = "waiting for session.updated"
        await self.flags["updated"].wait()
        self._opened()
        self.phase = "sending input"
        packets = split_packets(self.pcm, self.profile.packet_samples)
        packet_s = self.profile.pacing.packet_ms / 1000.0
        t0, _ = await send_paced(
            packets,
            self._send_append,
            CLOCK,
            paced_sleep,
            packet_s,
            self._anchor,
            SPREADER,
            receipts=False,
        )
        input_s = len(self.pcm) / 2 / self.profile.formats.input_rate
        if self.profile.end.mode == "tail":
            await sleep_until(t0 + input_s + self.profile.end.tail_s)
            await self._send(
                ws, {"type": "session.update", "session": self.profile.session.noop_update()}
            )
            self.phase = "waiting for the session.updated of the --legacy-tail session.update"
            await self.flags["tail"].wait()
            return
        await sleep_until(t0 + input_s)
        await self._send(ws, {"type": "sglang.input_audio.end"})
        self.phase = "waiting for sglang.input_audio.drained"
        await self.flags["drained"].wait()
        self.sent_close = True
        await self._send(ws, {"type": "session.close"})
        self.phase = "waiting for session.closed"
        await self.flags["closed"].wait()

    # --------------------------------------------------------------- receive
    def _on_message(self, message: str | bytes, t: float) -> None:
        """Log a server event with its receipt time ``t`` (called by the client as each message
        is parsed, in the loop's read callback); after one that is not an event, read no more."""
        if not self.receiving:
            return
        event = self._parse(message, t)
        if event is None:
            self.receiving = False
            return
        self._dispatch(event, views.read_event(event, self.profile.events.audio_delta), message, t)

    def _parse(self, message: str | bytes, t: float) -> dict[str, Any] | None:
        """A JSON object with a string type, or None after recording the failure."""
        event, problem, text = parse_server_message(message)
        if event is not None:
            return event
        self.log("note", "invalid_message", {"problem": problem, "text": text[:200]}, t)
        self.fatal = True
        self.fail("error", f"server sent {problem} while {self.phase}")
        return None

    def _dispatch(
        self, event: dict[str, Any], view: views.Event, message: str | bytes, t: float
    ) -> None:
        """Log ``event`` (as received; an audio delta without its audio) and act on its
        ``view``."""
        type_ = view.type or ""  # a string: _parse let no other event through
        if isinstance(view, views.AudioDelta):  # one of the dialect's events.audio_delta
            logged = self._take_audio(event, view, t)
            if logged is None:
                return
            self.log("recv", type_, logged, t)
        else:
            self.log("recv", type_, message, t)
        flag = _FLAGS.get(type_)
        if flag == "updated":
            self.updates_answered += 1
            if self.updates_answered > 1:
                flag = "tail"
            else:
                session = view.session if isinstance(view, views.SessionEvent) else None
                self.granted_session = session if session is not None else {}
        if flag is not None:
            self.flags[flag].set()
        if isinstance(view, views.Error):
            self._on_error(view)

    def _take_audio(
        self, event: dict[str, Any], view: views.AudioDelta, t: float
    ) -> dict[str, Any] | None:
        """Move a delta's audio into the output; the trace keeps its offset and length (``event``
        as received, its audio left out). The text is kept as received and decoded when the
        session is finished; here only its shape is checked (a string whose length is a multiple
        of 4), which gives the decoded length."""
        delta = view.shown("delta") or ""  # as received: one that is not a string is judged
        if not isinstance(delta, str) or len(delta) % 4:
            self.log("recv", view.type or "", {**event, "delta": None}, t)
            problem = (
                "not a string"
                if not isinstance(delta, str)
                else f"length {len(delta)} is not a multiple of 4"
            )
            self.fail("error", f"undecodable audio delta ({problem})")
            return None
        size = len(delta) // 4 * 3 - (
            2 if delta.endswith("==") else 1 if delta.endswith("=") else 0
        )
        offset = self.output_bytes
        self.audio.append(delta)
        self.output_bytes += size
        return {**event, "delta": None, "audio_offset": offset, "audio_bytes": size}

    def _on_error(self, view: views.Error) -> None:
        err = view.body
        self.fatal = view.fatal
        self.fail(
            "error",
            f"server error {err.shown('code')} ({err.shown('type')}): {err.shown('message')}",
        )

    def _on_connection_lost(self) -> None:
        if self.finished:
            return
        ws = self.ws
        code = ws.close_code if ws is not None else None
        reason = (ws.close_reason if ws is not None else "") or CLOSE_CODES.get(code or 0, "")
        if ws is not None and ws.failed_by_client is not None:  # we failed the connection
            sent_code, sent_reason = ws.failed_by_client
            code, reason = (
                sent_code,
                " ".join(
                    filter(None, ("client closed it:", CLOSE_CODES.get(sent_code), sent_reason))
                ),
            )
        self.fail(
            "disconnected",
            f"connection closed (code {code}{', ' + reason if reason else ''}) while {self.phase}",
        )


# One worker thread for the light CPU-bound parts of a session (input resampling, the input WAV).
# With the default executor several such threads at once each hold the GIL for a switch interval
# in turn, and the event loop that paces every session waits behind all of them.
_WORKER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fdb-recorder-work")


async def _off_loop(fn, *args):
    return await asyncio.get_running_loop().run_in_executor(_WORKER, fn, *args)


def _prepare(audio: Audio, rate: int) -> bytes:
    """The session's input as PCM16 at ``rate`` (in the worker thread). The session's directory
    is made when its files are written (``fdb.io``'s atomic writes make their parent), not here:
    a mkdir blocked the loop and delayed every session's packets by as much while a batch
    opened (measured: docs/benchmarks.md#recorder-openings)."""
    return Blob(input_pcm16(audio, rate))  # handed to the finisher beside its pickle, not in it


async def start_finisher() -> None:
    """Start the finisher process and this loop's channel to it now, before any session is
    paced, so its start-up does not land on the first sessions' packets. Best effort."""
    try:
        await finisher_channel()
    except (FinisherBroken, OSError):
        pass


async def _finish(done: FinishedSession, out_dir: Path, kwargs: dict[str, Any]) -> SessionRecord:
    """``finish_recording`` in the finisher process; in a thread if that process cannot run."""
    try:
        channel = await finisher_channel()
        return await channel.finish(done, out_dir, kwargs)
    except (FinisherBroken, OSError, pickle.PicklingError):
        return await _off_loop(finish_recording, done, out_dir, kwargs)


async def record_session(
    url: str,
    audio: Audio,
    out_dir: Path,
    *,
    sample_id: str,
    variant: str,
    profile: Dialect | str,
    turn_detection: dict[str, Any] | str | None,
    model: str | None = None,
    instructions: str | None = None,
    timeout_s: float = 90.0,
    extra_meta: dict[str, Any] | None = None,
    tail_s: float | None = None,
    settings: SessionSettings | None = None,
) -> SessionRecord:
    """Record one session of ``audio`` against ``url`` into ``out_dir``.

    ``settings`` (instructions, voice, sampling, reference audio) go into the first
    session.update and, without the audio bytes, into session.json's ``extra.session_settings``.

    Bad local input (an invalid --turn-detection, empty audio, an existing recording) raises
    FdbError/SampleError before anything is sent; everything the server does is recorded.
    """
    profile = get_dialect(profile)
    if tail_s is not None and profile.end.mode == "tail":  # --legacy-tail
        if not 0 <= tail_s <= 30:
            raise FdbError(f"--legacy-tail must be in [0, 30] s, got {tail_s}")
        profile = profile.with_tail(tail_s)
    turn_detection = profile.validate_turn_detection(turn_detection)
    label = f"{sample_id} [{variant}]"
    out_dir = Path(out_dir)
    if (out_dir / "session.json").exists():
        raise SampleError(
            label, "is already recorded", "delete it or record into a new output", str(out_dir)
        )
    if not timeout_s > 0:
        raise FdbError(f"{label}: timeout_s must be positive, got {timeout_s}")
    slot = await _opening_slot()
    try:
        pcm = await _off_loop(_prepare, audio, profile.formats.input_rate)  # keep the loop free
        if not pcm:
            raise SampleError(label, "input audio is empty", "check the dataset file")
    except BaseException:
        slot.release()
        raise
    if settings is not None:
        instructions = settings.instructions if settings.instructions is not None else instructions
        extra_meta = {**(extra_meta or {}), "session_settings": settings.model_dump(mode="json")}
    sglang = settings.sglang_fields() if settings is not None else None
    body = profile.session_update(turn_detection, model, instructions, sglang)
    session = _Session(url, pcm, profile, body, timeout_s)
    session.slot = slot
    started = CLOCK()

    base = {
        "sample_id": sample_id,
        "variant": variant,
        "url": redact_url(url),
        "model": model,
        "instructions": instructions,
        "timeout_s": timeout_s,
    }

    kwargs = dict(
        base=base, profile=profile, pcm=pcm, source_rate=audio.rate, turn_detection=turn_detection
    )

    try:
        await session.run()
    except asyncio.CancelledError:
        session.fail("error", f"recording was cancelled while {session.phase}")
        elapsed = CLOCK() - started
        finish_recording(session.as_finished(elapsed, extra_meta), out_dir, kwargs)
        raise
    elapsed = CLOCK() - started
    # Judging and fsync-ed writes run off the loop so other sessions' packets stay on schedule.
    return await _finish(session.as_finished(elapsed, extra_meta), out_dir, kwargs)
