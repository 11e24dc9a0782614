"""Real-time input pacing in 80 ms packets on an absolute schedule.

Packet ``seq`` is due at ``t0 + seq * packet_s``, t0 being packet 0's slot (its send starts
there, give or take the event loop's timer resolution; with a ``PhaseSpreader`` the slot is
the session's phase within the period). The schedule never drifts: a sender that falls behind
sends its overdue packets at once and returns to the schedule. A packet whose send starts more
than the tolerance (80 ms) after its slot is a pacing violation; it means the load generator
fell behind, and the session is ineligible.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import numpy as np

from fdb.session_records import PacingStats, PacketSend, TraceEvent

MAX_VIOLATION_SEQS = 20


def split_packets(pcm: bytes, packet_samples: int = 1280) -> list[bytes]:
    """PCM16 bytes cut into packets of ``packet_samples``; the last one may be short."""
    step = packet_samples * 2
    return [pcm[i : i + step] for i in range(0, len(pcm), step)]


class PhaseSpreader:
    """Gives each new session a packet phase, so concurrent sessions' packets interleave.

    Sessions that start together would otherwise send their packets in the same millisecond
    every 80 ms, and the last of N waits for the N-1 sends before it. Session k starts its
    schedule at the next instant whose offset within the packet period is frac(k * 0.618...)
    of the period (a low-discrepancy sequence: any number of sessions spreads about evenly),
    rounded to a grid of ``grid_s`` (0.5 ms; 160 phases in 80 ms) on the clock's period
    boundaries. Sessions on the same phase have the same due times, so one timer wake-up sends
    the packets of all of them: a wake-up every 0.5 ms instead of one per packet, which cuts
    the recorder's CPU (measured: docs/benchmarks.md#recorder-timers). The wait
    before packet 0 is under one period; the
    trace clock starts at packet 0.
    """

    GOLDEN = (5**0.5 - 1) / 2
    GRID_S = 0.0005

    def __init__(self, grid_s: float = GRID_S) -> None:
        self._count = 0
        self.grid_s = grid_s

    def start(self, now: float, packet_s: float) -> float:
        phase = (self._count * self.GOLDEN) % 1.0 * packet_s
        if self.grid_s > 0:
            phase = round(phase / self.grid_s) * self.grid_s % packet_s
        self._count += 1
        slot = now - now % packet_s + phase
        return slot if slot >= now else slot + packet_s


SPREADER = PhaseSpreader()  # one per process: every session of a batch draws from it


async def send_paced(
    packets: Sequence[bytes],
    send: Callable[[int, bytes, float, float], Awaitable[None]],
    clock: Callable[[], float],
    sleep: Callable[[float], Awaitable[None]],
    packet_s: float = 0.08,
    on_start: Callable[[float], None] | None = None,
    spreader: PhaseSpreader | None = None,
    receipts: bool = True,
) -> tuple[float, list[PacketSend]]:
    """Send ``packets`` on the absolute schedule; returns (t0, receipts on the t0 clock).
    With ``receipts=False`` the list is empty (the caller keeps its own, e.g. in its trace).

    ``send(seq, packet, scheduled, start)`` writes one packet (absolute clock times);
    ``on_start(t0)`` is called with packet 0's slot t0, so the caller can anchor its trace clock
    there. With a ``spreader`` packet 0 waits for the session's phase slot (under one period).
    """
    sent: list[PacketSend] = []
    t0 = clock()
    if spreader is not None:
        t0 = spreader.start(t0, packet_s)
    if on_start is not None:
        on_start(t0)
    for seq, packet in enumerate(packets):
        due = t0 + seq * packet_s
        start = t0 if seq == 0 and spreader is None else clock()
        while start < due:  # a timer may fire a little early (uvloop rounds to whole ms)
            await sleep(due - start)
            start = clock()
        await send(seq, packet, due, start)
        if receipts:
            end = clock()
            sent.append(
                PacketSend(
                    seq=seq,
                    samples=len(packet) // 2,
                    scheduled=due - t0,
                    start=start - t0,
                    end=end - t0,
                )
            )
    return t0, sent


def pacing_stats(
    sends: Sequence[PacketSend], packet_ms: int = 80, tolerance_ms: float = 80.0
) -> PacingStats:
    """Lateness = send start - scheduled slot; a violation is lateness beyond ``tolerance_ms``
    (early sends count by their absolute offset too, though this sender never sends early)."""
    if not sends:
        return PacingStats(packets=0, packet_ms=packet_ms, tolerance_ms=tolerance_ms)
    late_ms = np.array([s.lateness_s * 1000.0 for s in sends], dtype=np.float64)
    send_ms = np.array([(s.end - s.start) * 1000.0 for s in sends], dtype=np.float64)
    bad = [s.seq for s, lat in zip(sends, late_ms, strict=True) if abs(lat) > tolerance_ms]
    return PacingStats(
        packets=len(sends),
        packet_ms=packet_ms,
        tolerance_ms=tolerance_ms,
        max_lateness_ms=round(float(late_ms.max()), 3),
        p99_lateness_ms=round(float(np.percentile(late_ms, 99)), 3),
        mean_lateness_ms=round(float(late_ms.mean()), 3),
        max_send_ms=round(float(send_ms.max()), 3),
        violations=len(bad),
        violation_seqs=bad[:MAX_VIOLATION_SEQS],
    )


def sends_from_trace(events: Sequence[TraceEvent]) -> list[PacketSend]:
    """Packet receipts rebuilt from the trace's sent appends (``scheduled``/``t``/``t_end``)."""
    sends: list[PacketSend] = []
    for ev in events:
        if ev.dir != "send" or ev.type != "input_audio_buffer.append":
            continue
        seq = (ev.event.get("sglang") or {}).get("seq", len(sends))
        scheduled = ev.scheduled if ev.scheduled is not None else ev.t
        end = ev.t_end if ev.t_end is not None else ev.t
        samples = int(ev.event.get("audio_bytes", 0)) // 2
        sends.append(
            PacketSend(seq=int(seq), samples=samples, scheduled=scheduled, start=ev.t, end=end)
        )
    return sends
