"""The session graph runtime with scripted nodes: bounded edges (block vs drop_oldest), control
edges outside the data queues and in order, preempt, interruption fencing, a feedback cycle that
never blocks, open upstream first / close downstream first."""

from __future__ import annotations

import asyncio
import time

import pytest

from fdb.errors import FdbError
from serving.graph.declare import load_graph
from serving.graph.kinds import KindOptions
from serving.graph.registry import Backend, component, register
from serving.graph.runtime import Node, SessionGraph
from serving.graph.streams import Chunk, Pcm16, TextDelta, control

# A scripted kind for the runtime tests: reads audio, text and controls, writes text and controls
# (the role of a transcription: it neither opens nor ends turns).
if component("scripted") is None:
    register(
        Backend(
            "transcription",
            "scripted",
            KindOptions,
            consumes=frozenset({"pcm16", "session", "text_delta"}),
            produces=frozenset({"text_delta", "session"}),
            optional=frozenset({"pcm16", "text_delta"}),
        )
    )


def text(value: str, turn: int | None = None) -> Chunk:
    return Chunk("text_delta", TextDelta(value), turn=turn)


def audio(turn: int | None = None) -> Chunk:
    return Chunk("pcm16", Pcm16(b"\0\0" * 160), turn=turn)


class Burst(Node):
    """On each input chunk: emits ``count`` text chunks as fast as its edges take them."""

    def __init__(self, count: int = 10, turn_of=lambda i: None):
        self.count, self.turn_of = count, turn_of
        self.emitted_at: list[float] = []
        self.seen: list[Chunk] = []

    async def on_chunk(self, chunk, emit):
        self.seen.append(chunk)
        if chunk.format != "pcm16":
            return
        for i in range(self.count):
            await emit(text(str(i), self.turn_of(i)))
            self.emitted_at.append(time.monotonic())


class Slow(Node):
    """Takes ``delay`` s per data chunk; records data, controls and cancellations in one log."""

    def __init__(self, delay: float = 0.02):
        self.delay = delay
        self.log: list[tuple[str, str, int | None]] = []

    async def on_chunk(self, chunk, emit):
        try:
            await asyncio.sleep(self.delay)
        except asyncio.CancelledError:
            self.log.append(("cancelled", chunk.payload.text, chunk.turn))
            raise
        self.log.append(("data", getattr(chunk.payload, "text", chunk.format), chunk.turn))

    async def on_control(self, chunk, emit):
        self.log.append(("control", chunk.payload.data.get("n", chunk.control), chunk.turn))


def graph_of(nodes: dict, publish: dict | None = None) -> dict:
    return {
        "session_nodes": {
            name: {"kind": "scripted", "inputs": inputs} for name, inputs in nodes.items()
        },
        "session_publish": publish or {},
    }


async def run(decl: dict, nodes: dict, script, timeout: float = 10.0) -> SessionGraph:
    graph = SessionGraph(load_graph(decl), nodes)
    await graph.open()
    try:
        await script(graph)
        graph.end_input()
        await graph.wait_done(timeout_s=timeout)
    finally:
        await graph.close()
    return graph


@pytest.mark.parametrize("overflow", ["block", "drop_oldest"])
def test_a_full_edge_blocks_the_producer_or_drops_the_oldest(overflow):
    prod, cons = Burst(10), Slow(0.02)
    decl = graph_of(
        {"prod": ["input"], "cons": [{"source": "prod", "capacity": 2, "overflow": overflow}]}
    )

    async def script(graph):
        assert await graph.append(audio())

    graph = asyncio.run(run(decl, {"prod": prod, "cons": cons}, script))
    got = [t for kind, t, _ in cons.log if kind == "data"]
    held_s = prod.emitted_at[-1] - prod.emitted_at[0]
    if overflow == "block":
        assert got == [str(i) for i in range(10)]
        assert graph.edge("cons", "prod").dropped == 0
        assert held_s >= 6 * 0.02  # the producer waited for the consumer (7 waits of >= 20 ms)
    else:
        assert got[-1] == "9" and len(got) < 10  # the newest survives, the oldest were dropped
        assert graph.edge("cons", "prod").dropped == 10 - len(got)
        assert held_s < 0.02 * 3  # never held (generous for a loaded machine)


def test_a_client_append_to_a_full_blocking_edge_is_rejected_whole():
    prod, cons = Burst(0), Slow(0.0)
    gate = asyncio.Event()

    async def held(chunk, emit):
        await gate.wait()

    prod.on_chunk = held
    decl = graph_of({"prod": [{"source": "input", "capacity": 2}], "cons": ["input:pcm16"]})

    async def script(graph):
        assert await graph.append(audio())
        await asyncio.sleep(0.05)  # prod has taken it and holds it
        assert [await graph.append(audio()) for _ in range(3)] == [True, True, False]  # 2 fit
        gate.set()

    graph = asyncio.run(run(decl, {"prod": prod, "cons": cons}, script))
    assert len([e for e in cons.log if e[0] == "data"]) == 3  # the rejected append reached nobody
    assert graph.edge("prod", "input").dropped == 0


