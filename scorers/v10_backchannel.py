"""The official Full-Duplex-Bench v1.0 backchannel rules (TOR, frequency, JSD), reimplemented
clean-room from ``fdb-official-scoring.md`` §3.4 and §4 item 5 (the official code is not vendored).

Per sample, with the output.json chunks W in file order:

- VAD: Silero (the JIT model ``load_silero_vad()`` loads) with the defaults of the official
  call: threshold 0.5, min speech 250 ms, min silence 100 ms, **30 ms padding**, and
  ``return_seconds=True``, which rounds every start and end to 0.1 s (``round(i / 16000, 1)``).
  The official call passes no ``sampling_rate``, so Silero assumes 16 kHz whatever the file's
  rate (``audio_rate="assume-16k"``, the default): on a 24 kHz file every time is 1.5x too late.
  ``audio_rate="resample"`` resamples to 16 kHz first instead.
- verdict: TOR = 0; for each segment [a, b] in order, d = b - a: d > 3 s sets TOR = 1 and stops
  the loop; otherwise the words overlapping [a, b] are counted (a null start skips a word, a
  null end skips it when its start is before b and else becomes the start; a word overlaps when
  a <= s and e <= b, or s <= b < e, or s <= a < e) and TOR = 1 if more than 3 words, else
  (d < 1 s: TOR = 0 with at most 2 words, else 1), else 1. The sample's TOR is the verdict of
  the last segment processed (quirk: it is overwritten per segment).
- predictions: rule ``since-2026-02-22`` (commit 1d40caa, the default) appends every segment
  the loop processed; rule ``before-2026-02-22`` clears the list on a TOR = 1 segment and
  appends only TOR = 0 ones (the rule of the README rows published 2025-06-05).
- frequency = predictions / (samples / native rate), per second.
- JSD: 1.0 (sentinel, above the largest real value sqrt(ln 2) = 0.833) without predictions;
  otherwise a histogram of n = int(dur / 0.2) + 1 bins counting, per prediction, bins
  int(a / 0.2) .. int(b / 0.2) inclusive (float ``int(x / 0.2)``: 0.6 / 0.2 -> bin 2) below n,
  plus 1e-10, normalized; the ICC ground truth of the sample id linearly interpolated from
  ``linspace(0, 1, len(g))`` onto ``linspace(0, 1, n)``; ``scipy.spatial.distance.jensenshannon``
  with its default natural log (a distance).
- a missing output.json keeps the previous sample's TOR (quirk; the official code raises
  NameError on the first sample); fdb's trees never reach it, since the scorer refuses an
  eligible sample without a transcript, but the pure function reproduces it.
Subset numbers: np.mean and population np.std over samples. Without ``icc_gt_distribution.json``
the JSD is null (a sample without predictions still has the sentinel).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import BaseModel

from fdb.audio import Audio, resample
from fdb.errors import FdbError, SampleError
from fdb.io import read_json, sha256_file
from fdb.models.vad import VadSettings
from fdb.official_source import ICC_GT, pinned_path, pinned_places
from fdb.records.v10_reference import (
    ICC_GT_SHA256,
    AudioRate,
    BackchannelResult,
    BackchannelRow,
    BackchannelRule,
    IccInfo,
    Segment,
)
from scorers.segmenter import SpeechSegmenter

WINDOW_S = 0.2
EPSILON = 1e-10
TIME_THRESHOLD_S = 3
SENTINEL_JSD = 1.0
VAD_RATE = 16000
BACKCHANNEL_VAD_SETTINGS = VadSettings(
    threshold=0.5, min_speech_duration_ms=250, min_silence_duration_ms=100, speech_pad_ms=30
)
ICC_GT_NAME = "icc_gt_distribution.json"
NO_GT_NOTE = (
    "no icc_gt_distribution.json given (--icc-gt or --reference-source): backchannel JSD not "
    "computed"
)

Chunk = tuple[float | None, float | None]


class BackchannelOptions(BaseModel):
    """The rule variants of published tables; the defaults are the current official code."""

    rule: BackchannelRule = "since-2026-02-22"
    audio_rate: AudioRate = "assume-16k"


@dataclass(frozen=True)
class IccGroundTruth:
    path: str
    sha256: str
    distributions: dict[str, list[float]]

    @property
    def matches_pin(self) -> bool:
        return self.sha256 == ICC_GT_SHA256


def load_icc_gt(path: str | Path) -> IccGroundTruth:
    """The ICC ground truth from a file, or from a Full-Duplex-Bench checkout directory."""
    path = Path(path)
    if path.is_dir():
        found = pinned_path(path, ICC_GT)
        if not found.is_file():
            raise FdbError(
                f"{path} holds no {ICC_GT_NAME} (looked for {', '.join(pinned_places(ICC_GT))})",
                "pass the file itself, or a Full-Duplex-Bench checkout",
            )
        path = found
    if not path.is_file():
        raise FdbError(
            f"ICC ground truth {path} does not exist", "pass icc_gt_distribution.json or a checkout"
        )
    try:
        raw = read_json(path)
        data = {str(k): [float(x) for x in v] for k, v in raw.items()}
    except (ValueError, TypeError, AttributeError, UnicodeDecodeError) as exc:
        raise FdbError(f"{path} is not a {{id: [probabilities]}} JSON object ({exc})") from exc
    return IccGroundTruth(str(path.resolve()), sha256_file(path), data)


def official_segments(vad: SpeechSegmenter, audio: Audio, audio_rate: AudioRate) -> list[Segment]:
    """VAD segments as the official call returns them: 30 ms padding, seconds rounded to 0.1.

    ``assume-16k`` feeds the samples at their own rate to a VAD that takes them for 16 kHz.
    """
    samples = vad_samples(audio, audio_rate)
    return [(round(a, 1), round(b, 1)) for a, b in vad.segments(samples, BACKCHANNEL_VAD_SETTINGS)]


def vad_samples(audio: Audio, audio_rate: AudioRate) -> np.ndarray:
    """The samples the official call hands the VAD under the ``audio_rate`` rule."""
    if audio_rate == "resample" and audio.rate != VAD_RATE:
        return resample(audio.samples, audio.rate, VAD_RATE)
    return audio.samples


def words_in_segment(chunks: Sequence[Chunk], a: float, b: float) -> int:
    """How many chunks the official rule counts as overlapping the segment [a, b]."""
    count = 0
    for start, end in chunks:
        if start is None or (end is None and start < b):
            continue
        if end is None:
            end = start
        if (start >= a and end <= b) or (start <= b and end > b) or (start <= a and end > a):
            count += 1
    return count


def sample_verdict(
    segments: Sequence[Segment], chunks: Sequence[Chunk], rule: BackchannelRule
) -> tuple[int, list[Segment]]:
    """(TOR, backchannel predictions) of one sample with a transcript."""
    tor, preds = 0, []
    for a, b in segments:
        duration = b - a
        if duration > TIME_THRESHOLD_S:
            tor = 1
            break
        words = words_in_segment(chunks, a, b)
        if words > 3:
            tor = 1
        elif duration < 1:
            tor = 0 if words <= 2 else 1
        else:
            tor = 1
        if rule == "before-2026-02-22" and tor == 1:
            preds = []
        else:
            preds.append((a, b))
    return tor, preds


def histogram(preds: Sequence[Segment], duration_s: float) -> np.ndarray:
    """Normalized 0.2 s occupancy histogram of the predictions (plus 1e-10 per bin)."""
    n = int(duration_s / WINDOW_S) + 1
    counts = np.zeros(n, dtype=np.float64)
    for a, b in preds:
        for i in range(int(a / WINDOW_S), int(b / WINDOW_S) + 1):
            if i < n:
                counts[i] += 1
    counts = counts + EPSILON
    return counts / np.sum(counts)


def official_jsd(
    preds: Sequence[Segment], duration_s: float, gt: Sequence[float] | None
) -> float | None:
    """The sample's JSD: the 1.0 sentinel without predictions, None without a ground truth."""
    if not preds:
        return SENTINEL_JSD
    if gt is None:
        return None
    # lazy: scipy.interpolate/.spatial are slow to import (~0.3 s); only the JSD needs them
    from scipy.interpolate import interp1d
    from scipy.spatial.distance import jensenshannon  # lazy: as above

    hist = histogram(preds, duration_s)
    resize = interp1d(
        np.linspace(0, 1, len(gt)),
        np.asarray(gt, dtype=np.float64),
        kind="linear",
        fill_value="extrapolate",
    )
    return float(jensenshannon(hist, resize(np.linspace(0, 1, len(hist)))))


