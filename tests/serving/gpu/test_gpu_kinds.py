"""The GPU kinds' options (weights parsed by WeightSource, device, dtype, limits) and the
gpu-cascade system: its launch file, its graph, and overrides of single node options."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from fdb.errors import FdbError
from serving.graph.declare import load_graph
from serving.graph.kinds import CausalLmGpuOptions, WhisperGpuOptions
from serving.graph.registry import component
from serving.systems import PROFILES, get_system, resolve_system

DUMMY_WHISPER = {"load_format": "dummy", "preset": "whisper-large-v3"}


def test_the_kinds_are_registered_with_their_formats():
    assert component("whisper_gpu").consumes == {"pcm16", "session"}
    assert component("whisper_gpu").produces == {"transcript"}
    assert component("causal_lm_gpu").produces == {"text_delta", "session"}
    assert component("causal_lm_gpu").ends_turns


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"weights": {"load_format": "dummy"}}, "dummy weights need a preset"),
        (
            {"weights": {"load_format": "checkpoint", "path": "/x"}},
            "a checkpoint needs path and sha256",
        ),
        (
            {"weights": {"load_format": "dummy", "preset": "qwen3-4b"}},
            "preset 'qwen3-4b' is not a model of this kind",
        ),
        ({"weights": DUMMY_WHISPER, "device": "tpu"}, "String should match pattern"),
        ({"weights": DUMMY_WHISPER, "dtype": "int8"}, "Input should be"),
        ({"weights": DUMMY_WHISPER, "max_batch": 0}, "greater than or equal to 1"),
        ({"weights": DUMMY_WHISPER, "beam_size": 4}, "Extra inputs are not permitted"),
        ({}, "Field required"),
    ],
)
def test_whisper_gpu_options_are_checked(options, says):
    with pytest.raises(ValueError, match=says):
        WhisperGpuOptions(**options)


def test_causal_lm_options_parse_their_weights():
    options = CausalLmGpuOptions(
        weights={
            "load_format": "dummy",
            "preset": "qwen3-4b",
            "overrides": {"num_hidden_layers": 2},
        },
        device="cuda:1",
        max_batch=16,
    )
    source = options.source("llm")
    assert (
        source.dummy
        and source.preset == "qwen3-4b"
        and source.overrides == {"num_hidden_layers": 2}
    )
    assert options.max_new_tokens == 48 and options.temperature == 0.0


def test_gpu_cascade_is_a_system_and_its_launch_file():
    system = get_system("gpu-cascade")
    assert system.name == "gpu-cascade" and system.model == "fdb/gpu-cascade"
    assert resolve_system("embedded-cascade", PROFILES["gpu-cascade"]) == system
    graph = load_graph(
        {"session_nodes": system.session_nodes, "session_publish": system.session_publish}
    )
    kinds = {name: node.kind for name, node in graph.nodes.items()}
    assert kinds["asr"] == "whisper_gpu" and kinds["llm"] == "causal_lm_gpu"
    assert graph.nodes["asr"].options.weights["preset"] == "whisper-large-v3"
    assert (
        get_system("embedded-cascade").session_nodes is None
    )  # the default keeps its bundled graph


def test_an_override_sets_one_leaf_of_a_node_and_a_wrong_one_names_node_and_field():
    system = resolve_system(
        "gpu-cascade",
        overrides=[
            ("session_nodes.llm.max_batch", 8),
            ("session_nodes.llm.weights.overrides.num_hidden_layers", 2),
        ],
    )
    llm = system.session_nodes["llm"]
    assert llm["max_batch"] == 8 and llm["weights"] == {
        "load_format": "dummy",
        "preset": "qwen3-4b",
        "overrides": {"num_hidden_layers": 2},
    }
    assert llm["kind"] == "causal_lm_gpu" and llm["inputs"][0] == "dialog"
    with pytest.raises(
        FdbError, match=r"session_nodes\.asr: Extra inputs are not permitted \(beam_size\)"
    ):
        resolve_system("gpu-cascade", overrides=[("session_nodes.asr.beam_size", 4)])


def test_session_nodes_need_session_publish():
    with pytest.raises(FdbError, match="session_nodes and session_publish go together"):
        resolve_system(
            "embedded-cascade",
            overrides=[("session_nodes", {"vad": {"stages": ["vad"], "inputs": ["input"]}})],
        )


def _gpu_options(system) -> tuple:
    """A gpu-cascade system's recognizer and reply model node options and its CSM backend."""
    graph = load_graph(
        {"session_nodes": system.session_nodes, "session_publish": system.session_publish}
    )
    return graph.nodes["asr"].options, graph.nodes["llm"].options, system.backends.tts


