"""Session graph declarations: the bundled cascade validates, and every rule the guide lists for
the kinds fdb has fails with the guide's message."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest

from fdb.errors import FdbError
from serving.graph.declare import load_graph

CASCADE = Path(__file__).resolve().parents[2] / "serving" / "graph" / "embedded-cascade.yaml"


@pytest.fixture
def cascade() -> dict:
    import yaml

    return yaml.safe_load(CASCADE.read_text(encoding="utf-8"))


def fails(decl: dict, message: str) -> None:
    with pytest.raises(FdbError, match=re.escape(message)):
        load_graph(decl)


def test_bundled_cascade_validates_and_opens_upstream_first(cascade):
    graph = load_graph(CASCADE)
    assert graph.order == ("vad", "turn_detection", "asr", "dialog", "llm", "tts")
    dialog = graph.nodes["dialog"]
    feedback = [e for e in dialog.data_inputs if e.feedback]
    assert [(e.source, e.overflow, sorted(e.formats)) for e in feedback] == [
        ("llm", "drop_oldest", ["text_delta"])
    ]
    assert [(e.source, e.event) for e in dialog.control_inputs] == [
        ("tts", "reply.progress"),
        ("tts", "turn.done"),
        ("tts", "reply.delivered"),
    ]
    tts = graph.nodes["tts"]
    assert [e.formats for e in tts.data_inputs] == [frozenset({"text_delta", "session"})]
    assert graph.publish["tts"] == frozenset({"pcm_f32le", "session"})


def test_guide_shaped_graphs_validate(cascade):
    """turn_detection beside the VAD (session from two sources merges), and the service cascade."""
    decl = copy.deepcopy(cascade)
    decl["session_nodes"]["turn_detection"] = {
        "stages": ["turn_detection"],
        "inputs": ["input:pcm16", "input:session", "vad:session"],
    }
    decl["session_nodes"]["asr"]["inputs"] = ["input", "turn_detection:session"]
    assert load_graph(decl).order.index("turn_detection") < load_graph(decl).order.index("asr")
    service = {
        "session_nodes": {
            "vad": {"stages": ["vad"], "inputs": ["input"]},
            "asr": {
                "kind": "openai_transcription",
                "base_url": "http://127.0.0.1:9/v1",
                "model": "w",
                "inputs": ["input", "vad:session"],
            },
            "dialog": {
                "kind": "dialog",
                "inputs": [
                    "asr",
                    "vad:session",
                    {"source": "llm:text_delta", "feedback": True, "overflow": "drop_oldest"},
                    {"kind": "control", "source": "tts", "event": "turn.done"},
                ],
            },
            "llm": {
                "kind": "openai_chat",
                "base_url": "http://127.0.0.1:9/v1",
                "model": "m",
                "extra_body": {"chat_template_kwargs": {"enable_thinking": False}},
                "inputs": ["dialog"],
            },
            "tts": {
                "kind": "openai_speech",
                "base_url": "http://127.0.0.1:9/v1",
                "model": "t",
                "inputs": ["llm", {"kind": "control", "source": "dialog", "event": "interrupt"}],
            },
        },
        "session_publish": {
            "asr": ["transcript"],
            "dialog": ["session"],
            "tts": ["pcm_f32le", "session"],
        },
    }
    assert load_graph(service).nodes["llm"].kind == "openai_chat"


def nodes(decl: dict) -> dict:
    return decl["session_nodes"]


def test_node_shape_rules(cascade):
    d = copy.deepcopy(cascade)
    nodes(d)["vad"]["kind"] = "dialog"
    fails(d, "a session node names either stages or a kind.")
    d = copy.deepcopy(cascade)
    nodes(d)["vad"] = {"inputs": ["input"]}
    fails(d, "a session node names either stages or a kind.")
    d = copy.deepcopy(cascade)
    nodes(d)["vad"]["threshold"] = 0.4
    fails(d, "options ['threshold'] belong to a node of a kind.")
    d = copy.deepcopy(cascade)
    nodes(d)["asr"]["kind"] = "nope"
    fails(d, "unknown component kind 'nope'.")
    d = copy.deepcopy(cascade)
    nodes(d)["llm"]["top_p"] = 0.9
    fails(d, "Extra inputs are not permitted")
    d = copy.deepcopy(cascade)
    nodes(d)["llm"] = {"kind": "openai_chat", "model": "m", "inputs": ["dialog"]}
    fails(d, "Field required")
    d = copy.deepcopy(cascade)
    nodes(d)["Bad"] = nodes(d).pop("tts")
    fails(d, "String should match pattern '^[a-z][a-z0-9_]*$'")
    d = copy.deepcopy(cascade)
    nodes(d)["input"] = {"stages": ["vad"], "inputs": ["vad"]}
    fails(d, "'input' names the session input, not a node.")
    d = copy.deepcopy(cascade)
    nodes(d)["vad"]["stages"] = ["asr"]
    fails(d, "no stage group serves the stages ['asr'].")


def test_option_rules(cascade):
    d = copy.deepcopy(cascade)
    nodes(d)["llm"] = {
        "kind": "openai_chat",
        "base_url": "ws://h/v1",
        "model": "m",
        "inputs": ["dialog"],
    }
    fails(d, "String should match pattern '^https?://'")
    nodes(d)["llm"].update(base_url="http://h/v1", extra_body={"model": "x", "top_k": 1})
    fails(d, "extra_body cannot set ['model']")
    nodes(d)["llm"].update(extra_body={}, temperature=3)
    fails(d, "session_nodes.llm: Input should be less than or equal to 2 (temperature)")
    d = copy.deepcopy(cascade)
    nodes(d)["asr"] = {
        "kind": "realtime_transcription",
        "base_url": "http://h",
        "model": "m",
        "inputs": ["input"],
    }
    fails(d, "String should match pattern '^wss?://'")


def test_input_rules(cascade):
    d = copy.deepcopy(cascade)
    d["session_nodes"] = {
        "a": {"kind": "whisper_transcription", "inputs": ["b:transcript"]},
        "b": {"kind": "whisper_transcription", "inputs": ["a:transcript"]},
    }
    fails(d, "no node reads 'input'.")
    d = copy.deepcopy(cascade)
    nodes(d)["asr"]["inputs"].append("asr")
    fails(d, "node 'asr' reads itself.")
    d = copy.deepcopy(cascade)
    nodes(d)["asr"]["inputs"].append("ghost:pcm16")
    fails(d, "node 'asr' reads unknown inputs ['ghost'].")
    d = copy.deepcopy(cascade)
    nodes(d)["asr"]["inputs"].append("vad:transcript")
    fails(d, "node 'asr' cannot take ['vad:transcript'].")
    d = copy.deepcopy(cascade)
    nodes(d)["llm"]["inputs"].append("input:pcm16")  # llama_chat consumes messages only
    fails(d, "node 'llm' cannot take ['input:pcm16'].")
    d = copy.deepcopy(cascade)
    nodes(d)["dialog"]["inputs"] = ["asr", "vad:session"]
    fails(d, "no input of node 'dialog' produces ['text_delta'].")
    d = copy.deepcopy(cascade)
    nodes(d)["asr2"] = copy.deepcopy(nodes(d)["asr"])
    nodes(d)["dialog"]["inputs"].append("asr2")
    fails(
        d,
        "node 'dialog' takes transcript from ['asr', 'asr2']; two nodes never send the same format "
        "to one reader.",
    )
    d = copy.deepcopy(cascade)
    nodes(d)["asr"]["inputs"] = [
        "input:pcm16",
        {"source": "input:session", "capacity": 8},
        "vad:session",
    ]
    fails(d, "node 'asr' bounds its edge from 'input' twice.")
    d = copy.deepcopy(cascade)
    nodes(d)["llm"]["inputs"].append(
        {"kind": "control", "source": "vad", "event": "no_such_format"}
    )
    fails(d, "node 'llm' cannot take ['vad:no_such_format'].")


def test_cycle_and_feedback_rules(cascade):
    d = copy.deepcopy(cascade)
    inputs = nodes(d)["dialog"]["inputs"]
    feedback = next(k for k, i in enumerate(inputs) if isinstance(i, dict) and i.get("feedback"))
    inputs[feedback] = "llm:text_delta"
    fails(
        d,
        "nodes ['dialog', 'llm'] form a cycle of data edges; declare the input that closes it with "
        "feedback: true.",
    )
    inputs[feedback] = {"source": "llm:text_delta", "feedback": True}
    fails(d, "the feedback edge from 'llm' into 'dialog' must not block.")


def test_control_and_turn_rules(cascade):
    d = copy.deepcopy(cascade)
    nodes(d)["dialog"]["inputs"] += [
        {"kind": "control", "source": "llm", "event": "reply.progress"}
    ]
    fails(d, "node 'dialog' takes reply.progress from ['tts', 'llm']; one source reports it.")
    d = copy.deepcopy(cascade)
    d["session_publish"]["ghost"] = ["session"]
    fails(d, "publish names unknown nodes ['ghost'].")
    d = copy.deepcopy(cascade)
    d["session_publish"]["asr"] = ["transcript", "pcm16"]
    fails(d, "node 'asr' does not produce ['pcm16'].")
    d = copy.deepcopy(cascade)
    d["session_publish"]["tts"] = ["pcm_f32le"]
    fails(d, "no published node ends turns.")
    d = copy.deepcopy(cascade)
    d["session_publish"]["llm"] = ["text_delta", "session"]
    fails(d, "turns end twice: ['llm', 'tts'] all publish turn.done.")
    d = copy.deepcopy(cascade)
    del d["session_publish"]["dialog"]
    fails(d, "nodes ['dialog'] open turns and must publish 'session'.")
    d = copy.deepcopy(cascade)
    nodes(d)["dialog2"] = copy.deepcopy(nodes(d)["dialog"])
    fails(d, "nodes ['dialog', 'dialog2'] open turns; a session has one node of kind 'dialog'.")


def test_the_dialogs_interrupt_must_reach_the_audio_node(cascade):
    message = "node 'dialog' waits for reply.delivered after it interrupts a reply:"
    d = copy.deepcopy(cascade)
    nodes(d)["tts"]["inputs"] = ["llm"]  # tts no longer takes the interrupt
    fails(d, message)
    d = copy.deepcopy(cascade)
    nodes(d)["dialog"]["inputs"] = [
        i
        for i in nodes(d)["dialog"]["inputs"]  # it no longer hears tts's session
        if not (isinstance(i, dict) and i.get("source") == "tts")
    ]
    fails(d, message)


def test_a_native_graph_is_one_native_node_and_speaks_the_native_protocol(cascade):
    """A node of a native kind is the whole session: the graph's only node, publishing all it
    produces; such a graph speaks the native protocol, any other the turn-based one."""
    native = {
        "session_nodes": {"duplex": {"kind": "duplex_baseline", "inputs": ["input"]}},
        "session_publish": {"duplex": ["pcm_f32le", "session"]},
    }
    graph = load_graph(native)
    assert graph.protocol == "native" and graph.native_node is graph.nodes["duplex"]
    assert load_graph(CASCADE).protocol == "turn-based" and load_graph(CASCADE).native_node is None
    crowded = copy.deepcopy(native)
    crowded["session_nodes"]["vad"] = {"stages": ["vad"], "inputs": ["input"]}
    fails(
        crowded,
        "node 'duplex' of the native kind 'duplex_baseline' is the whole session: it is the "
        "graph's only node (drop ['vad']).",
    )
    quiet = {**native, "session_publish": {"duplex": ["session"]}}
    fails(
        quiet,
        "node 'duplex' of the native kind 'duplex_baseline' is the whole session: publish all "
        "of it (duplex: ['pcm_f32le', 'session']).",
    )
    fails(
        {
            "session_nodes": {"m": {"kind": "moshi_gpu", "max_batch": 4, "inputs": ["input"]}},
            "session_publish": {"m": ["pcm_f32le", "session"]},
        },
        "session_nodes.m: Field required (weights)",
    )