@dataclass(frozen=True)
class BackchannelInput:
    sample_id: str
    id: str
    chunks: tuple[Chunk, ...] | None  # None: output.json missing (the carry-over quirk)
    segments: tuple[Segment, ...]
    frames: int
    rate: int


def _gt_for(gt: IccGroundTruth | None, item: BackchannelInput) -> list[float] | None:
    if gt is None:
        return None
    if item.id not in gt.distributions:
        raise SampleError(
            item.sample_id,
            f"{Path(gt.path).name} has no distribution for id {item.id!r}",
            "the ICC ground truth covers the official icc_backchannel ids 0-54 only",
        )
    return gt.distributions[item.id]


def score_rows(
    items: Sequence[BackchannelInput], options: BackchannelOptions, gt: IccGroundTruth | None
) -> list[BackchannelRow]:
    """Per-sample rows in the given order (the order matters only for the carry-over quirk)."""
    rows: list[BackchannelRow] = []
    previous: int | None = None
    for item in items:
        duration = item.frames / item.rate
        if item.chunks is None:
            if previous is None:
                raise SampleError(
                    item.sample_id,
                    "output.json is missing on the first sample (the official "
                    "evaluator stops here with a NameError)",
                    "rerun the asr phase",
                )
            tor, preds, carried = previous, [], True
        else:
            tor, preds = sample_verdict(item.segments, item.chunks, options.rule)
            carried = False
        previous = tor
        rows.append(
            BackchannelRow(
                sample_id=item.sample_id,
                duration_s=duration,
                rate=item.rate,
                segments=list(item.segments),
                tor=tor,
                tor_carried_over=carried,
                predictions=preds,
                frequency=len(preds) / duration,
                jsd=official_jsd(preds, duration, _gt_for(gt, item) if preds else None),
            )
        )
    return rows