@pytest.mark.parametrize("preempt", [False, True])
def test_control_edges_bypass_the_data_queue_in_order(preempt):
    cons = Slow(0.3 if preempt else 0.05)
    decl = graph_of(
        {
            "prod": ["input"],
            "cons": [
                "prod:text_delta",
                {
                    "kind": "control",
                    "source": "prod",
                    "event": "reply.progress",
                    "preempt": preempt,
                },
            ],
        }
    )

    class Mixed(Node):
        async def on_chunk(self, chunk, emit):
            if chunk.format != "pcm16":
                return
            for i in range(4):
                await emit(text(f"d{i}"))
            await asyncio.sleep(0.01)  # cons is busy with d0 now
            for n in range(3):
                await emit(control("reply.progress", n=f"c{n}"))

    async def script(graph):
        await graph.append(audio())

    asyncio.run(run(decl, {"prod": Mixed(), "cons": cons}, script))
    controls = [e[1] for e in cons.log if e[0] == "control"]
    assert controls == ["c0", "c1", "c2"]  # in order, and never as data
    first_control = next(i for i, e in enumerate(cons.log) if e[0] == "control")
    if preempt:
        assert cons.log[:first_control] == [("cancelled", "d0", None)]
    else:
        assert cons.log[:first_control] == [("data", "d0", None)]  # the in-flight chunk finishes
    assert [e[1] for e in cons.log[first_control + 3 :]] == ["d1", "d2", "d3"]  # queued data after


def test_a_node_with_live_controls_takes_them_beside_the_chunk_in_flight():
    cons = Slow(0.3)
    cons.live_controls = True
    decl = graph_of(
        {
            "prod": ["input"],
            "cons": [
                "prod:text_delta",
                {"kind": "control", "source": "prod", "event": "reply.progress"},
            ],
        }
    )

    class Mixed(Node):
        async def on_chunk(self, chunk, emit):
            if chunk.format == "pcm16":
                await emit(text("d0"))
                await asyncio.sleep(0.05)  # cons is busy with d0 now
                await emit(control("reply.progress", n="c0"))

    async def script(graph):
        await graph.append(audio())

    asyncio.run(run(decl, {"prod": Mixed(), "cons": cons}, script))
    assert cons.log == [("control", "c0", None), ("data", "d0", None)]  # taken before d0 finished


def test_an_interrupted_turn_is_fenced_for_the_graphs_lifetime():
    prod = Burst(6, turn_of=lambda i: 1 if i % 2 == 0 else 2)  # 0,2,4 in turn 1; 1,3,5 in turn 2
    cons = Slow(0.05)
    decl = graph_of(
        {
            "prod": ["input"],
            "cons": ["prod", {"kind": "control", "source": "input", "event": "interrupt"}],
        },
        publish={"prod": ["text_delta"]},
    )

    async def script(graph):
        await graph.append(audio())
        await asyncio.sleep(0.02)  # cons is on "0"; 1..5 are queued, all six published
        await graph.control(control("interrupt", turn=1))
        assert graph.fenced == {1}
        await prod.on_chunk(audio(), graph._runners["prod"].emit)  # later output of turn 1 too
        await graph.append(audio(turn=1))  # the client's own input is never dropped

    graph = asyncio.run(run(decl, {"prod": prod, "cons": cons}, script))
    data = [(t, turn) for kind, t, turn in cons.log if kind == "data"]
    assert data[0] == ("0", 1)  # already being processed when the interrupt came
    assert [d for d in data[1:] if d[1] == 1] == []
    assert [t for t, turn in data if turn == 2] == ["1", "3", "5", "1", "3", "5", "1", "3", "5"]
    assert ("control", "interrupt", 1) in cons.log
    published = graph.sink.drain()
    assert {c.turn for c in published} == {2} and len(published) == 9
    assert [c.turn for c in prod.seen if c.format == "pcm16"] == [None, None, 1]


def test_a_feedback_cycle_never_blocks():
    """a -> b -> a (feedback, drop_oldest): b keeps answering although a never keeps up."""

    class Echo(Node):
        def __init__(self):
            self.count = 0

        async def on_chunk(self, chunk, emit):
            self.count += 1
            await emit(text(f"back{self.count}"))

    a, b = Burst(40), Echo()
    slow_a = Slow(0.01)

    async def a_chunk(chunk, emit):
        if chunk.format == "pcm16":
            await Burst.on_chunk(a, chunk, emit)
        else:
            await Slow.on_chunk(slow_a, chunk, emit)

    a.on_chunk = a_chunk
    decl = graph_of(
        {
            "a": [
                "input",
                {"source": "b", "feedback": True, "overflow": "drop_oldest", "capacity": 2},
            ],
            "b": [{"source": "a", "capacity": 64}],
        }
    )

    async def script(graph):
        await graph.append(audio())

    graph = asyncio.run(run(decl, {"a": a, "b": b}, script, timeout=5.0))
    assert b.count == 40
    assert graph.edge("a", "b").dropped > 0


