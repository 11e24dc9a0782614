"""The asyncio runtime of a validated session graph.

- Nodes open upstream first (``GraphDecl.order``) and close downstream first.
- Every data edge is a bounded queue (``capacity``; ``overflow: block`` holds the producer's
  ``emit``, ``drop_oldest`` drops the edge's oldest chunk). A client append that would block is
  rejected instead (``append`` returns False) and nothing of it is queued.
- Control edges bypass the data queues: a node takes its pending controls, in arrival order,
  before its next data chunk (or at once, beside the chunk in flight, for a node with
  ``live_controls``); ``preempt`` cancels the node's ``on_chunk`` in flight first.
- An ``interrupt`` or ``turn.interrupted`` naming turn N fences N for the graph's lifetime:
  chunks of N queued on edges from nodes (never the client's input) and in the publish sink are
  dropped, and later chunks of N reach no reader and no sink. The controls about the interruption
  (``streams.PASS_FENCE``) still pass.
- ``end_input()`` ends the input; each node's ``on_end`` runs once its upstream has ended, its
  edges are empty and it is ``idle()``, so ``wait_done()`` returns when the graph has drained.
  An ended node still takes what reaches it until the graph closes (a client's truncate after
  the input's end).
- A sink that paces delivery (``holds_turn_done``) holds the turn.done of every node that
  publishes audio: it reaches that node's readers only when the sink ``release()``s it, once the
  turn's audio has played; ``release()`` also reports reply.delivered for such a node. Without
  a pacing sink the graph reports reply.delivered itself when a started reply is interrupted.
- With ``FDB_STAGE_MARKS=1`` in the server's environment, the first chunk of each node and kind
  (a format or a control) in each session graph is logged as a ``stage mark`` line with the
  graph's serial number in the process and the wall time (``benchmarks/server_stages.py`` reads
  them from the server's log: where a first reply's time goes inside the server); the pacing
  sink marks ``session audio.delta``, the first reply audio it sends.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import os
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from fdb.errors import FdbError
from serving.conversation.chunker import FIRST_CHUNK
from serving.graph.declare import INPUT, DataEdge, GraphDecl, NodeDecl
from serving.graph.streams import PASS_FENCE, Chunk, control

Emit = Callable[[Chunk], Awaitable[None]]
FENCING = ("interrupt", "turn.interrupted")
log = logging.getLogger("fdb.serving")
_serials = itertools.count(1)  # session graphs of this process, in order (stage marks)


@dataclasses.dataclass(frozen=True)
class NodeContext:
    """What a node class gets to build its node for one session (``Node.build``)."""

    decl: NodeDecl
    models: Any  # the models shared by every session's graph (serving.hub.ModelHub)
    vad_settings: dict
    max_history_messages: int = 12
    # A native node's side of its session (serving.duplex.node.NativePort: the session's outbox,
    # its granted settings, its end at max_context_ms); None in a turn-based graph.
    session: Any = None
    # The system's rule for a reply's first speakable chunk, (clause words, max words): the
    # speech node cuts it and a reply model announces it ahead (speech.prefetch) by the same one.
    first_chunk: tuple[int, int] = FIRST_CHUNK


class Node:
    """A node adapter. Override what the node needs; ``emit`` sends one chunk of this node.
    ``live_controls``: its controls are taken while an ``on_chunk`` is in flight too (else
    between chunks, or by cancelling it with ``preempt``)."""

    live_controls = False

    @classmethod
    def build(cls, ctx: NodeContext) -> Node:
        """This kind's node for one session (``serving.graph.registry`` names the class): by
        default ``cls(models, options)``."""
        return cls(ctx.models, ctx.decl.options)

    async def open(self) -> None:
        return None

    async def on_chunk(self, chunk: Chunk, emit: Emit) -> None:
        return None

    async def on_control(self, chunk: Chunk, emit: Emit) -> None:
        return None

    async def on_end(self, emit: Emit) -> None:
        return None

    def idle(self) -> bool:
        """False while the node still waits for controls (e.g. a dialog for its reply's turn.done):
        after the input ends, the node keeps running until it is idle."""
        return True

    async def close(self) -> None:
        return None


class Sink(Protocol):
    def put(self, chunk: Chunk) -> None: ...

    def purge(self, turn: int) -> int: ...

    def fail(self, error: BaseException) -> None: ...

    def close(self) -> None: ...


def _keeps(chunk: Chunk, turn: int) -> bool:
    return chunk.turn != turn or chunk.control in PASS_FENCE


class PublishSink:
    """The published chunks, in order, for one reader (the session's outbox in the server)."""

    holds_turn_done = False  # a pacing sink holds audio nodes' turn.done until it releases them

    def __init__(self) -> None:
        self._items: deque[Chunk] = deque()
        self._ready = asyncio.Event()
        self._closed = False
        self._error: BaseException | None = None

    def put(self, chunk: Chunk) -> None:
        self._items.append(chunk)
        self._ready.set()

    def purge(self, turn: int) -> int:
        before = len(self._items)
        self._items = deque(c for c in self._items if _keeps(c, turn))
        return before - len(self._items)

    def fail(self, error: BaseException) -> None:
        self._error = error
        self._ready.set()

    def close(self) -> None:
        self._closed = True
        self._ready.set()

    async def get(self) -> Chunk | None:
        """The next published chunk; None once the graph has drained. Raises a node's failure."""
        while not self._items:
            if self._error is not None:
                raise self._error
            if self._closed:
                return None
            self._ready.clear()
            await self._ready.wait()
        return self._items.popleft()

    def drain(self) -> list[Chunk]:
        items, self._items = list(self._items), deque()
        return items


class Edge:
    """One bounded data edge into a node."""

    def __init__(self, decl: DataEdge, wake: asyncio.Event):
        self.decl = decl
        self.items: deque[tuple[int, Chunk]] = deque()
        self.dropped = 0  # by drop_oldest
        self._wake = wake
        self._space = asyncio.Event()

    def full(self) -> bool:
        return len(self.items) >= self.decl.capacity

    async def put(self, seq: int, chunk: Chunk, fenced: set[int]) -> None:
        while self.full() and self.decl.overflow == "block":
            self._space.clear()
            await self._space.wait()
        if self.decl.source != INPUT and chunk.turn in fenced and chunk.control not in PASS_FENCE:
            return  # fenced while the producer waited for room
        if self.full():
            self.items.popleft()
            self.dropped += 1
        self.items.append((seq, chunk))
        self._wake.set()

    def pop(self) -> Chunk:
        self._space.set()
        return self.items.popleft()[1]

    def purge(self, turn: int) -> int:
        before = len(self.items)
        self.items = deque(i for i in self.items if _keeps(i[1], turn))
        if len(self.items) < before:
            self._space.set()
        return before - len(self.items)


class _Runner:
    """Drives one node: its pending controls first, then its data in arrival order."""

    def __init__(self, graph: SessionGraph, decl: NodeDecl, node: Node):
        self.graph, self.decl, self.node = graph, decl, node
        self.wake = asyncio.Event()
        self.edges = {e.source: Edge(e, self.wake) for e in decl.data_inputs}
        self.controls: deque[Chunk] = deque()
        self.current: asyncio.Task | None = None
        self.task: asyncio.Task | None = None
        self.ended = False

    async def emit(self, chunk: Chunk) -> None:
        await self.graph._route(dataclasses.replace(chunk, source=self.decl.name))

    def deliver_control(self, chunk: Chunk, preempt: bool) -> None:
        self.controls.append(chunk)
        if preempt and self.current is not None and not self.current.done():
            self.current.cancel()
        self.wake.set()

    def _next_data(self) -> Chunk | None:
        heads = [e for e in self.edges.values() if e.items]
        return min(heads, key=lambda e: e.items[0][0]).pop() if heads else None

    def _upstream_ended(self) -> bool:
        return all(self.graph._ended(src) for src, e in self.edges.items() if not e.decl.feedback)

    async def loop(self) -> None:
        try:
            await self._loop()
        except FdbError as err:
            raise FdbError(
                f"session graph node '{self.decl.name}': {err.message}", err.hint
            ) from err
        except Exception as err:
            raise FdbError(
                f"session graph node '{self.decl.name}' failed: {type(err).__name__}: {err}",
                "see the server log for the traceback",
            ) from err

    async def _loop(self) -> None:
        while True:
            if self.controls:
                await self.node.on_control(self.controls.popleft(), self.emit)
                continue
            chunk = self._next_data()
            if chunk is not None:
                self.current = asyncio.ensure_future(self.node.on_chunk(chunk, self.emit))
                try:
                    await self._await_current()
                except asyncio.CancelledError:
                    self.current.cancel()
                    raise
                if not self.current.cancelled() and self.current.exception() is not None:
                    raise self.current.exception()
                continue
            if not self.ended and self._upstream_ended() and self.node.idle():
                await self.node.on_end(self.emit)
                self.ended = True
                self.graph._wake_all()
                continue
            self.wake.clear()
            await self.wake.wait()

    async def _await_current(self) -> None:
        """Until ``on_chunk`` in flight is done; a node with ``live_controls`` takes its controls
        meanwhile."""
        while not self.current.done():
            if self.node.live_controls and self.controls:
                await self.node.on_control(self.controls.popleft(), self.emit)
                continue
            self.wake.clear()
            waker = asyncio.ensure_future(self.wake.wait())
            try:
                await asyncio.wait({self.current, waker}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                waker.cancel()


class SessionGraph:
    """One session's graph: ``open()``, ``append()``/``control()`` client chunks, read ``sink``,
    ``end_input()`` + ``wait_done()``, ``close()``."""

    def __init__(self, decl: GraphDecl, nodes: Mapping[str, Node], sink: Sink | None = None):
        missing = [n for n in decl.nodes if n not in nodes]
        if missing:
            raise FdbError(
                f"session graph has no node adapter for {missing}",
                "build the nodes with serving.graph.nodes.build_nodes or pass one per declared "
                "node",
            )
        self.decl = decl
        self.sink = sink if sink is not None else PublishSink()
        self.fenced: set[int] = set()
        self.dropped_fenced = 0
        self.events: list[tuple[str, str]] = []  # ("open" | "close", node): the lifecycle order
        self._runners = {name: _Runner(self, d, nodes[name]) for name, d in decl.nodes.items()}
        self._seq = 0
        self._input_ended = False
        self._progress = asyncio.Event()  # a node ended
        self._audio_sources = {
            n
            for n, formats in decl.publish.items()
            if formats & {"pcm16", "pcm_f32le"} and "session" in formats
        }
        self._pacing = getattr(self.sink, "holds_turn_done", False)
        # (node, kind) marked so far; None: marks are off
        self._marked: set[tuple[str, str]] | None = None
        if os.environ.get("FDB_STAGE_MARKS") == "1":
            self._marked, self.serial = set(), next(_serials)

    # -- lifecycle -------------------------------------------------------------------------
    async def open(self) -> None:
        for name in self.decl.order:
            runner = self._runners[name]
            await runner.node.open()
            self.events.append(("open", name))
            runner.task = asyncio.ensure_future(runner.loop())
            runner.task.add_done_callback(self._on_runner_done)

    def _on_runner_done(self, task: asyncio.Task) -> None:
        if not task.cancelled() and task.exception() is not None:
            self.sink.fail(task.exception())

    async def close(self) -> None:
        for name in reversed(self.decl.order):
            runner = self._runners[name]
            if runner.task is not None and not runner.task.done():
                runner.task.cancel()
                await asyncio.gather(runner.task, return_exceptions=True)
            await runner.node.close()
            self.events.append(("close", name))
        self.sink.close()

    def end_input(self) -> None:
        self._input_ended = True
        self._wake_all()

    async def wait_done(self, timeout_s: float | None = None) -> None:
        """Until every node has ended after ``end_input``; a node's failure is raised."""
        tasks = {r.task for r in self._runners.values() if r.task is not None}
        deadline = None if timeout_s is None else asyncio.get_running_loop().time() + timeout_s
        while not all(r.ended for r in self._runners.values()):
            left = None if deadline is None else deadline - asyncio.get_running_loop().time()
            if left is not None and left <= 0:
                raise FdbError(
                    f"session graph did not drain within {timeout_s} s: nodes "
                    f"{[n for n, r in self._runners.items() if not r.ended]} still running"
                )
            self._progress.clear()
            progress = asyncio.ensure_future(self._progress.wait())
            done, _ = await asyncio.wait(
                {*tasks, progress}, timeout=left, return_when=asyncio.FIRST_COMPLETED
            )
            progress.cancel()
            for task in done & tasks:
                if task.cancelled():
                    raise FdbError("session graph closed before it drained")
                if task.exception() is not None:
                    raise task.exception()
        self.sink.close()

    # -- client side -----------------------------------------------------------------------
    async def append(self, chunk: Chunk) -> bool:
        """A client chunk (pcm16 audio or a session control). False: a blocking edge is full and
        the chunk was rejected whole (nothing of it was queued)."""
        chunk = dataclasses.replace(chunk, source=INPUT)
        for runner in self._runners.values():
            edge = runner.edges.get(INPUT)
            if (
                edge
                and chunk.format in edge.decl.formats
                and edge.full()
                and edge.decl.overflow == "block"
            ):
                if not any(
                    c.reader == runner.decl.name and c.event == chunk.event
                    for c in self.decl.controls_from(INPUT)
                ):
                    return False
        await self._route(chunk)
        return True

    control = append

    def edge(self, reader: str, source: str) -> Edge:
        return self._runners[reader].edges[source]

    # -- routing ---------------------------------------------------------------------------
    def _ended(self, source: str) -> bool:
        return self._input_ended if source == INPUT else self._runners[source].ended

    def _wake_all(self) -> None:
        self._progress.set()
        for runner in self._runners.values():
            runner.wake.set()

    def fence(self, turn: int) -> None:
        """Fence ``turn`` for the graph's lifetime and drop what is queued of it."""
        if turn in self.fenced:
            return
        self.fenced.add(turn)
        for runner in self._runners.values():
            for source, edge in runner.edges.items():
                if source != INPUT:
                    self.dropped_fenced += edge.purge(turn)
            runner.controls = deque(c for c in runner.controls if _keeps(c, turn))
        self.dropped_fenced += self.sink.purge(turn)

    async def release(self, chunk: Chunk) -> None:
        """Route a chunk the sink held (a turn.done), or one it reports for a node (reply.delivered,
        ``chunk.source`` naming that node), to the node's readers; not back to the sink."""
        await self._route(chunk, publish=False)

    def _mark(self, chunk: Chunk) -> None:
        self.mark(chunk.source, chunk.control or chunk.format)

    def mark(self, source: str, kind: str) -> None:
        """A stage mark for ``source``'s first ``kind`` in this graph (under FDB_STAGE_MARKS;
        else nothing): the graph's own chunks are marked as they are routed, and the sink marks
        what it sends (``session audio.delta``: a reply's first audio leaving)."""
        key = (source, kind)
        if self._marked is not None and key not in self._marked:
            self._marked.add(key)
            log.info("stage mark %d %s %s %.6f", self.serial, key[0], key[1], time.time())

    async def _route(self, chunk: Chunk, publish: bool = True) -> None:
        if self._marked is not None and chunk.source != INPUT:
            self._mark(chunk)
        if chunk.control in FENCING and chunk.turn is not None:
            self.fence(chunk.turn)
        if chunk.source != INPUT and chunk.turn in self.fenced and chunk.control not in PASS_FENCE:
            self.dropped_fenced += 1
            return
        if (
            publish
            and self._pacing
            and chunk.control == "turn.done"
            and chunk.source in self._audio_sources
        ):
            self.sink.put(chunk)  # released to the readers once its audio has played
            return
        controlled = set()
        for edge in self.decl.controls_from(chunk.source):
            if edge.event == chunk.event:
                self._runners[edge.reader].deliver_control(chunk, edge.preempt)
                controlled.add(edge.reader)
        if publish and chunk.format in self.decl.publish.get(chunk.source, ()):
            self.sink.put(chunk)
        self._seq += 1
        seq = self._seq
        for reader, edge in self.decl.readers(chunk.source):
            if reader.name not in controlled and chunk.format in edge.formats:
                await self._runners[reader.name].edges[chunk.source].put(seq, chunk, self.fenced)
        if (
            chunk.control == "turn.interrupted"
            and chunk.payload.data.get("started")
            and not self._pacing
        ):
            for source in sorted(
                self._audio_sources
            ):  # without pacing, all it published was delivered
                await self.release(
                    dataclasses.replace(control("reply.delivered", turn=chunk.turn), source=source)
                )
