"""Voice activity detection with Silero VAD (the model ``silero_vad.load_silero_vad()`` loads).

Two uses: offline segmentation of a whole file (scorers) and a streaming detector with
server-VAD semantics (the bundled server's turn detection). The streaming detector scores its
frames with a Silero model of its own, or, for many sessions at once, with one
:class:`SileroBatch`: one network on any device scoring a frame of every stream in one call,
each stream's context and state its own (:class:`SileroStream`).
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

import numpy as np

from fdb.io import sha256_file
from fdb.models import BackendIdentity, require_package
from fdb.models.packages import SILERO_VAD, TORCH, package_version

VAD_RATE = 16000
FRAME = 512  # Silero's window at 16 kHz (32 ms)
BATCH = 64  # files per model call in segments_many
_torch_lock = threading.Lock()


def _silero():
    torch = require_package(TORCH, "Silero VAD")
    silero = require_package(SILERO_VAD, "Silero VAD")
    with _torch_lock:
        torch.set_num_threads(1)
    return torch, silero


_template: Any = None  # the process's warmed Silero module, which stream_model copies
_template_lock = threading.Lock()
WARM_FRAMES = 3  # calls after which TorchScript's profiling executor runs its optimized plan


def stream_model() -> Any:
    """A Silero module of its own for one stream (its recurrent state and context its own), at
    its start: a copy of one module the process loads and warms once.

    Loading the TorchScript module takes about 40 ms, all of it holding the GIL, and its first
    call about 40-70 ms more (the profiling executor's optimization). A server that made one a
    session stalled every other thread, its event loop included, while sessions opened. A copy
    takes about 5 ms, shares the warmed module's optimized code and starts at once, and scores
    exactly as a freshly loaded module (tests/fdb/test_models.py)."""
    global _template
    with _template_lock:
        if _template is None:
            torch, silero = _silero()
            model = silero.load_silero_vad(onnx=False)
            with torch.no_grad():
                for _ in range(WARM_FRAMES):
                    model(torch.zeros(FRAME), VAD_RATE)
            _template = model
        model = copy.deepcopy(_template)
    model.reset_states()
    return model


def model_file_sha256(onnx: bool = False) -> str | None:
    try:
        name = "silero_vad.onnx" if onnx else "silero_vad.jit"
        path = resources.files("silero_vad.data") / name
        return sha256_file(str(path))
    except Exception:
        return None


def silero_identity(onnx: bool = False, settings: dict | None = None) -> BackendIdentity:
    """What a Silero VAD reports: the package's version and the bundled model file's sha256."""
    return BackendIdentity(
        kind="vad",
        name="silero-vad" + ("-onnx" if onnx else "-jit"),
        version=package_version(SILERO_VAD.distribution),
        checkpoint="silero_vad.onnx" if onnx else "silero_vad.jit",
        checkpoint_sha256=model_file_sha256(onnx),
        settings=settings or {},
    )


@dataclass(frozen=True)
class VadSettings:
    threshold: float = 0.5
    min_speech_duration_ms: int = 250
    min_silence_duration_ms: int = 100
    speech_pad_ms: int = 0


class SileroVad:
    """Offline segmentation. Segments are (start_s, end_s) from sample indices / 16000."""

    def __init__(self, onnx: bool = False):
        torch, silero = _silero()
        self._torch = torch
        self._silero = silero
        self._onnx = onnx
        self._model = silero.load_silero_vad(onnx=onnx)
        self._lock = threading.Lock()
        self.identity = silero_identity(onnx)

    def segments(
        self, samples: np.ndarray, settings: VadSettings = VadSettings()
    ) -> list[tuple[float, float]]:
        """Speech segments of 16 kHz mono float32 audio, in seconds (exact sample / 16000)."""
        return self.segments_many([samples], settings)[0]

    def segments_many(
        self,
        arrays: Sequence[np.ndarray],
        settings: VadSettings = VadSettings(),
        batch: int = BATCH,
    ) -> list[list[tuple[float, float]]]:
        """``segments`` of many files at once, in their order.

        Files of similar length go through the model together, one row each (Silero keeps its
        recurrent state and 64-sample context per row), so a 512-sample window costs one model
        call per batch instead of one per file (measured: docs/benchmarks.md#silero-vad-batching).
        The per-window probabilities then go through silero-vad's own
        ``get_speech_timestamps_from_probs`` with the settings, exactly as
        ``get_speech_timestamps`` does for one file (a short last window is zero-padded there
        and here alike), so the segments equal the one-file result.
        """
        out: list[list[tuple[float, float]]] = [[] for _ in arrays]
        order = sorted((i for i, a in enumerate(arrays) if len(a)), key=lambda i: len(arrays[i]))
        for start in range(0, len(order), batch):
            rows = order[start : start + batch]
            probs = self._probabilities([arrays[i] for i in rows])
            for i, row_probs in zip(rows, probs, strict=True):
                stamps = self._silero.get_speech_timestamps_from_probs(
                    row_probs,
                    sampling_rate=VAD_RATE,
                    threshold=settings.threshold,
                    min_speech_duration_ms=settings.min_speech_duration_ms,
                    min_silence_duration_ms=settings.min_silence_duration_ms,
                    speech_pad_ms=settings.speech_pad_ms,
                    return_seconds=False,
                    audio_length_samples=len(arrays[i]),
                )
                out[i] = [(s["start"] / VAD_RATE, s["end"] / VAD_RATE) for s in stamps]
        return out

    def _probabilities(self, arrays: list[np.ndarray]) -> list[list[float]]:
        """Per-window speech probabilities of each array (rows zero-padded to the longest)."""
        windows = [-(-len(a) // FRAME) for a in arrays]
        grid = np.zeros((len(arrays), max(windows) * FRAME), dtype=np.float32)
        for row, samples in enumerate(arrays):
            grid[row, : len(samples)] = samples
        probs = np.empty((len(arrays), max(windows)), dtype=np.float32)
        with self._lock, self._torch.no_grad():
            self._model.reset_states()
            for k in range(max(windows)):
                chunk = self._torch.from_numpy(grid[:, k * FRAME : (k + 1) * FRAME])
                probs[:, k] = self._model(chunk, VAD_RATE).reshape(-1).numpy()
            self._model.reset_states()
        return [probs[row, :n].tolist() for row, n in enumerate(windows)]


@dataclass(eq=False)
class SileroStream:
    """One stream's state in a :class:`SileroBatch`: the last ``context`` samples before its next
    frame, and the network's recurrent state [2, 1, 128], both on the batch's device."""

    context: Any
    state: Any

    def reset(self) -> None:
        """Back to the start of a stream (as ``reset_states`` of Silero's own module)."""
        self.context.zero_()
        self.state.zero_()


class SileroBatch:
    """One Silero VAD network (the 16 kHz one inside ``load_silero_vad()``'s module) on
    ``device``, scoring one frame of each of many streams in one call. Silero's module keeps one
    recurrent state and context for a whole batch of a fixed size, so streams that start, pause
    and end at their own times cannot share it; here each stream's context and state are its own
    (:meth:`stream`) and are gathered for each call: a stream's probabilities are those its own
    module would give."""

    def __init__(self, device: str = "cpu"):
        torch, silero = _silero()
        self._torch = torch
        self.device = device
        self._net = silero.load_silero_vad(onnx=False)._model.to(device).eval()
        self.context_size = int(self._net.context_size_samples)
        self._lock = threading.Lock()
        self.identity = silero_identity(settings={"batched": True, "device": device})

    def stream(self) -> SileroStream:
        torch = self._torch
        return SileroStream(
            torch.zeros(self.context_size, device=self.device),
            torch.zeros(2, 1, 128, device=self.device),
        )

    def score(self, items: Sequence[tuple[SileroStream, np.ndarray]]) -> list[float]:
        """The speech probability of each (stream, frame of ``FRAME`` samples), in one call;
        each stream's context and state move on by its frame (a stream at most once a call)."""
        torch = self._torch
        frames = torch.from_numpy(np.stack([np.asarray(f, np.float32) for _, f in items]))
        with self._lock, torch.inference_mode():
            frames = frames.to(self.device)
            x = torch.cat([torch.stack([s.context for s, _ in items]), frames], dim=1)
            state = torch.cat([s.state for s, _ in items], dim=1)
            out, state = self._net(x, state)
            for row, (stream, _) in enumerate(items):
                stream.context.copy_(x[row, -self.context_size :])
                stream.state.copy_(state[:, row : row + 1])
            return out.reshape(-1).float().cpu().tolist()


class StreamingVad:
    """Server-VAD semantics over a 16 kHz stream fed in any chunk size.

    Emits ("speech_started", t_ms) when a frame's probability reaches ``threshold`` (the start
    reported ``prefix_padding_ms`` earlier, not before 0) and ("speech_stopped", t_ms) once
    ``silence_duration_ms`` of frames below ``threshold - 0.15`` follow speech; t_ms is on the
    input timeline at the end of the last speech frame.

    With ``prefetch_ms`` (shorter than ``silence_duration_ms``) it also reports
    ("speech_pausing", t_ms) once that much silence follows speech, t_ms being the speech end a
    stop there would report, and ("speech_resumed", t_ms of the resuming frame) when speech comes
    back before the stop: a server may start the turn's work at the pause and keep it only if the
    stop follows with the same t_ms.

    :meth:`feed` scores the frames with the detector's own Silero model; with ``model=False``
    (frames scored elsewhere, e.g. by a :class:`SileroBatch`) the caller takes each whole frame
    from :meth:`frames` and hands its probability to :meth:`step`, in order.
    """

    def __init__(
        self,
        threshold: float = 0.5,
        silence_duration_ms: int = 500,
        prefix_padding_ms: int = 300,
        prefetch_ms: int | None = None,
        model: bool = True,
    ):
        torch, _ = _silero()
        self._torch = torch
        self._model = stream_model() if model else None
        self.threshold = threshold
        self.neg_threshold = max(threshold - 0.15, 0.01)
        self.silence_duration_ms = silence_duration_ms
        self.prefix_padding_ms = prefix_padding_ms
        self.prefetch_ms = prefetch_ms
        self._pausing = False  # a speech_pausing was reported for the current silence
        self._pending = np.zeros(0, dtype=np.float32)
        self._consumed = 0  # samples already scored
        self.in_speech = False
        self._last_speech_end = 0
        self._speech_start = 0

    def configure(self, threshold: float, silence_duration_ms: int, prefix_padding_ms: int) -> None:
        """Change the detector's settings in place; the stream position and state are kept."""
        self.threshold = threshold
        self.neg_threshold = max(threshold - 0.15, 0.01)
        self.silence_duration_ms = silence_duration_ms
        self.prefix_padding_ms = prefix_padding_ms

    def reset(self) -> None:
        if self._model is not None:
            self._model.reset_states()
        self.in_speech = False
        self._pausing = False

    @property
    def last_speech_end_ms(self) -> int:
        """End of the last frame scored as speech, on the input timeline."""
        return int(self._last_speech_end * 1000 / VAD_RATE)

    def feed(self, samples: np.ndarray) -> list[tuple[str, int]]:
        """The events of ``samples`` (any length; a partial frame waits for the next call)."""
        events: list[tuple[str, int]] = []
        for frame in self.frames(samples):
            with self._torch.no_grad():
                prob = float(self._model(self._torch.from_numpy(frame), VAD_RATE).item())
            events += self.step(prob)
        return events

    def frames(self, samples: np.ndarray) -> list[np.ndarray]:
        """The whole frames ``samples`` completes, in order (the rest waits for the next call);
        each must then go through :meth:`step` with its probability."""
        self._pending = np.concatenate([self._pending, samples.astype(np.float32)])
        whole = len(self._pending) // FRAME * FRAME
        out = [self._pending[i : i + FRAME] for i in range(0, whole, FRAME)]
        self._pending = self._pending[whole:]
        return out

    def step(self, prob: float) -> list[tuple[str, int]]:
        """The events of the next frame, whose speech probability is ``prob``."""
        events: list[tuple[str, int]] = []
        start, self._consumed = self._consumed, self._consumed + FRAME
        if self._pausing and prob >= self.neg_threshold:  # the speech goes on before the stop
            self._pausing = False
            events.append(("speech_resumed", int(start * 1000 / VAD_RATE)))
        if prob >= self.threshold:
            if not self.in_speech:
                self.in_speech = True
                self._speech_start = start
                pad = int(self.prefix_padding_ms * VAD_RATE / 1000)
                events.append(("speech_started", int(max(0, start - pad) * 1000 / VAD_RATE)))
            self._last_speech_end = self._consumed
        elif self.in_speech and prob < self.neg_threshold:
            silence_ms = (self._consumed - self._last_speech_end) * 1000 / VAD_RATE
            if silence_ms >= self.silence_duration_ms:
                self.in_speech = self._pausing = False
                events.append(("speech_stopped", int(self._last_speech_end * 1000 / VAD_RATE)))
            elif self._prefetches(silence_ms):
                self._pausing = True
                events.append(("speech_pausing", int(self._last_speech_end * 1000 / VAD_RATE)))
        elif self.in_speech:  # between the thresholds: the speech goes on
            self._last_speech_end = self._consumed
        return events

    def _prefetches(self, silence_ms: float) -> bool:
        return (
            self.prefetch_ms is not None
            and not self._pausing
            and silence_ms >= self.prefetch_ms
            and self.prefetch_ms < self.silence_duration_ms
        )

    def flush(self) -> list[tuple[str, int]]:
        """End of input: an open utterance stops at the end of its last speech frame."""
        if self.in_speech:
            self.in_speech = self._pausing = False
            return [("speech_stopped", int(self._last_speech_end * 1000 / VAD_RATE))]
        return []