def test_nodes_open_upstream_first_and_close_downstream_first():
    class Track(Node):
        def __init__(self, name, log):
            self.name, self.log = name, log

        async def open(self):
            self.log.append(("open", self.name))

        async def close(self):
            self.log.append(("close", self.name))

    log: list = []
    # declared downstream first: the order comes from the edges, not the file
    decl = graph_of({"c": ["b"], "b": ["a"], "a": ["input"]})
    graph = asyncio.run(run(decl, {n: Track(n, log) for n in "abc"}, lambda g: asyncio.sleep(0)))
    assert log == [
        ("open", "a"),
        ("open", "b"),
        ("open", "c"),
        ("close", "c"),
        ("close", "b"),
        ("close", "a"),
    ]
    assert graph.events == log


def test_after_the_input_ends_a_node_that_is_not_idle_keeps_taking_controls():
    """Like the dialog waiting for its reply's turn.done from a downstream node (a control edge)."""

    class Opener(Node):
        def __init__(self):
            self.open_turn: int | None = None

        async def on_chunk(self, chunk, emit):
            self.open_turn = 1
            await emit(text("reply", turn=1))

        async def on_control(self, chunk, emit):
            if chunk.control == "turn.done":
                self.open_turn = None

        def idle(self):
            return self.open_turn is None

    class Ender(Node):
        async def on_chunk(self, chunk, emit):
            await asyncio.sleep(0.1)
            await emit(control("turn.done", turn=chunk.turn))

    opener = Opener()
    decl = graph_of(
        {
            "opener": ["input:pcm16", {"kind": "control", "source": "ender", "event": "turn.done"}],
            "ender": ["opener"],
        }
    )

    async def script(graph):
        await graph.append(audio())

    asyncio.run(run(decl, {"opener": opener, "ender": Ender()}, script, timeout=5.0))
    assert opener.open_turn is None  # it took turn.done after the input had ended


def test_a_failing_node_fails_the_graph_with_its_name():
    class Broken(Node):
        async def on_chunk(self, chunk, emit):
            raise RuntimeError("boom")

    decl = graph_of({"prod": ["input"], "cons": ["prod"]})

    async def scenario():
        graph = SessionGraph(load_graph(decl), {"prod": Broken(), "cons": Slow()})
        await graph.open()
        await graph.append(audio())
        graph.end_input()
        with pytest.raises(FdbError, match="session graph node 'prod' failed: RuntimeError: boom"):
            await graph.sink.get()  # a reader of the published output learns it too
        with pytest.raises(FdbError, match="node 'prod'"):
            await graph.wait_done(timeout_s=5)
        await graph.close()

    asyncio.run(scenario())


def test_stage_marks_log_each_nodes_first_chunk_of_a_kind(monkeypatch, caplog, tmp_path):
    """FDB_STAGE_MARKS=1: one line per (node, kind) and graph, the first only; off by default;
    benchmarks/server_stages.py reads them back as seconds after a mark."""
    from benchmarks.server_stages import groups, read_marks, stages

    decl = graph_of({"prod": ["input"], "cons": ["prod"]})

    async def script(graph):
        assert await graph.append(audio())
        assert await graph.append(audio())

    caplog.set_level("INFO", logger="fdb.serving")
    asyncio.run(run(decl, {"prod": Burst(3), "cons": Slow(0.0)}, script))
    assert "stage mark" not in caplog.text
    monkeypatch.setenv("FDB_STAGE_MARKS", "1")
    graphs = [asyncio.run(run(decl, {"prod": Burst(3), "cons": Slow(0.0)}, script))]
    graphs.append(asyncio.run(run(decl, {"prod": Burst(3), "cons": Slow(0.0)}, script)))
    marks = [r.getMessage() for r in caplog.records if "stage mark" in r.getMessage()]
    assert len(marks) == 2  # prod's text_delta, once a graph (6 chunks each)
    log = tmp_path / "server.log"
    log.write_text("\n".join(f"INFO fdb.serving: {m}" for m in marks) + "\n")
    read = read_marks(log)
    assert sorted(read, key=int) == [str(g.serial) for g in graphs]
    assert all(list(m) == ["prod:text_delta"] for m in read.values())
    assert stages(read, "prod:text_delta") == {}  # nothing after the only mark
    both = {"1": {"x:s": 10.0, "y:t": 10.25}, "2": {"x:s": 5.0, "y:t": 4.5}, "3": {"y:t": 1.0}}
    assert stages(both, "x:s") == {"y:t": {"graphs": 2, "p50": -0.5, "p90": 0.25, "max": 0.25}}
    assert [sorted(g) for g in groups(both, 2)] == [["1", "2"], ["3"]]
