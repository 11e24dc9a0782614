"""A pytest plugin that logs which code holds which CUDA stream, and every CUDA graph freed on a
stream that one of fdb's owners captured on: ``pytest -s -p benchmarks.stream_log -m gpu ...``.

Lines start ``[streams]``:

- ``pool HANDLE priority P by FILE:LINE``: a stream drawn from torch's pool (``torch.cuda.Stream``:
  32 a priority, handed out in turn to whoever asks) and the code that asked;
- ``owner HANDLE NAME``: the capture stream of an owner of ``serving.gpu.slots.capture`` (an
  engine, a lane's static Whisper, a codec), or ``engine HANDLE by FILE:LINE``: an engine stream;
- ``cleared HANDLE (NAME's) by FILE:LINE``: a graph captured on that stream by other code was
  freed. torch's ``CUDAGraph::reset`` then clears the stream's cuBLAS workspaces for every
  thread, the workspace NAME's graphs replay with among them;
- ``cleared every stream's workspaces by FILE:LINE``: a call from Python of
  ``torch._C._cuda_clearCublasWorkspaces`` (torch.compile's graph trees make one).

A diagnostic for docs/gpu.md's thirteenth session (``gpu_suite.sh OUT streams``); it changes no
result, only prints.
"""

from __future__ import annotations

import sys

import torch

_OURS: dict[int, str] = {}  # stream handle -> the fdb owner or engine that captures or runs on it


def _caller(depth: int) -> str:
    frame = sys._getframe(depth)
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"


def _say(text: str) -> None:
    print(f"[streams] {text}", flush=True)


_stream_new = torch.cuda.Stream.__new__


def _pool_stream(cls, device=None, priority=0, **kwargs):
    stream = _stream_new(cls, device, priority=priority, **kwargs)
    if not kwargs:  # not an ExternalStream or a stream rebuilt from its id
        _say(f"pool {stream.cuda_stream:#x} priority {priority} by {_caller(2)}")
    return stream


torch.cuda.Stream.__new__ = staticmethod(_pool_stream)

_graph_enter = torch.cuda.graph.__enter__


def _enter(self):
    result = _graph_enter(self)
    stream = getattr(self, "capture_stream", None)
    if stream is not None:
        self.cuda_graph._logged_stream = stream.cuda_stream
        self.cuda_graph._logged_by = _caller(2)
    return result


torch.cuda.graph.__enter__ = _enter


def _graph_del(self):
    handle = getattr(self, "_logged_stream", None)
    if handle in _OURS and not getattr(self, "_fdb_owned", False):
        owner, by = _OURS[handle], self._logged_by
        _say(f"cleared {handle:#x} ({owner}'s) by {_caller(2)}; captured by {by}")


torch.cuda.CUDAGraph.__del__ = _graph_del

import serving.gpu.slots as slots  # noqa: E402  (after torch's classes are wrapped)

_capture = slots.capture
_engine_stream = slots.engine_stream


def _logged_capture(fn, warmups: int = 2, pool=None, owner=None):
    had = getattr(owner, "_capture_on", None) if owner is not None else None
    graph = _capture(fn, warmups=warmups, pool=pool, owner=owner)
    graph._fdb_owned = True
    stream = graph.capture_stream
    if owner is not None and had is None:
        name = f"{type(owner).__name__}@{id(owner):#x}"
        _OURS[stream.cuda_stream] = name
        _say(f"owner {stream.cuda_stream:#x} {name}")
    elif owner is None and stream.cuda_stream not in _OURS:
        _OURS[stream.cuda_stream] = "the shared capture stream"
        _say(f"owner {stream.cuda_stream:#x} the shared capture stream")
    return graph


def _logged_engine_stream(device, priority: int = 0):
    stream = _engine_stream(device, priority)
    if stream is not None:
        _OURS.setdefault(stream.cuda_stream, f"engine by {_caller(2)}")
        _say(f"engine {stream.cuda_stream:#x} by {_caller(2)}")
    return stream


slots.capture = _logged_capture
slots.engine_stream = _logged_engine_stream

_clear_all = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)  # None: a CPU build


def _logged_clear_all():
    _say(f"cleared every stream's workspaces by {_caller(2)}")
    return _clear_all()


if _clear_all is not None:
    torch._C._cuda_clearCublasWorkspaces = _logged_clear_all
