"""Typed declaration of a session graph (``session_nodes`` + ``session_publish``) and its
validation at load, with the guide's error messages.

``load_graph(mapping_or_yaml_path)`` returns a :class:`GraphDecl`: nodes in declaration order,
their resolved data edges (source, formats, capacity, overflow, feedback) and control edges
(source, event, preempt), the published formats per node, the open order (upstream first) and
the session protocol the graph speaks. Every rule violation raises :class:`fdb.errors.FdbError`
whose message holds the guide's text.

A graph with a node of a ``native`` kind (``serving.graph.registry``: duplex_baseline,
moshi_gpu) speaks the native session protocol: that node is the whole session (the graph's
only node, reading ``input`` and publishing its pcm_f32le and session; its input edge holds
:data:`NATIVE_INPUT_CAPACITY` chunks unless declared), and the native session runs that graph
(``serving.duplex.session``). Any other graph speaks the turn-based protocol
(``serving.realtime.graph_session``). Both run on the graph runtime
(``serving.graph.runtime``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fdb.errors import FdbError
from serving.graph import registry
from serving.graph.kinds import KindOptions
from serving.graph.streams import CONTROLS_IN, CONTROLS_OUT, FORMATS

INPUT = "input"
CASCADE = Path(__file__).resolve().parent / "embedded-cascade.yaml"  # the bundled cascade
INPUT_FORMATS = frozenset({"pcm16", "session"})
NAME_PATTERN = r"^[a-z][a-z0-9_]*$"
DEFAULT_CAPACITY = 64
# A native node's input edge, unless declared: room for a whole session's packets (600 s of
# 10 ms packets), as its unit loop takes each packet the moment it is there and never drops one.
NATIVE_INPUT_CAPACITY = 65536
HINT = (
    "fix session_nodes / session_publish in the launch config (see docs/formats.md, 'Session "
    "graph')"
)


def _fail(message: str) -> FdbError:
    return FdbError(message, HINT)


class BoundedInput(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    source: str
    capacity: int = Field(DEFAULT_CAPACITY, ge=1)
    overflow: Literal["block", "drop_oldest"] = "block"
    feedback: bool = False


class ControlInput(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: Literal["control"]
    source: str
    event: str
    preempt: bool = False


@dataclass(frozen=True)
class DataEdge:
    source: str
    reader: str
    formats: frozenset[str]
    capacity: int = DEFAULT_CAPACITY
    overflow: str = "block"
    feedback: bool = False


@dataclass(frozen=True)
class ControlEdge:
    source: str
    reader: str
    event: str
    preempt: bool = False


@dataclass(frozen=True)
class NodeDecl:
    name: str
    kind: str | None  # None for a stage route
    stages: tuple[str, ...]
    options: KindOptions | None
    consumes: frozenset[str]
    produces: frozenset[str]
    required: frozenset[str]
    data_inputs: tuple[DataEdge, ...] = ()
    control_inputs: tuple[ControlEdge, ...] = ()


@dataclass(frozen=True)
class GraphDecl:
    nodes: dict[str, NodeDecl]
    publish: dict[str, frozenset[str]]
    order: tuple[str, ...]  # open order: upstream first
    # the session protocol it speaks (registry.PROTOCOLS): "native" when its one node is of a
    # native kind, else "turn-based"
    protocol: str = "turn-based"

    @property
    def native_node(self) -> NodeDecl | None:
        """The node of a native graph (the whole session); None for a turn-based graph."""
        return next(iter(self.nodes.values())) if self.protocol == "native" else None

    def readers(self, source: str) -> list[tuple[NodeDecl, DataEdge]]:
        return [(n, e) for n in self.nodes.values() for e in n.data_inputs if e.source == source]

    def controls_from(self, source: str) -> list[ControlEdge]:
        return [e for n in self.nodes.values() for e in n.control_inputs if e.source == source]


def _pydantic_message(err: ValidationError) -> str:
    first = err.errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    return f"{first['msg']} ({where})" if where else first["msg"]


def _node_shape(
    name: str, raw: Mapping[str, Any]
) -> tuple[str | None, tuple[str, ...], KindOptions | None]:
    if not re.match(NAME_PATTERN, name):
        raise _fail(f"session_nodes.{name}: String should match pattern '{NAME_PATTERN}'")
    if name == INPUT:
        raise _fail("'input' names the session input, not a node.")
    if ("stages" in raw) == ("kind" in raw):
        raise _fail(f"session_nodes.{name}: a session node names either stages or a kind.")
    options = {k: v for k, v in raw.items() if k not in ("kind", "stages", "inputs")}
    if "stages" in raw:
        if options:
            raise _fail(
                f"session_nodes.{name}: options {sorted(options)} belong to a node of a kind."
            )
        stages = tuple(raw["stages"] or ())
        unknown = [s for s in stages if registry.stage(s) is None]
        if unknown or not stages:
            raise _fail(
                f"session_nodes.{name}: no stage group serves the stages {unknown or list(stages)}."
            )
        return None, stages, None
    kind = registry.component(raw["kind"])
    if kind is None:
        raise _fail(f"session_nodes.{name}: unknown component kind '{raw['kind']}'.")
    try:
        return kind.name, (), kind.options(**options)
    except ValidationError as err:
        raise _fail(f"session_nodes.{name}: {_pydantic_message(err)}") from None


def _formats_of(
    name: str, kind: str | None, stages: tuple[str, ...]
) -> tuple[frozenset, frozenset, frozenset]:
    if kind is not None:
        k = registry.component(kind)
        return k.consumes, k.produces, k.required
    first, last = registry.stage(stages[0]), registry.stage(stages[-1])
    return first.consumes, last.produces, first.consumes - {"session"}


def _parse_input(
    name: str, item: Any, capacity: int = DEFAULT_CAPACITY
) -> BoundedInput | ControlInput:
    try:
        if isinstance(item, str):
            return BoundedInput(source=item, capacity=capacity)
        if isinstance(item, Mapping) and item.get("kind") == "control":
            return ControlInput(**item)
        if isinstance(item, Mapping):
            return BoundedInput(**{"capacity": capacity, **item})
    except ValidationError as err:
        raise _fail(f"session_nodes.{name}.inputs: {_pydantic_message(err)}") from None
    raise _fail(
        f"session_nodes.{name}.inputs: {item!r} is neither a source, a bounded input nor a "
        "control edge"
    )


@dataclass
class _Shape:
    name: str
    kind: str | None
    stages: tuple[str, ...]
    options: KindOptions | None
    consumes: frozenset[str]
    produces: frozenset[str]
    required: frozenset[str]
    inputs: list[BoundedInput | ControlInput]


def _split(source: str) -> tuple[str, str | None]:
    node, _, fmt = source.partition(":")
    return node, (fmt or None)


def _check_sources(shape: _Shape, shapes: dict[str, _Shape]) -> None:
    sources = [_split(i.source)[0] for i in shape.inputs]
    if shape.name in sources:
        raise _fail(f"node '{shape.name}' reads itself.")
    unknown = [s for s in sources if s != INPUT and s not in shapes]
    if unknown:
        raise _fail(f"node '{shape.name}' reads unknown inputs {unknown}.")


def _resolve_data(shape: _Shape, shapes: dict[str, _Shape]) -> tuple[DataEdge, ...]:
    """One edge per source: the union of the formats its inputs take, with one bound."""
    formats: dict[str, set[str]] = {}
    bounds: dict[str, BoundedInput] = {}
    for item in shape.inputs:
        if isinstance(item, ControlInput):
            continue
        source, fmt = _split(item.source)
        produced = INPUT_FORMATS if source == INPUT else shapes[source].produces
        taken = {fmt} if fmt else produced & shape.consumes
        if (fmt and (fmt not in produced or fmt not in shape.consumes)) or not taken:
            raise _fail(f"node '{shape.name}' cannot take {[item.source]}.")
        bound = (item.capacity, item.overflow, item.feedback)
        if (
            source in bounds
            and (bounds[source].capacity, bounds[source].overflow, bounds[source].feedback) != bound
        ):
            raise _fail(f"node '{shape.name}' bounds its edge from '{source}' twice.")
        if item.feedback and item.overflow == "block":
            raise _fail(f"the feedback edge from '{source}' into '{shape.name}' must not block.")
        bounds[source] = item
        formats.setdefault(source, set()).update(taken)
    return tuple(
        DataEdge(
            s, shape.name, frozenset(f), bounds[s].capacity, bounds[s].overflow, bounds[s].feedback
        )
        for s, f in formats.items()
    )


def _check_formats(shape: _Shape, edges: tuple[DataEdge, ...]) -> None:
    senders: dict[str, list[str]] = {}
    for edge in edges:
        for fmt in sorted(edge.formats):
            senders.setdefault(fmt, []).append(edge.source)
    for fmt, sources in senders.items():
        if (
            len(sources) > 1 and fmt != "session"
        ):  # controls merge (turn_detection reads input's and vad's)
            raise _fail(
                f"node '{shape.name}' takes {fmt} from {sources}; two nodes never send the same "
                "format to one reader."
            )
    missing = sorted(shape.required - set(senders))
    if missing:
        raise _fail(f"no input of node '{shape.name}' produces {missing}.")


def _resolve_controls(shape: _Shape, shapes: dict[str, _Shape]) -> tuple[ControlEdge, ...]:
    edges = tuple(
        ControlEdge(_split(i.source)[0], shape.name, i.event, i.preempt)
        for i in shape.inputs
        if isinstance(i, ControlInput)
    )
    progress = [e.source for e in edges if e.event == "reply.progress"]
    if len(progress) > 1:
        raise _fail(
            f"node '{shape.name}' takes reply.progress from {progress}; one source reports it."
        )
    for edge in edges:
        produced = INPUT_FORMATS if edge.source == INPUT else shapes[edge.source].produces
        is_control = edge.event in CONTROLS_IN or edge.event in CONTROLS_OUT
        needs = "session" if is_control else edge.event
        if needs not in FORMATS or needs not in produced:
            raise _fail(f"node '{shape.name}' cannot take {[f'{edge.source}:{edge.event}']}.")
    return edges


def _cycle_nodes(names: list[str], edges: list[DataEdge]) -> list[str] | None:
    """Nodes of a cycle of non-feedback data edges (declaration order), or None: strip nodes
    without a live upstream, then nodes without a live downstream; what remains lies on cycles."""
    live = set(names)
    graph = [e for e in edges if not e.feedback and e.source != INPUT]
    while True:
        roots = {n for n in live if not any(e.reader == n and e.source in live for e in graph)}
        if not roots:
            break
        live -= roots
    if not live:
        return None
    # keep only the nodes that also reach a live node downstream (on the cycle, not behind it)
    while True:
        dead = {n for n in live if not any(e.source == n and e.reader in live for e in graph)}
        if not dead:
            break
        live -= dead
    return [n for n in names if n in live]


def _open_order(names: list[str], edges: list[DataEdge]) -> tuple[str, ...]:
    """Upstream first over non-feedback data edges; ties keep declaration order."""
    graph = [e for e in edges if not e.feedback and e.source != INPUT]
    order: list[str] = []
    while len(order) < len(names):
        ready = [
            n
            for n in names
            if n not in order and all(e.source in order for e in graph if e.reader == n)
        ]
        order.append(ready[0])
    return tuple(order)


def _check_publish(
    publish: Mapping[str, Any], nodes: dict[str, NodeDecl]
) -> dict[str, frozenset[str]]:
    unknown = [n for n in publish if n not in nodes]
    if unknown:
        raise _fail(f"publish names unknown nodes {unknown}.")
    out: dict[str, frozenset[str]] = {}
    for name, formats in publish.items():
        formats = [formats] if isinstance(formats, str) else list(formats or [])
        extra = [f for f in formats if f not in nodes[name].produces]
        if extra:
            raise _fail(f"node '{name}' does not produce {extra}.")
        out[name] = frozenset(formats)
    openers = [n.name for n in nodes.values() if n.kind and registry.component(n.kind).opens_turns]
    if len(openers) > 1:
        raise _fail(f"nodes {openers} open turns; a session has one node of kind 'dialog'.")
    if not openers:
        return out
    enders = [
        n.name
        for n in nodes.values()
        if n.kind and registry.component(n.kind).ends_turns and "session" in out.get(n.name, ())
    ]
    if not enders:
        raise _fail("no published node ends turns.")
    if len(enders) > 1:
        raise _fail(f"turns end twice: {enders} all publish turn.done.")
    unpublished = [n for n in openers if "session" not in out.get(n, ())]
    if unpublished:
        raise _fail(f"nodes {unpublished} open turns and must publish 'session'.")
    _check_interrupt_reaches_audio(nodes[openers[0]], nodes, out)
    return out


def _check_interrupt_reaches_audio(
    dialog: NodeDecl, nodes: dict[str, NodeDecl], publish: dict[str, frozenset[str]]
) -> None:
    """The dialog's interrupt must reach a node that publishes audio, on a control edge, and the
    dialog must read that node's session (where reply.delivered and turn.done come from)."""
    audio = {n for n, formats in publish.items() if formats & {"pcm16", "pcm_f32le"}}
    takers = {
        e.reader
        for n in nodes.values()
        for e in n.control_inputs
        if e.source == dialog.name and e.event == "interrupt"
    }
    if not audio and not takers:
        return
    heard = {e.source for e in dialog.data_inputs if "session" in e.formats}
    heard |= {e.source for e in dialog.control_inputs}
    if not audio & takers & heard:
        raise _fail(
            f"node '{dialog.name}' waits for reply.delivered after it interrupts a reply: no node "
            f"that publishes audio ({sorted(audio)}) takes its interrupt on a control edge with "
            f"its session read by '{dialog.name}'."
        )