def test_the_graph_options_are_on_by_default_and_gpu_cascade_no_graphs_turns_them_off(tmp_path):
    """Whisper's encoder graphs and the prefill graphs of the reply model and CSM are on by
    default (measured on a GPU: docs/gpu.md); ``gpu_cascade.py --no-graphs`` writes a launch file
    that turns all three off (the A/B), and it loads."""
    from benchmarks.gpu_cascade import launch_file

    def graph_options(system) -> tuple[bool, bool, bool]:
        asr, llm, tts = _gpu_options(system)
        return asr.encoder_graphs, llm.prefill_graphs, tts.prefill_graphs

    assert graph_options(get_system("gpu-cascade")) == (True, True, True)
    path = launch_file(tmp_path / "launch.yaml", 32, "cuda", False, 24, graphs=False)
    assert graph_options(resolve_system("embedded-cascade", path)) == (False, False, False)


def test_the_decode_loops_overlap_by_default_and_gpu_cascade_no_overlap_turns_it_off(tmp_path):
    """The recognizer's and the reply model's decode loops launch a step before they read the
    last by default; ``gpu_cascade.py --no-overlap`` writes a launch file with both off (the A/B),
    and the engines are told apart by it (two launch files never share an engine)."""
    from benchmarks.gpu_cascade import launch_file
    from serving.gpu.chat import engine_key as llm_key
    from serving.gpu.whisper import engine_key as asr_key

    asr, llm, _ = _gpu_options(get_system("gpu-cascade"))
    assert (asr.overlap, llm.overlap) == (True, True)
    path = launch_file(tmp_path / "launch.yaml", 32, "cuda", False, 24, overlap=False)
    off_asr, off_llm, _ = _gpu_options(resolve_system("embedded-cascade", path))
    assert (off_asr.overlap, off_llm.overlap) == (False, False)
    assert asr_key(off_asr) != asr_key(off_asr.model_copy(update={"overlap": True}))
    assert llm_key(off_llm) != llm_key(off_llm.model_copy(update={"overlap": True}))


def test_gpu_cascades_recognizer_has_two_lanes_and_gpu_cascade_asr_lanes_sets_them(tmp_path):
    """One Whisper lane is the node's default, two gpu-cascade's; ``gpu_cascade.py --asr-lanes
    1`` writes a launch file whose recognizer has one (the A/B), which loads, and the lanes tell
    engines apart; 0 or 5 lanes are refused with the field named."""
    from benchmarks.gpu_cascade import launch_file
    from serving.gpu.whisper import engine_key as asr_key

    assert WhisperGpuOptions.model_fields["lanes"].default == 1
    asr, _, _ = _gpu_options(get_system("gpu-cascade"))
    assert asr.lanes == 2
    path = launch_file(tmp_path / "launch.yaml", 32, "cuda", False, 24, asr_lanes=1)
    one, _, _ = _gpu_options(resolve_system("embedded-cascade", path))
    assert one.lanes == 1 and asr_key(one) != asr_key(one.model_copy(update={"lanes": 2}))
    for bad in (0, 5):
        with pytest.raises(ValueError, match="lanes"):
            WhisperGpuOptions(**{**asr.model_dump(exclude={"kind"}), "lanes": bad})


