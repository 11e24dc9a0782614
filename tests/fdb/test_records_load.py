"""#26: asr.json, unified.json and official.json are written and read back through their records
(fdb.records): the bytes a writer puts on disk are the record's dump, the same keys as before,
and a damaged file is one FdbError naming it and the fix."""

from __future__ import annotations

import json

import pytest

from fdb.errors import FdbError
from fdb.io import atomic_write_json, dumps_json
from fdb.records import (
    ASR_SCHEMA,
    V15_ASR_SCHEMA,
    AsrReceipt,
    AsrReceiptHead,
    AsrSampleReceipt,
    V15AsrFile,
    V15AsrPair,
    V15AsrReceipt,
    asr_backend,
)
from fdb.records.v10 import UNIFIED_SCHEMA, UnifiedResult, UnifiedStamp
from fdb.records.v10_reference import OfficialSummary

BACKEND = {"kind": "asr", "name": "faster-whisper/whisper-tiny.en", "version": "1.1"}


def _v10_receipt() -> AsrReceipt:
    return AsrReceipt(
        backend=BACKEND,
        manifest_sha256="a" * 64,
        samples=[
            AsrSampleReceipt(
                sample_id="candor_turn_taking/1",
                status="ok",
                output_wav_sha256="b" * 64,
                output_json_sha256="c" * 64,
                words=3,
            ),
            AsrSampleReceipt(sample_id="candor_turn_taking/2", status="skipped", error="x"),
        ],
        provenance={"fdb_revision": "r"},
    )


def _v15_receipt() -> V15AsrReceipt:
    files = {"output.wav": V15AsrFile(status="ok", wav_sha256="d" * 64, json_sha256="e" * 64)}
    return V15AsrReceipt(
        backend=BACKEND,
        manifest_sha256="f" * 64,
        samples=[V15AsrPair(sample_id="user_interruption/1", status="ok", files=files)],
    )


@pytest.mark.parametrize(
    ("receipt", "schema"), [(_v10_receipt(), ASR_SCHEMA), (_v15_receipt(), V15_ASR_SCHEMA)]
)
def test_an_asr_receipt_reads_back_to_the_bytes_its_writer_wrote(tmp_path, receipt, schema):
    path = tmp_path / "asr.json"
    atomic_write_json(path, receipt.dump())
    doc = json.loads(path.read_text())
    assert list(doc) == ["backend", "manifest_sha256", "provenance", "samples", "schema"]
    assert doc["schema"] == schema and doc["backend"] == BACKEND
    loaded = type(receipt).load(path)
    assert loaded == receipt and dumps_json(loaded.dump()) == path.read_text()
    assert AsrReceiptHead.load(path).backend == BACKEND == asr_backend(tmp_path)


def test_a_missing_or_identity_less_receipt_names_no_backend(tmp_path):
    assert AsrReceipt.load(tmp_path / "asr.json") is None and asr_backend(tmp_path) is None
    (tmp_path / "asr.json").write_text("{}")
    assert asr_backend(tmp_path) is None


@pytest.mark.parametrize(
    "reader",
    [AsrReceipt.load, V15AsrReceipt.load, AsrReceiptHead.load, lambda p: asr_backend(p.parent)],
)
@pytest.mark.parametrize("text", ['{"samples": [', '{"backend": "whisper", "samples": 3}'])
def test_a_damaged_asr_receipt_is_one_line_naming_it_and_the_fix(tmp_path, reader, text):
    path = tmp_path / "asr.json"
    path.write_text(text)
    with pytest.raises(FdbError) as err:
        reader(path)
    line = err.value.one_line()
    assert "\n" not in line and str(path) in line and "rerun the asr phase" in line


def test_unified_stamp_tells_an_older_or_stale_file_from_a_damaged_one(tmp_path):
    path = tmp_path / "unified.json"
    assert UnifiedStamp.load(path) is None and UnifiedResult.load(path) is None
    path.write_text(json.dumps({"definitions": "fdb-v1.0-unified-1", "vad": {"name": "silero"}}))
    stamp = UnifiedStamp.load(path)
    assert stamp.schema_ is None and stamp.definitions == "fdb-v1.0-unified-1"
    assert stamp.vad == {"name": "silero"} and stamp.stale("m", "a") == "manifest.json"
    path.write_text(
        json.dumps(
            {"schema": UNIFIED_SCHEMA, "inputs": {"manifest_sha256": "m", "asr_sha256": "x"}}
        )
    )
    assert UnifiedStamp.load(path).stale("m", "a") == "asr.json"
    assert UnifiedStamp.load(path).stale("m", "x") is None
    with pytest.raises(FdbError, match=f"{path}: inputs.asr_backend: Field required"):
        UnifiedResult.load(path)
    path.write_text('{"schema": ')
    with pytest.raises(FdbError, match=f"{path} is not valid JSON"):
        UnifiedStamp.load(path)


def test_a_damaged_official_json_is_one_line_naming_it(tmp_path):
    path = tmp_path / "official.json"
    assert OfficialSummary.load(path) is None
    path.write_text(json.dumps({"schema": "x"}))
    with pytest.raises(FdbError, match=f"{path}: manifest_sha256: Field required") as err:
        OfficialSummary.load(path)
    assert "python -m fdb score v10" in err.value.one_line()
