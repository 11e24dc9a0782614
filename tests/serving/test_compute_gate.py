"""The compute gate (serving/graph/gate.py): at most ``slots`` calls at once, a freed slot to the
waiting call of the highest priority (first come among equals), never to a call whose resource
is busy; and the embedded nodes' calls go through it with their priorities."""

from __future__ import annotations

import threading
import time

import pytest

from serving.graph.gate import FIRST_AUDIO, FIRST_TEXT, REST, TRANSCRIBE, ComputeGate


def _start(
    gate: ComputeGate,
    priority: int,
    name: str,
    log: list[str],
    hold: threading.Event,
    resource: str | None = None,
) -> threading.Thread:
    def work() -> None:
        log.append(f"{name} start")
        hold.wait(5)
        log.append(f"{name} end")

    thread = threading.Thread(
        target=gate.call, args=(priority, work), kwargs={"resource": resource}
    )
    thread.start()
    return thread


def _wait_for(condition, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_a_freed_slot_goes_to_the_best_waiting_call():
    gate, log = ComputeGate(1), []
    holds = {name: threading.Event() for name in ("busy", "rest", "asr", "audio", "text", "audio2")}
    threads = [_start(gate, REST, "busy", log, holds["busy"])]
    _wait_for(lambda: "busy start" in log)
    for priority, name in (
        (REST, "rest"),
        (TRANSCRIBE, "asr"),
        (FIRST_AUDIO, "audio"),
        (FIRST_TEXT, "text"),
        (FIRST_AUDIO, "audio2"),
    ):
        threads.append(_start(gate, priority, name, log, holds[name]))
        _wait_for(lambda n=len(threads) - 1: len(gate._waiting) == n)
    for name in ("busy", "audio", "audio2", "text", "asr", "rest"):
        holds[name].set()
        _wait_for(lambda n=name: f"{n} end" in log)
    for thread in threads:
        thread.join(5)
    starts = [line.split()[0] for line in log if line.endswith("start")]
    assert starts == ["busy", "audio", "audio2", "text", "asr", "rest"]  # priority, then arrival
    assert gate.calls == {"first_audio": 2, "first_text": 1, "transcribe": 1, "rest": 2}
    assert gate._busy == 0 and not gate._waiting


def test_two_slots_run_two_calls_but_never_two_of_one_resource():
    gate, log = ComputeGate(2), []
    holds = [threading.Event() for _ in range(3)]
    first = _start(gate, TRANSCRIBE, "asr1", log, holds[0], resource="asr")
    _wait_for(lambda: "asr1 start" in log)
    second = _start(
        gate, FIRST_AUDIO, "asr2", log, holds[1], resource="asr"
    )  # waits for the resource
    _wait_for(lambda: len(gate._waiting) == 1)
    third = _start(
        gate, REST, "tts", log, holds[2], resource="tts"
    )  # a lower priority, but runnable
    _wait_for(lambda: "tts start" in log)
    assert "asr2 start" not in log and gate._busy == 2
    holds[0].set()
    _wait_for(lambda: "asr2 start" in log)
    holds[1].set()
    holds[2].set()
    for thread in (first, second, third):
        thread.join(5)
    assert gate._busy == 0 and not gate._held


def test_a_failing_call_gives_its_slot_back():
    gate = ComputeGate(1)

    def fail() -> None:
        raise RuntimeError("model error")

    with pytest.raises(RuntimeError, match="model error"):
        gate.call(FIRST_TEXT, fail, resource="llm")
    assert gate.call(REST, lambda: 42, resource="llm") == 42
    with pytest.raises(ValueError):
        ComputeGate(0)
    with pytest.raises(ValueError):
        gate.call(7, lambda: None)


def test_a_reserved_slot_never_goes_to_the_rest_of_a_reply():
    gate, log = ComputeGate(2, reserved=1), []
    holds = [threading.Event() for _ in range(4)]
    rest = _start(gate, REST, "rest1", log, holds[0])
    _wait_for(lambda: "rest1 start" in log)
    later = _start(
        gate, REST, "rest2", log, holds[1]
    )  # one slot is free, but it is the reserved one
    _wait_for(lambda: len(gate._waiting) == 1)
    time.sleep(0.05)
    assert "rest2 start" not in log and gate._busy == 1
    first = _start(gate, FIRST_AUDIO, "audio", log, holds[2])  # takes the reserved slot at once
    _wait_for(lambda: "audio start" in log)
    holds[0].set()
    _wait_for(lambda: "rest1 end" in log)
    time.sleep(0.05)
    assert (
        "rest2 start" not in log
    )  # the one busy slot is a first chunk's: the free one is reserved
    holds[2].set()
    _wait_for(lambda: "rest2 start" in log)
    for hold in holds:
        hold.set()
    for thread in (rest, later, first):
        thread.join(5)
    assert gate._busy == 0
    with pytest.raises(ValueError, match="reserved"):
        ComputeGate(2, reserved=2)


def test_among_equals_the_work_that_began_first_goes_first():
    """A reply's steps carry the reply's start: a later step of an earlier reply goes before
    an earlier-queued step of a later reply."""
    gate, log = ComputeGate(1), []
    holds = {name: threading.Event() for name in ("busy", "late", "early")}
    threads = [_start(gate, REST, "busy", log, holds["busy"])]
    _wait_for(lambda: "busy start" in log)
    began = time.monotonic()

    def step(name: str, since: float) -> threading.Thread:
        def work() -> None:
            log.append(f"{name} start")
            holds[name].wait(5)

        thread = threading.Thread(
            target=gate.call, args=(FIRST_TEXT, work), kwargs={"since": since}
        )
        thread.start()
        return thread

    threads.append(step("late", began + 1.0))  # queued first, but its reply began later
    _wait_for(lambda: len(gate._waiting) == 1)
    threads.append(step("early", began - 1.0))
    _wait_for(lambda: len(gate._waiting) == 2)
    for name in ("busy", "early", "late"):
        holds[name].set()
        _wait_for(lambda n=name: f"{n} start" in log)
    for thread in threads:
        thread.join(5)
    assert [line.split()[0] for line in log if line.endswith("start")] == ["busy", "early", "late"]
