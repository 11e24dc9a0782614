"""Builders for small v1.0 / v1.5 export trees in a temporary directory (test helpers)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from fdb.audio import wav_bytes
from fdb.io import atomic_write_bytes, atomic_write_json, sha256_file
from fdb.models import BackendIdentity
from fdb.records import AsrReceipt, AsrSampleReceipt, ExportManifest, ExportSample

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
REFERENCE = SHARED / "fdb-reference" / "example_data"
ANNOTATION = {
    "synthetic_pause_handling": "pause.json",
    "candor_pause_handling": "pause.json",
    "candor_turn_taking": "turn_taking.json",
    "synthetic_user_interruption": "interrupt.json",
    "icc_backchannel": None,
}
RATE = 16000


def pause_json(*pauses: tuple[float, float]) -> list[dict]:
    return [{"text": "[PAUSE]", "timestamp": [a, b]} for a, b in pauses]


def turn_json(E: float) -> list[dict]:
    return [{"text": "[TURN-TAKING]", "timestamp": [E, E + 0.4]}]


def interrupt_json(S: float, R: float) -> list[dict]:
    return [{"context": "tell me a story", "interrupt": "wait, a shorter one", "timestamp": [S, R]}]


def transcript(*words: tuple[float, float | None]) -> dict:
    chunks = [{"text": f"w{i}", "timestamp": [s, e]} for i, (s, e) in enumerate(words)]
    return {"text": " ".join(c["text"] for c in chunks), "chunks": chunks}


class V10Tree:
    """Write samples, then ``finish()`` writes manifest.json and (optionally) asr.json."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.samples: list[ExportSample] = []

    def add(
        self,
        subset: str,
        sid: str,
        T_s: float,
        *,
        annotation=None,
        words=None,
        audio=None,
        transcript_obj=None,
        eligible: bool = True,
        reasons: tuple[str, ...] = (),
    ) -> Path:
        folder = self.root / subset / sid
        files: dict[str, str] = {}
        n = round(T_s * RATE)
        if eligible:
            folder.mkdir(parents=True, exist_ok=True)
            audio = np.zeros(n, np.float32) if audio is None else audio
            atomic_write_bytes(folder / "output.wav", wav_bytes(audio, RATE))
            files["output.wav"] = sha256_file(folder / "output.wav")
            name = ANNOTATION[subset]
            if name and annotation is not None:
                atomic_write_json(folder / name, annotation)
                files[name] = sha256_file(folder / name)
            obj = (
                transcript_obj
                if transcript_obj is not None
                else (transcript(*words) if words is not None else None)
            )
            if obj is not None:
                atomic_write_json(folder / "output.json", obj)
        self.samples.append(
            ExportSample(
                sample_id=f"{subset}/{sid}",
                subset=subset,
                id=sid,
                eligible=eligible,
                reasons=list(reasons),
                T_s=T_s,
                input_samples=n,
                files=files,
            )
        )
        return folder

    def copy_reference(
        self, example: str, subset: str, sid: str, T_s: float, input_samples: int | None
    ) -> Path:
        folder = self.root / subset / sid
        folder.mkdir(parents=True, exist_ok=True)
        files = {}
        for name in ("output.wav", "output.json", ANNOTATION[subset]):
            shutil.copyfile(REFERENCE / example / "1" / name, folder / name)
            if name != "output.json":
                files[name] = sha256_file(folder / name)
        self.samples.append(
            ExportSample(
                sample_id=f"{subset}/{sid}",
                subset=subset,
                id=sid,
                eligible=True,
                T_s=T_s,
                input_samples=input_samples,
                files=files,
            )
        )
        return folder

    def manifest(self) -> Path:
        manifest = ExportManifest(dataset="v1.0", samples=self.samples)
        return atomic_write_json(self.root / "manifest.json", manifest.dump())

    def finish(self, with_asr: bool = True) -> Path:
        """manifest.json plus an asr.json receipt that vouches for the files on disk."""
        path = self.manifest()
        if with_asr:
            entries = []
            for s in self.samples:
                folder = self.root / s.subset / s.id
                if not s.eligible:
                    entries.append(AsrSampleReceipt(sample_id=s.sample_id, status="skipped"))
                    continue
                entries.append(
                    AsrSampleReceipt(
                        sample_id=s.sample_id,
                        status="ok",
                        output_wav_sha256=sha256_file(folder / "output.wav"),
                        output_json_sha256=sha256_file(folder / "output.json"),
                    )
                )
            receipt = AsrReceipt(
                backend={"kind": "asr", "name": "test-fixture"},
                manifest_sha256=sha256_file(path),
                samples=entries,
            )
            atomic_write_json(self.root / "asr.json", receipt.dump())
        return self.root


class FixedSegments:
    """An injectable VAD: segments are where the audio is nonzero (exact sample bounds).

    Tests write output.wav as silence with constant-amplitude bursts where speech should be.
    """

    def __init__(self):
        self.identity = BackendIdentity(kind="vad", name="nonzero-test-vad", version="1")
        self.calls = 0

    def segments(self, samples: np.ndarray, settings=None) -> list[tuple[float, float]]:
        self.calls += 1
        active = np.abs(samples) > 1e-3
        edges = np.flatnonzero(np.diff(np.concatenate([[0], active.astype(np.int8), [0]])))
        return [
            (int(a) / RATE, int(b) / RATE) for a, b in zip(edges[::2], edges[1::2], strict=True)
        ]


def bursts(T_s: float, *spans: tuple[float, float], amplitude: float = 0.5) -> np.ndarray:
    audio = np.zeros(round(T_s * RATE), np.float32)
    for a, b in spans:
        audio[round(a * RATE) : round(b * RATE)] = amplitude
    return audio