def _check_native(nodes: dict[str, NodeDecl], publish: dict[str, frozenset[str]]) -> str:
    """The protocol of the graph: a node of a native kind is the whole session, so it is the
    only node and publishes everything it produces."""
    native = [n for n in nodes.values() if n.kind and registry.component(n.kind).native]
    if not native:
        return "turn-based"
    node = native[0]
    if len(nodes) > 1:
        raise _fail(
            f"node '{node.name}' of the native kind '{node.kind}' is the whole session: it is "
            f"the graph's only node (drop {[n for n in nodes if n != node.name]})."
        )
    if publish.get(node.name, frozenset()) != node.produces:
        raise _fail(
            f"node '{node.name}' of the native kind '{node.kind}' is the whole session: publish "
            f"all of it ({node.name}: {sorted(node.produces)})."
        )
    return "native"


def _shapes(session_nodes: Mapping[str, Any]) -> dict[str, _Shape]:
    shapes: dict[str, _Shape] = {}
    for name, raw in session_nodes.items():
        raw = dict(raw or {})
        kind, stages, options = _node_shape(str(name), raw)
        consumes, produces, required = _formats_of(name, kind, stages)
        inputs = raw.get("inputs") or []
        if not isinstance(inputs, list) or not inputs:
            raise _fail(
                f"session_nodes.{name}.inputs: List should have at least 1 item after validation"
            )
        native = kind is not None and registry.component(kind).native
        capacity = NATIVE_INPUT_CAPACITY if native else DEFAULT_CAPACITY
        shapes[name] = _Shape(
            name,
            kind,
            stages,
            options,
            consumes,
            produces,
            required,
            [_parse_input(name, i, capacity) for i in inputs],
        )
    return shapes


