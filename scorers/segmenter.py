"""The VAD protocol the scorers use, so tests can inject a segment source.

``fdb.models.vad.SileroVad`` satisfies it; any object with an ``identity`` and a ``segments``
method returning (start_s, end_s) pairs computed as sample index / 16000 does too.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Protocol, TypeVar

import numpy as np

from fdb.errors import FdbError
from fdb.models import BackendIdentity
from fdb.models.vad import VadSettings

T = TypeVar("T")
PREFETCH_BLOCK = 64  # files per batched VAD call


class SpeechSegmenter(Protocol):
    identity: BackendIdentity

    def segments(
        self, samples: np.ndarray, settings: VadSettings = ...
    ) -> list[tuple[float, float]]:
        """Speech segments of 16 kHz mono float32 audio, (start_s, end_s) = samples / 16000."""


class SegmentMemo:
    """A segmenter that remembers segments by audio content and computes blocks at once.

    Scorers walk samples one by one; before a block of samples they ``prefetch`` its audio, which
    runs the inner segmenter's ``segments_many`` when it has one (Silero batches files through the
    model together) and otherwise calls ``segments`` per array. ``segments`` then answers from
    the memo, so the per-sample code stays unchanged and the result is the inner segmenter's.
    Only the segments are kept, keyed by (blake2b of the float32 samples, settings).
    """

    def __init__(self, inner: SpeechSegmenter):
        self.inner = inner
        self.identity = inner.identity
        self._memo: dict[tuple[bytes, VadSettings], list[tuple[float, float]]] = {}

    @staticmethod
    def _key(samples: np.ndarray, settings: VadSettings) -> tuple[bytes, VadSettings]:
        data = np.ascontiguousarray(samples, dtype=np.float32).tobytes()
        return hashlib.blake2b(data, digest_size=16).digest(), settings

    def prefetch(self, arrays: Iterable[np.ndarray], settings: VadSettings = VadSettings()) -> None:
        todo: dict[tuple[bytes, VadSettings], np.ndarray] = {}
        for samples in arrays:
            key = self._key(samples, settings)
            if key not in self._memo:
                todo.setdefault(key, samples)
        if not todo:
            return
        many = getattr(self.inner, "segments_many", None)
        found = (
            many(list(todo.values()), settings)
            if many is not None
            else [self.inner.segments(a, settings) for a in todo.values()]
        )
        self._memo.update(zip(todo, found, strict=True))

    def segments(
        self, samples: np.ndarray, settings: VadSettings = VadSettings()
    ) -> list[tuple[float, float]]:
        key = self._key(samples, settings)
        if key not in self._memo:
            self._memo[key] = self.inner.segments(samples, settings)
        return list(self._memo[key])


def prefetch_blocks(
    memo: SegmentMemo,
    items: Sequence[T],
    load: Callable[[T], list[np.ndarray]],
    settings: VadSettings,
    block: int = PREFETCH_BLOCK,
) -> Iterator[list[T]]:
    """Yield ``items`` in blocks of ``block``, each after its audio went through ``memo.prefetch``.

    ``load`` returns the 16 kHz arrays an item needs segmented (none when cached elsewhere); an
    item whose audio cannot be read is skipped here, so the scorer's own per-sample path reports
    that error as before.
    """
    for start in range(0, len(items), block):
        chunk = list(items[start : start + block])
        arrays: list[np.ndarray] = []
        for item in chunk:
            try:
                arrays.extend(load(item))
            except (FdbError, OSError, ValueError, RuntimeError):
                continue
        memo.prefetch(arrays, settings)
        yield chunk
