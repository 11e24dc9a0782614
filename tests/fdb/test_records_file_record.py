"""#26: every record of fdb.records that is one JSON file is read by the one FileRecord.load: each
declares its FIX (the default fix hint) and no other load, except the two whose missing file is
an error (TtsRun, TtsReport). A missing file, a file that is not JSON and a mistyped one read as
before: None, ``PATH is not valid JSON (...)`` and ``PATH: field: problem``, each with the
record's FIX or the caller's positional fix."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import fdb.records
from fdb.errors import FdbError
from fdb.records import ASR_FIX, TRANSCRIPT_FIX, AsrReceipt, FileRecord, OfficialTranscript
from fdb.records.judge import REJUDGE, JudgeSummary
from fdb.records.listening import RESCORE_DAMAGED, ListeningReplies
from fdb.records.serving import SweepReport
from fdb.records.tts import QualitySummary, TtsReport, TtsRun
from fdb.records.v10 import RESCORE_FIX, UnifiedStamp
from fdb.records.v15 import RESCORE, TimingSummary

# the records that override FileRecord.load, and why: a missing file is an error there
OVERRIDES = {TtsRun: "a tts-bench writes run.json first", TtsReport: "the bench did not finish"}


def _record_classes() -> list[type]:
    """Every class defined in fdb.records and its submodules."""
    modules = [fdb.records] + [
        importlib.import_module(f"fdb.records.{info.name}")
        for info in pkgutil.iter_modules(fdb.records.__path__)
    ]
    return [
        cls
        for module in modules
        for cls in vars(module).values()
        if inspect.isclass(cls) and cls.__module__ == module.__name__
    ]


def test_every_file_record_declares_its_fix_and_no_other_load():
    classes = _record_classes()
    loaders = [cls for cls in classes if hasattr(cls, "load")]
    assert len(loaders) >= 19  # FileRecord and the 18 records it reads
    for cls in loaders:
        assert issubclass(cls, FileRecord), f"{cls.__name__}.load is not FileRecord.load"
        if cls is FileRecord:
            continue
        assert isinstance(cls.FIX, str) and cls.FIX, f"{cls.__name__} declares no FIX"
        assert "FIX" in vars(cls), f"{cls.__name__} inherits its FIX: declare it"
        if "load" in vars(cls):
            assert cls in OVERRIDES, f"{cls.__name__} overrides load: say why in OVERRIDES"


@pytest.mark.parametrize(
    ("record", "fix"),
    [
        (AsrReceipt, ASR_FIX),
        (OfficialTranscript, TRANSCRIPT_FIX),
        (UnifiedStamp, RESCORE_FIX),
        (TimingSummary, RESCORE),
        (JudgeSummary, REJUDGE),
        (ListeningReplies, RESCORE_DAMAGED),
        (QualitySummary, "score the quality again: rerun the tts-bench into a new --output"),
        (SweepReport, SweepReport.FIX),
    ],
)
def test_a_missing_damaged_or_mistyped_file_reads_as_before(tmp_path, record, fix):
    path = tmp_path / "record.json"
    assert record.load(path) is None and record.load(path, "HINT") is None
    path.write_text('{"schema": ')
    for given, hint in ((), fix), (("HINT",), "HINT"):
        with pytest.raises(FdbError) as err:
            record.load(path, *given)
        assert err.value.message == (
            f"{path} is not valid JSON (Expecting value: line 1 column 12 (char 11))"
        )
        assert err.value.hint == hint
    path.write_text('{"schema": 3}')
    with pytest.raises(FdbError) as err:
        record.load(path)
    first = "text: Field required" if record is OfficialTranscript else "schema: Input should be"
    assert err.value.message.startswith(f"{path}: {first}") and err.value.hint == fix


def test_the_tts_records_raise_on_a_missing_file(tmp_path):
    path = tmp_path / "bench" / "tts.json"
    with pytest.raises(FdbError) as err:
        TtsReport.load(path)
    assert (
        err.value.message == f"{path} is missing: the tts-bench report (the bench did not finish)"
    )
    assert err.value.hint == (
        f"finish the bench, or rebuild it with `python -m fdb tts-bench --output {path.parent} "
        "--report-only`"
    )
    with pytest.raises(FdbError) as err:
        TtsReport.load(path, "HINT")
    assert err.value.hint == "HINT"
    with pytest.raises(FdbError) as err:
        TtsRun.load(path.parent / "run.json")
    assert err.value.message == f"{path.parent} holds no run.json"
    assert err.value.hint == "pass the --output of an earlier tts-bench run"