def test_gpu_cascade_stream_priority_sets_each_engines_stream_priority(tmp_path):
    """``gpu_cascade.py --stream-priority tts=-5,llm=-1`` writes each engine's stream priority
    into the launch file, which loads with them; the profile's own are CUDA's default (0); a
    bad NODE=P is refused by the parser. ``--asr-tokens-per-s`` sets the recognizer's bound."""
    import argparse

    from benchmarks.gpu_cascade import launch_file, priorities

    def stream_priorities(system) -> tuple[int, int, int]:
        return tuple(options.stream_priority for options in _gpu_options(system))

    assert stream_priorities(get_system("gpu-cascade")) == (0, 0, 0)
    given = priorities("tts=-5, llm=-1")
    assert given == {"tts": -5, "llm": -1}
    path = launch_file(
        tmp_path / "launch.yaml", 32, "cuda", False, 24, priorities=given, asr_tokens_per_s=4
    )
    system = resolve_system("embedded-cascade", path)
    assert stream_priorities(system) == (0, -1, -5)
    assert _gpu_options(system)[0].max_tokens_per_s == 4  # --asr-tokens-per-s
    for bad in ("vad=-1", "tts", "tts=high", "tts=1"):
        with pytest.raises(argparse.ArgumentTypeError):
            priorities(bad)
    with pytest.raises(ValidationError):
        WhisperGpuOptions(
            weights={"load_format": "dummy", "preset": "whisper-large-v3"}, stream_priority=1
        )


def test_engine_stream_is_none_on_a_cpu_device():
    """An engine on the CPU has no stream (its loop runs in a null context)."""
    from serving.gpu.slots import engine_stream, on_stream

    assert engine_stream("cpu", -5) is None
    with on_stream(None):
        pass


def test_nodes_that_differ_in_a_graph_option_do_not_share_an_engine():
    """A shared engine is keyed by every option that builds it: two nodes that differ only in
    encoder_graphs (Whisper) or prefill_graphs (the reply model) get engines of their own."""
    from serving.gpu.chat import engine_key as chat_key
    from serving.gpu.whisper import engine_key as whisper_key

    dummy = {"load_format": "dummy", "preset": "whisper-large-v3"}
    whisper = WhisperGpuOptions(weights=dummy)
    assert whisper_key(whisper) != whisper_key(whisper.model_copy(update={"encoder_graphs": False}))
    llm = CausalLmGpuOptions(weights={"load_format": "dummy", "preset": "qwen3-4b"})
    assert chat_key(llm) != chat_key(llm.model_copy(update={"prefill_graphs": False}))
    assert chat_key(llm) != chat_key(llm.model_copy(update={"stream_priority": -1}))
    assert whisper_key(whisper) != whisper_key(whisper.model_copy(update={"stream_priority": -1}))