def validate_graph(
    session_nodes: Mapping[str, Any], session_publish: Mapping[str, Any]
) -> GraphDecl:
    """The declaration, validated in the guide's order of rules."""
    shapes = _shapes(session_nodes)
    for shape in shapes.values():
        _check_sources(shape, shapes)
    if not any(_split(i.source)[0] == INPUT for s in shapes.values() for i in s.inputs):
        raise _fail("no node reads 'input'.")
    nodes: dict[str, NodeDecl] = {}
    for shape in shapes.values():
        data = _resolve_data(shape, shapes)
        _check_formats(shape, data)
        nodes[shape.name] = NodeDecl(
            shape.name,
            shape.kind,
            shape.stages,
            shape.options,
            shape.consumes,
            shape.produces,
            shape.required,
            data,
            _resolve_controls(shape, shapes),
        )
    names = list(nodes)
    edges = [e for n in nodes.values() for e in n.data_inputs]
    cycle = _cycle_nodes(names, edges)
    if cycle:
        raise _fail(
            f"nodes {cycle} form a cycle of data edges; declare the input that closes it with "
            "feedback: true."
        )
    publish = _check_publish(session_publish or {}, nodes)
    protocol = _check_native(nodes, publish)
    return GraphDecl(nodes, publish, _open_order(names, edges), protocol)


def load_graph(source: Mapping[str, Any] | str | Path) -> GraphDecl:
    """From a mapping with ``session_nodes`` and ``session_publish``, or a YAML file holding
    them."""
    if isinstance(source, (str, Path)):
        path = Path(source)
        try:
            source = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError) as err:
            raise FdbError(f"{path}: cannot read the session graph: {err}", HINT) from None
    if "session_nodes" not in source:
        raise _fail("session_nodes: Field required")
    if "session_publish" not in source:
        raise _fail("session_publish: Field required")
    return validate_graph(source["session_nodes"] or {}, source["session_publish"] or {})


@cache
def cascade() -> GraphDecl:
    """The bundled embedded cascade (``embedded-cascade.yaml``), loaded once."""
    return load_graph(CASCADE)
