"""Small repeat trees with ASR transcripts for the judge tests (no audio is needed)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from fdb.io import atomic_write_json, sha256_file
from fdb.records import ExportManifest, ExportSample

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
REFERENCE = SHARED / "fdb-reference"


def transcript(text: str, start: float = 0.5, step: float = 0.3) -> dict:
    words = text.split()
    return {
        "text": text,
        "chunks": [
            {
                "text": w,
                "timestamp": [round(start + i * step, 3), round(start + i * step + 0.25, 3)],
            }
            for i, w in enumerate(words)
        ],
    }


@dataclass
class Pair:
    category: str
    id: str
    reply: str = "Sure, here is the answer you asked for."
    eligible: bool = True
    missing: tuple[str, ...] = ()

    @property
    def sample_id(self) -> str:
        return f"{self.category}/{self.id}"


@dataclass
class Interrupt:
    id: str
    reply: str = "Fiction books are great, for example a novel about the sea."
    eligible: bool = True
    missing: tuple[str, ...] = ()


@dataclass
class Repeat:
    root: Path
    pairs: list[Pair] = field(default_factory=list)
    interrupts: list[Interrupt] = field(default_factory=list)

    def write(self) -> Path:
        if self.pairs:
            self._v15()
        if self.interrupts:
            self._v10()
        return self.root

    def _v15(self) -> None:
        tree = self.root / "reference-audio"
        samples = []
        for p in self.pairs:
            samples.append(
                ExportSample(
                    sample_id=p.sample_id,
                    subset=p.category,
                    id=p.id,
                    eligible=p.eligible,
                    reasons=[] if p.eligible else ["protocol verdict fail"],
                )
            )
            if not p.eligible:
                continue
            folder = tree / p.category / p.id
            files = {
                "clean_input": transcript("Can you tell me about fiction books?", 0.3),
                "input": transcript(
                    "Can you tell me about fiction books? Actually, what about poems?", 0.3
                ),
                "clean_output": transcript("Fiction books tell invented stories.", 3.0),
                "output": transcript(p.reply, 3.0),
            }
            for name, obj in files.items():
                if f"{name}.json" not in p.missing:
                    atomic_write_json(folder / f"{name}.json", obj)
            atomic_write_json(
                folder / "metadata.json",
                {
                    "context_text": "",
                    "current_turn_text": "Actually, what about poems?",
                    "timestamps": [4.0, 5.5],
                },
            )
        manifest = ExportManifest(dataset="v1.5", samples=samples)
        atomic_write_json(tree / "reference-manifest.json", manifest.dump())
        (self.root / "sample-ids.txt").write_text("".join(p.sample_id + "\n" for p in self.pairs))

    def _v10(self) -> None:
        tree = self.root / "v10" / "reference"
        samples = [
            ExportSample(
                sample_id="candor_turn_taking/1", subset="candor_turn_taking", id="1", eligible=True
            )
        ]
        for s in self.interrupts:
            samples.append(
                ExportSample(
                    sample_id=f"synthetic_user_interruption/{s.id}",
                    subset="synthetic_user_interruption",
                    id=s.id,
                    eligible=s.eligible,
                    reasons=[] if s.eligible else ["protocol verdict fail"],
                )
            )
            if not s.eligible:
                continue
            folder = tree / "synthetic_user_interruption" / s.id
            if "output.json" not in s.missing:
                atomic_write_json(
                    folder / "output.json",
                    transcript(s.reply, 6.0) if s.reply else {"text": "", "chunks": []},
                )
            atomic_write_json(
                folder / "interrupt.json",
                [
                    {
                        "context": "Suggest some books on personal development.",
                        "interrupt": "Can we talk about fiction instead?",
                        "timestamp": [3.0, 5.0],
                    }
                ],
            )
        atomic_write_json(
            tree / "manifest.json", ExportManifest(dataset="v1.0", samples=samples).dump()
        )
        ids = ["candor_turn_taking/1"] + [
            f"synthetic_user_interruption/{s.id}" for s in self.interrupts
        ]
        (self.root / "v10" / "sample-ids.txt").write_text("".join(i + "\n" for i in ids))


def judge_config(folder: Path, **changes) -> Path:
    """A valid judge config with its launch receipt in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    receipt = folder / "launch-receipt.json"
    receipt.write_text(json.dumps({"command": ["sglang", "serve"], "runtime": "test"}))
    config = {
        "model_id": "Qwen/Qwen3.8-27B",
        "model_revision": "a" * 40,
        "tokenizer_id": "Qwen/Qwen3.8-27B",
        "tokenizer_revision": "b" * 40,
        "served_model": "judge-model",
        "precision": "bf16",
        "enable_thinking": False,
        "decoding": {
            "temperature": 0.0,
            "top_p": 1.0,
            "top_k": -1,
            "min_p": 0.0,
            "repetition_penalty": 1.0,
            "max_tokens": 512,
        },
        "seeds": [1, 2, 3],
        "server_launch_receipt": "launch-receipt.json",
        "server_launch_receipt_sha256": sha256_file(receipt),
    }
    config.update(changes)
    path = folder / "judge-config.json"
    path.write_text(json.dumps(config, indent=2))
    return path
