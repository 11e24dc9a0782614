"""Pacing: packets on an absolute 80 ms schedule, late senders catch up, violations counted."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from recorders.pacing import (
    PhaseSpreader,
    pacing_stats,
    send_paced,
    sends_from_trace,
    split_packets,
)
from tests.recorders.recorder_fakes import good_trace


class FakeClock:
    """A virtual clock: sleeping advances it; each send costs ``cost`` and may stall."""

    def __init__(self, cost: float = 0.002, stalls: dict[int, float] | None = None):
        self.now = 100.0
        self.cost = cost
        self.stalls = stalls or {}
        self.sent: list[tuple[int, float, float]] = []  # seq, start, scheduled

    def time(self) -> float:
        return self.now

    async def sleep(self, delay: float) -> None:
        self.now += delay

    async def send(self, seq: int, packet: bytes, due: float, start: float) -> None:
        assert start == self.now
        self.sent.append((seq, self.now, due))
        self.now += self.cost + self.stalls.get(seq, 0.0)


def run(clock: FakeClock, n: int):
    packets = [b"\0\0" * 1280] * n
    return asyncio.run(send_paced(packets, clock.send, clock.time, clock.sleep, 0.08))


def test_split_packets_keeps_a_short_last_packet():
    packets = split_packets(b"\1\0" * 16000, 1280)
    assert len(packets) == 13
    assert all(len(p) == 2560 for p in packets[:-1]) and len(packets[-1]) == 1280
    assert b"".join(packets) == b"\1\0" * 16000


def test_schedule_is_absolute_from_the_first_packet():
    clock = FakeClock(cost=0.01)
    t0, receipts = run(clock, 10)
    assert t0 == 100.0
    for r in receipts:
        assert r.scheduled == pytest.approx(r.seq * 0.08)
        assert r.start == pytest.approx(r.scheduled)  # per-send cost never accumulates as drift
        assert r.end - r.start == pytest.approx(0.01)


def test_spreader_interleaves_sessions_that_start_together():
    spreader, period = PhaseSpreader(grid_s=0), 0.08
    starts = [spreader.start(100.013, period) for _ in range(64)]
    assert all(100.013 <= t < 100.013 + period for t in starts)  # packet 0 waits under one period
    phases = sorted(t % period for t in starts)
    gaps = [b - a for a, b in zip(phases, phases[1:] + [phases[0] + period], strict=True)]
    assert min(gaps) > 0.3 * period / 64 and max(gaps) < 3 * period / 64  # about evenly spread
    clock = FakeClock(cost=0.001)
    t0, receipts = asyncio.run(
        send_paced(
            [b"\0\0" * 1280] * 3,
            clock.send,
            clock.time,
            clock.sleep,
            period,
            spreader=PhaseSpreader(),
        )
    )
    assert t0 == pytest.approx(
        100.0
    )  # the first session's phase is 0, and 100.0 is on the 80 ms grid
    assert [r.scheduled for r in receipts] == pytest.approx([0.0, 0.08, 0.16])
    assert all(r.start >= r.scheduled for r in receipts)


def test_spreader_puts_phases_on_its_grid_so_sessions_share_wake_ups():
    spreader, period = PhaseSpreader(), 0.08  # the default grid: 0.5 ms, 160 phases
    starts = [
        spreader.start(100.013 + 0.37 * k, period) for k in range(512)
    ]  # sessions start apart
    phases = [round((t % period) / 0.0005) for t in starts]
    assert all(
        abs((t % period) - p * 0.0005) < 1e-9 or abs((t % period) - period) < 1e-9
        for t, p in zip(starts, phases, strict=True)
    )  # on the grid, counted from the clock's periods
    counts = Counter(p % 160 for p in phases)
    assert (
        len(counts) == 160 and max(counts.values()) <= 5
    )  # every phase used, about evenly (512/160)


def test_late_sender_sends_overdue_packets_at_once_then_returns_to_schedule():
    clock = FakeClock(cost=0.001, stalls={2: 0.25})  # packet 2's write blocks for 250 ms
    _, receipts = run(clock, 10)
    starts = {r.seq: r.start for r in receipts}
    assert starts[3] == pytest.approx(0.16 + 0.251)  # overdue: sent immediately
    assert starts[4] == pytest.approx(starts[3] + 0.001)  # also overdue, right behind
    assert starts[5] == pytest.approx(starts[4] + 0.001)
    assert starts[6] == pytest.approx(0.48)  # caught up: back on the absolute schedule
    assert starts[9] == pytest.approx(0.72)
    stats = pacing_stats(receipts)
    assert stats.packets == 10
    assert stats.violations == 2 and stats.violation_seqs == [3, 4]  # > 80 ms late
    assert stats.max_lateness_ms == pytest.approx(171.0)


def test_lateness_within_tolerance_is_not_a_violation():
    clock = FakeClock(cost=0.001, stalls={0: 0.079})
    _, receipts = run(clock, 4)
    stats = pacing_stats(receipts)
    assert stats.violations == 0 and stats.max_lateness_ms == pytest.approx(0.0, abs=1e-6)


def test_real_event_loop_keeps_the_schedule():
    sent = []

    async def main():
        loop = asyncio.get_running_loop()

        async def send(seq, packet, due, start):
            sent.append((loop.time(), due))

        return await send_paced([b"\0\0" * 1280] * 8, send, loop.time, asyncio.sleep, 0.08)

    _, receipts = asyncio.run(main())
    # The rule's tolerance is one 80 ms packet; a shared CI core can add tens of ms of jitter.
    assert pacing_stats(receipts).violations == 0
    assert receipts[-1].start == pytest.approx(0.56, abs=0.08)


def test_pacing_can_be_rebuilt_from_the_trace():
    events, _ = good_trace(late_packet=5, late_s=0.1)
    sends = sends_from_trace(events)
    assert [s.seq for s in sends] == list(range(13))
    assert sends[-1].samples == 640
    stats = pacing_stats(sends)
    assert stats.violations == 1 and stats.violation_seqs == [5]
    assert stats.max_lateness_ms == pytest.approx(100.0)
