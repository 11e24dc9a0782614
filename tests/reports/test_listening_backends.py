"""The listening section of RESULTS.md follows its backends: column names from the MOS and
speaker backends, and never a cell over repeats scored with different models."""

from __future__ import annotations

from fdb.io import atomic_write_json
from fdb.layout import RunPaths
from fdb.records.listening import GroupSummary, ListeningSummary
from reports.listening import listening_section

UTMOS = {"kind": "mos", "name": "utmos", "checkpoint_sha256": "a" * 64}
DNSMOS = {"kind": "mos", "name": "dnsmos-ovrl", "checkpoint_sha256": "b" * 64}
ECAPA = {"kind": "speaker", "name": "wavlm-large-ecapa", "checkpoint_sha256": "c" * 64}
RESEMBLYZER = {"kind": "speaker", "name": "resemblyzer-ge2e", "checkpoint_sha256": "d" * 64}


def _summary(rep, mos: dict, speaker: dict, mos_mean: float) -> None:
    cell = GroupSummary(
        dataset="v1.5",
        category="all",
        replies=4,
        short_replies=0,
        compared_replies=4,
        cancelled_replies=0,
        reference_words=40,
        omitted_words=4,
        omission_rate=0.1,
        wer=0.2,
        wer_reference_words=40,
        mos_n=4,
        mos_mean=mos_mean,
        mos_p10=mos_mean - 0.5,
        voice_n=4,
        voice_mean=80.0,
        voice_p10=70.0,
    )
    summary = ListeningSummary(
        definitions={},
        backends={"asr": None, "mos": mos, "speaker": speaker},
        datasets={"v1.5": {"all": cell}},
    )
    atomic_write_json(rep.listening / "summary.json", summary.dump())


def test_columns_follow_the_backends_and_other_models_stay_out_of_the_cells(tmp_path):
    run = RunPaths(tmp_path / "r")
    _summary(run.repeat(1), UTMOS, ECAPA, 4.0)
    _summary(run.repeat(2), UTMOS, ECAPA, 3.0)
    _summary(run.repeat(3), DNSMOS, ECAPA, 1.0)  # another MOS model: not averaged with UTMOS
    section = listening_section(run.repeats())
    header = next(line for line in section.lines if line.startswith("| Category"))
    assert "| UTMOS mean | UTMOS p10 | Voice similarity mean |" in header and "DNSMOS" not in header
    assert "3.500 ± 0.707" in next(line for line in section.lines if line.startswith("| all"))
    assert any(
        "repeat-3 left out: scored with another mos backend (dnsmos-ovrl, not utmos)" in line
        for line in section.lines
    )
    _summary(run.repeat(1), DNSMOS, RESEMBLYZER, 2.0)
    _summary(run.repeat(2), DNSMOS, RESEMBLYZER, 2.0)
    header = next(
        line for line in listening_section(run.repeats()[:2]).lines if line.startswith("| Category")
    )
    assert (
        "| DNSMOS (OVRL) mean |" in header
        and "| Voice similarity (resemblyzer-ge2e) mean |" in header
    )


def test_transcripts_of_different_asr_models_are_flagged_in_the_header(tmp_path):
    from reports.results import mixed_asr_lines

    run = RunPaths(tmp_path / "r")
    parakeet = {
        "kind": "asr",
        "name": "nemo/nvidia/parakeet-tdt-0.6b-v2",
        "checkpoint_sha256": "e" * 64,
    }
    whisper = {
        "kind": "asr",
        "name": "faster-whisper/whisper-tiny.en",
        "checkpoint_sha256": "f" * 64,
    }
    for n, ident in ((1, parakeet), (2, parakeet | {"version": "2.6"})):
        atomic_write_json(run.repeat(n).v10_reference / "asr.json", {"backend": ident})
    assert mixed_asr_lines(run.repeats()) == []  # a package version is not another model
    atomic_write_json(run.repeat(2).reference_audio / "asr.json", {"backend": whisper})
    (line,) = mixed_asr_lines(run.repeats())
    assert "repeat-2/reference-audio faster-whisper/whisper-tiny.en" in line and "mix them" in line