def _own_streams(monkeypatch):
    """``serving.gpu.slots`` with CUDA's stream creation faked (handles 1000 on, each call a new
    one) and torch's pool made to fail if drawn from: (slots, the calls made)."""
    import serving.gpu.slots as slots

    made = []

    def create(device_index: int, priority: int) -> int:
        made.append((device_index, priority))
        return 1000 + len(made) - 1

    class External:  # torch.cuda.ExternalStream's shape
        def __init__(self, handle, device=None):
            self.cuda_stream, self.device = handle, device

    def pool(*args, **kwargs):
        raise AssertionError("a stream was drawn from torch's pool")

    monkeypatch.setattr(slots, "_create_stream", create)
    monkeypatch.setattr(slots.torch.cuda, "ExternalStream", External)
    monkeypatch.setattr(slots.torch.cuda, "Stream", pool)
    monkeypatch.setattr(slots.torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(slots.torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(slots, "_CAPTURE_STREAMS", {})
    return slots, made


def test_every_stream_is_made_for_its_owner_and_none_is_torchs_pools(monkeypatch):
    """Engine streams and capture streams are CUDA streams made for them
    (``cudaStreamCreateWithPriority``), none drawn from torch's pool (whose 32 streams a
    priority go in turn to any library that asks, transformers' continuous batching among
    them): every one is a new handle, at the priority asked for, on the device asked for; the
    shared capture stream is made once a device."""
    slots, made = _own_streams(monkeypatch)
    engines = [slots.engine_stream("cuda:1", -2), slots.engine_stream("cuda", 0)]
    capture = slots._capture_stream()
    assert slots._capture_stream() is capture
    handles = [s.cuda_stream for s in engines] + [capture.cuda_stream]
    assert handles == [1000, 1001, 1002]
    assert made == [(1, -2), (0, 0), (0, 0)]
    assert [str(s.device) for s in engines] == ["cuda:1", "cuda:0"]
    assert slots.engine_stream("cpu") is None and len(made) == 3


def test_the_cuda_runtime_is_found_among_the_libraries_the_process_mapped(tmp_path):
    """The runtime torch loaded is found by its file name in ``/proc/self/maps`` (whichever
    package shipped it: nvidia-cuda-runtime's wheel, a conda env, /usr/local/cuda)."""
    from serving.gpu.slots import loaded_library

    maps = tmp_path / "maps"
    maps.write_text(
        "7f00-7f01 r--p 00000000 08:01 11 /usr/lib/libc.so.6\n"
        "7f02-7f03 rw-p 00000000 00:00 0 \n"
        "7f04-7f05 r-xp 00000000 08:01 12 /opt/venv/nvidia/cu13/lib/libcudart.so.13\n"
    )
    assert loaded_library("libcudart.so", str(maps)) == "/opt/venv/nvidia/cu13/lib/libcudart.so.13"
    assert loaded_library("libcublas", str(maps)) is None
    assert loaded_library("libcudart.so", str(tmp_path / "absent")) is None


def test_no_cuda_runtime_is_an_error_that_names_the_fix(monkeypatch):
    """Without torch's CUDA runtime in the process (a CPU build of torch) no stream is made
    from torch's pool instead, nor from another runtime on the library path: one line that says
    what to install."""
    import serving.gpu.slots as slots

    asked = []
    monkeypatch.setattr(slots, "_CUDART", [])
    monkeypatch.setattr(slots.torch.version, "cuda", "13.0")
    monkeypatch.setattr(slots, "loaded_library", lambda prefix: asked.append(prefix))
    with pytest.raises(RuntimeError, match="install a CUDA build of torch"):
        slots._cudart()
    assert asked == ["libcudart.so.13"]  # torch's major version's runtime, no other


def test_a_stream_is_made_with_the_runtimes_call_and_a_failure_is_cleared(monkeypatch):
    """The runtime's ``cudaStreamCreateWithPriority`` gets a pointer to write the handle to,
    cudaStreamNonBlocking (1) and the priority, on the device asked for; a failure is an error
    naming the device and the CUDA error, and is cleared from CUDA's last error first."""
    import contextlib

    import serving.gpu.slots as slots

    calls = []

    class Runtime:
        fail = 0

        def cudaStreamCreateWithPriority(self, out, flags, priority):  # noqa: N802
            calls.append(("create", flags, priority, devices[-1]))
            out._obj.value = 0xBEEF
            return self.fail

        def cudaGetLastError(self):  # noqa: N802
            calls.append(("last error",))
            return 0

    devices = [None]

    @contextlib.contextmanager
    def device(index):
        devices.append(index)
        yield

    runtime = Runtime()
    monkeypatch.setattr(slots, "_CUDART", [runtime])
    monkeypatch.setattr(slots.torch.cuda, "device", device)
    assert slots._create_stream(1, -2) == 0xBEEF
    assert calls == [("create", 1, -2, 1)]
    runtime.fail = 2
    with pytest.raises(RuntimeError, match="failed on cuda:0: CUDA error 2"):
        slots._create_stream(0, 0)
    assert calls[1:] == [("create", 1, 0, 0), ("last error",)]