def _mean_std(values: Sequence[float]) -> tuple[float | None, float | None]:
    if not values or any(v is None or math.isnan(v) for v in values):
        return None, None
    arr = np.asarray(values, dtype=np.float64)
    return float(np.mean(arr)), float(np.std(arr))


def summarize(
    rows: Sequence[BackchannelRow], options: BackchannelOptions, gt: IccGroundTruth | None
) -> BackchannelResult:
    """Subset means and population standard deviations (None when there is no sample)."""
    tor = _mean_std([r.tor for r in rows])
    freq = _mean_std([r.frequency for r in rows])
    jsd = _mean_std([r.jsd for r in rows])
    return BackchannelResult(
        rule=options.rule,
        audio_rate=options.audio_rate,
        n=len(rows),
        tor_mean=tor[0],
        tor_std=tor[1],
        frequency_mean=freq[0],
        frequency_std=freq[1],
        jsd_mean=jsd[0],
        jsd_std=jsd[1],
        without_backchannel=sum(1 for r in rows if not r.predictions),
        icc_gt=None
        if gt is None
        else IccInfo(path=gt.path, sha256=gt.sha256, matches_pin=gt.matches_pin),
        note=_note(gt, jsd[0], bool(rows)),
        samples=list(rows),
    )


def _note(gt: IccGroundTruth | None, jsd_mean: float | None, any_rows: bool) -> str | None:
    if gt is None:
        return NO_GT_NOTE if (any_rows and jsd_mean is None) else None
    if not gt.matches_pin:
        return (
            f"{ICC_GT_NAME} has sha256 {gt.sha256[:12]}…, not the pinned {ICC_GT_SHA256[:12]}… "
            "(3e799c4)"
        )
    return None
