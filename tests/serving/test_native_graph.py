"""Native systems are session graphs too: their graph is one node of a native kind of the one
registry, the graph says which session protocol a system speaks, and the endpoint starts that
protocol's session (no server: the declarations and the choice only)."""

from __future__ import annotations

import re

import pytest

from fdb.errors import FdbError
from serving.duplex.engine import DuplexEngine
from serving.duplex.native import MoshiSessionEngine
from serving.duplex.node import NativeNode
from serving.duplex.session import NativeSession
from serving.endpoint import SESSIONS
from serving.graph import registry
from serving.graph.nodes import build_nodes
from serving.realtime.graph_session import GraphRealtimeSession
from serving.systems import SYSTEMS, resolve_system


def test_each_system_declares_a_graph_whose_protocol_picks_its_session():
    protocols = {name: system.graph().protocol for name, system in SYSTEMS.items()}
    assert protocols == {
        "embedded-cascade": "turn-based",
        "duplex-baseline": "native",
        "gpu-native": "native",
        "gpu-tts": "turn-based",
    }
    assert SESSIONS == {"native": NativeSession, "turn-based": GraphRealtimeSession}
    assert set(SESSIONS) == set(registry.PROTOCOLS)
    for name, system in SYSTEMS.items():  # duplex settings go with a native graph, only
        assert (system.duplex is not None) == (protocols[name] == "native"), name


def test_the_native_kinds_are_registry_entries_whose_graph_nodes_are_their_unit_loops():
    baseline = SYSTEMS["duplex-baseline"].graph().native_node
    moshi = SYSTEMS["gpu-native"].graph().native_node
    assert (baseline.kind, moshi.kind) == ("duplex_baseline", "moshi_gpu")
    assert registry.node_class(baseline.kind, ()) is DuplexEngine
    assert registry.node_class(moshi.kind, ()) is MoshiSessionEngine
    assert issubclass(DuplexEngine, NativeNode) and issubclass(MoshiSessionEngine, NativeNode)
    assert registry.load_native(baseline.kind, baseline.options) is None  # no model of its own
    assert moshi.options.weights == {"load_format": "dummy", "preset": "moshi-7b"}
    assert (moshi.options.device, moshi.options.max_batch) == ("cuda", 32)
    # one graph runtime runs every kind; the native node's input edge holds a whole session
    kinds, _stages = registry.graph_adapters()
    assert {"duplex_baseline", "moshi_gpu"} <= set(kinds)
    for node in (baseline, moshi):
        (edge,) = node.data_inputs
        assert (edge.source, edge.capacity, edge.overflow) == ("input", 65536, "block")
    with pytest.raises(ValueError, match="not a native kind"):
        registry.load_native("llama_chat", None)


def test_a_native_node_is_built_by_its_session_only():
    graph = SYSTEMS["duplex-baseline"].graph()
    with pytest.raises(FdbError, match="is a whole native session: it runs in the native session"):
        build_nodes(graph, None)


@pytest.mark.parametrize(
    ("name", "overrides", "says"),
    [
        ("embedded-cascade", [("duplex", {})], "duplex settings belong to a native system"),
        (
            "embedded-cascade",
            [
                ("session_nodes", {"d": {"kind": "duplex_baseline", "inputs": ["input"]}}),
                ("session_publish", {"d": ["pcm_f32le", "session"]}),
            ],
            "node 'd' of the native kind 'duplex_baseline' speaks the native session protocol: "
            "set duplex",
        ),
        (
            "gpu-native",
            [("duplex.unit_ms_choices", [80, 200])],
            "a native model speaks in 80 ms frames: set unit_ms 80 and unit_ms_choices [80]",
        ),
        (
            "gpu-native",
            [("duplex.model", {"kind": "moshi_gpu"})],
            "duplex: model: a native model is the node of the system's graph",
        ),
        (
            "duplex-baseline",
            [("duplex.end_of_turn_ms", 500)],
            "duplex: end_of_turn_ms: the duplex baseline's policy is its node's options, not a "
            "duplex setting: session_nodes: {duplex: {end_of_turn_ms: ...}} "
            "(--session_nodes.duplex.end_of_turn_ms)",
        ),
        (
            "gpu-native",
            [("session_nodes.moshi.max_batch", 1000)],
            "session_nodes.moshi: Input should be less than or equal to 256 (max_batch)",
        ),
    ],
)
def test_a_native_systems_declaration_is_checked_when_it_loads(name, overrides, says):
    with pytest.raises(FdbError, match=re.escape(says)):
        resolve_system(name, overrides=overrides)


def test_an_override_reaches_the_native_node_and_another_native_kind_replaces_it():
    system = resolve_system("gpu-native", overrides=[("session_nodes.moshi.max_batch", 8)])
    node = system.graph().native_node
    assert node.options.max_batch == 8 and node.options.weights["preset"] == "moshi-7b"
    swapped = resolve_system(
        "duplex-baseline",
        overrides=[
            (
                "session_nodes",
                {
                    "duplex": {
                        "kind": "moshi_gpu",
                        "weights": {"load_format": "dummy", "preset": "moshi-7b"},
                        "inputs": ["input"],
                    }
                },
            ),
            ("duplex.unit_ms", 80),
            ("duplex.unit_ms_choices", [80]),
        ],
    )
    assert swapped.graph().native_node.kind == "moshi_gpu"


def test_the_duplex_baselines_policy_is_its_nodes_options():
    system = resolve_system(
        "duplex-baseline",
        overrides=[
            ("session_nodes.duplex.end_of_turn_ms", 500),
            ("session_nodes.duplex.turn_detection", "semantic"),
        ],
    )
    options = system.graph().native_node.options
    assert (options.end_of_turn_ms, options.turn_detection, options.eagerness) == (
        500,
        "semantic",
        "medium",
    )
    assert system.duplex.model_dump() == {
        "unit_ms": 1000,
        "unit_ms_choices": (80, 200, 1000),
        "backchannel": True,
        "max_context_ms": 600_000,
    }
