"""The graph node of a native kind: a native system's whole session as one node of its graph.

A native system's graph is one node of a ``native`` kind (``serving.graph.registry``:
``duplex_baseline``, ``moshi_gpu``), reading ``input``. The native session
(:class:`serving.duplex.session.NativeSession`) runs that graph on the graph runtime
(``serving.graph.runtime.SessionGraph``) like every other session: each accepted append is one
``pcm16`` chunk of the graph's input, and the node's ``on_chunk`` cuts it into units and
processes each unit whose last packet has arrived, at once (the edge is the only queue between
the reader and the unit loop); ``on_end`` processes the padded tail unit and drains, after which
the graph has drained and the session sends ``sglang.input_audio.drained``.

The node is the unit loop, so it renders the session's events itself: its replies
(:class:`~serving.duplex.speaker.SpokenReply`) and ``sglang.unit.done`` go to the session's
outbox in the unit loop's order (its :class:`NativePort`), and the graph publishes nothing of
it (the publish sink only carries a failure of the node to the session). The session's commands
that must take effect before its next event (``response.cancel``, the open responses ended at
``session.close`` and ``context_exhausted``) are calls on the node (:meth:`NativeNode.cancel`,
:meth:`NativeNode.close_open`).

A new native backend is its options class (``serving.graph.kinds``), a :class:`NativeNode`
subclass and one registry entry.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import numpy as np

from fdb.audio import pcm16_to_float
from fdb.errors import FdbError
from serving.duplex.negotiation import NativeConfig
from serving.graph.runtime import Emit, Node, NodeContext
from serving.graph.streams import Chunk
from serving.realtime.outbox import Outbox


@dataclass(frozen=True)
class NativePort:
    """A native node's side of its session (``NodeContext.session``): where its events go,
    the session's granted settings (``config()``), and the session's end at ``max_context_ms``
    (``on_exhausted()``)."""

    outbox: Outbox
    config: Callable[[], NativeConfig]
    on_exhausted: Callable[[], Awaitable[None]]


class NativeNode(Node):
    """A native kind's unit loop as a graph node, made per session as
    ``cls(hub, port, options)`` (``options``: the node's, of the kind's options class).

    ``resample_per_chunk`` (a class attribute): 24 kHz input is resampled per packet, so a unit
    is whole once its packet arrived. A subclass implements :meth:`on_audio` (the accepted
    samples, 16 kHz float32, in order) and ``on_end``.
    """

    resample_per_chunk = False
    consumed_samples: int  # real input that went through units (sglang.input_audio.drained)
    padding_samples: int  # silence added to the last unit

    @classmethod
    def build(cls, ctx: NodeContext) -> NativeNode:
        if not isinstance(ctx.session, NativePort):
            raise FdbError(
                f"node '{ctx.decl.name}' of the native kind '{ctx.decl.kind}' is a whole native "
                "session: it runs in the native session, which builds it",
                "serve the system: its graph speaks the native session protocol",
            )
        return cls(ctx.models, ctx.session, ctx.decl.options)

    async def on_chunk(self, chunk: Chunk, emit: Emit) -> None:
        audio = chunk.payload
        await self.on_audio(
            audio.samples if audio.samples is not None else pcm16_to_float(audio.data)
        )

    async def on_audio(self, samples: np.ndarray) -> None:
        raise NotImplementedError

    def loops(self) -> list[Awaitable[None]]:
        """The node's own loops beside its units (the duplex baseline's reply worker): its
        session runs them as its other tasks, so a failure fails the session (1011)."""
        return []

    @property
    def busy(self) -> bool:
        """A reply is in the works outside the units (the session's idle timeout waits)."""
        return False

    def cancel(self) -> None:
        """``response.cancel``: the reply being spoken ends at the next unit; none, no effect."""

    async def close_open(self, reason: str) -> None:
        """The session closes: every response still open ends cancelled with ``reason``."""
