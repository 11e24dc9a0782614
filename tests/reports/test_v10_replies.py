"""The v1.0 replies section of RESULTS.md reads the export manifest and each window's output.json
through their records (fdb.records ExportManifest, OfficialTranscript); the asr phase writes
output.json through OfficialTranscript, byte for byte as before."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.support.treebuild import V10Tree
from fdb.errors import FdbError
from fdb.io import dumps_json
from fdb.layout import RepeatPaths
from fdb.models import BackendIdentity
from fdb.models.asr import Transcript, Word
from fdb.records import OfficialTranscript
from reports.v10 import replies_section
from scorers.asr_phase import run_v10_asr


class FakeAsr:
    """Three words (the last without an end) on the first clip, none on the second, 16 on the
    third."""

    identity = BackendIdentity(kind="asr", name="fake")

    def __init__(self):
        self.calls = 0

    def transcribe(self, samples):
        self.calls += 1
        if self.calls == 2:
            return Transcript("", [])
        words = [
            Word(f"w{i} ", 0.1 * i + 1 / 3, None if i == 2 else 0.1 * i + 0.5)
            for i in range(16 if self.calls == 3 else 3)
        ]
        return Transcript(" ".join(w.text for w in words), words)


@pytest.fixture
def repeat(tmp_path) -> RepeatPaths:
    rep = RepeatPaths(tmp_path / "repeat-1", 1)
    tree = V10Tree(rep.v10_reference)
    rng = np.random.default_rng(0)
    for subset, sid in (
        ("candor_turn_taking", "1"),
        ("candor_turn_taking", "2"),
        ("synthetic_pause_handling", "3"),
    ):
        tree.add(subset, sid, 2.0, audio=rng.normal(0, 0.1, 32000).astype(np.float32))
    tree.add("candor_turn_taking", "4", 2.0, eligible=False, reasons=("pacing", "late"))
    tree.finish(with_asr=False)
    run_v10_asr(tree.root, asr=FakeAsr())
    return rep


def test_output_json_reads_back_byte_for_byte(repeat):
    paths = sorted(repeat.v10_reference.rglob("output.json"))
    assert len(paths) == 3
    for path in paths:
        assert dumps_json(OfficialTranscript.load(path).dump()) == path.read_text()
    first = OfficialTranscript.load(repeat.v10_reference / "candor_turn_taking/1/output.json")
    assert first.text == "w0  w1  w2 " and first.chunks[2].timestamp == (0.533333, None)


def test_replies_section_through_the_records(repeat):
    lines = replies_section(repeat).lines
    assert lines[4:8] == [
        "| candor_turn_taking/1 | - | 3 | 0.333 | w0 w1 w2 |",
        "| candor_turn_taking/2 | - | 0 | n/a | (no words) |",
        "| synthetic_pause_handling/3 | - | 16 | 0.333 | "
        "w0 w1 w2 w3 w4 w5 w6 w7 w8 w9 w10 w11 w12 w13 … |",
        "| candor_turn_taking/4 | ineligible: pacing, late | n/a | n/a |  |",
    ]
    path = repeat.v10_reference / "candor_turn_taking/2/output.json"
    path.write_text('{"text": "a", "chunks": [{"text": "a"}]}')
    with pytest.raises(FdbError, match=r"output.json: chunks.0.timestamp: Field required") as err:
        replies_section(repeat)
    assert str(path) in err.value.message and "rerun the asr phase" in err.value.hint
    path.unlink()  # not transcribed (yet): no words
    assert "| candor_turn_taking/2 | - | 0 | n/a | (no words) |" in replies_section(repeat).lines
    manifest = repeat.v10_reference / "manifest.json"
    manifest.write_text(manifest.read_text()[:-9])
    with pytest.raises(FdbError, match="manifest.json is not valid JSON") as err:
        replies_section(repeat)
    assert "backfill" in err.value.hint
