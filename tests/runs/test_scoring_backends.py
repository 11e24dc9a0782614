"""Scoring backends chosen once per run (issue #24): `fdb asr --asr parakeet --mos utmos --speaker
wavlm-ecapa` on a small synthetic v1.0 repeat, with stand-ins of the published checkpoints that
keep their call signatures (no NeMo, UTMOS or WavLM weights are on this machine): a scripted
"NeMo" whose ASRModel.restore_from reads a small JSON checkpoint (ParakeetAsr itself runs: sha256
check, temporary WAV, hypothesis parsing), and the TorchScript UTMOS / ECAPA stand-ins of
tests/fdb/test_checkpoint_backends.py. Checked: run.json records the choice, a second `fdb asr`
keeps the transcripts, RESULTS.md names the backends, another backend is refused or goes side by
side, and a run transcribed by another model is never scored over."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import numpy as np
import pytest
import soundfile as sf

from benchmarks.support.listening_build import OUT_RATE, write_session
from benchmarks.support.treebuild import V10Tree, turn_json
from fdb.io import atomic_write_json, read_json, sha256_file
from fdb.layout import RunPaths
from fdb.records.listening import ListeningScores
from fdb.run_manifest import DatasetUse, RunManifest, ServerUse, save_manifest
from tests.fdb.test_checkpoint_backends import FrameEmbedder, LoudnessMos, _save
from tests.scorers.test_cli_score import cli

WORDS = ["hello", "there", "general", "kenobi"]


class StandInParakeet:
    """NeMo's ASRModel surface that ParakeetAsr calls: eval() and transcribe(paths, batch_size,
    timestamps, verbose) -> hypotheses with timestamp["word"]; the words come from the
    checkpoint."""

    def __init__(self, path: str):
        self.words = json.loads(Path(path).read_text())["words"]

    def eval(self):
        return self

    def transcribe(self, paths, batch_size=1, timestamps=False, verbose=True):
        seconds = sf.info(paths[0]).duration
        step = max(seconds - 0.4, 0.1) / len(self.words)
        stamps = [
            {"word": w, "start": round(0.2 + i * step, 3), "end": round(0.2 + (i + 0.8) * step, 3)}
            for i, w in enumerate(self.words)
        ]
        return [SimpleNamespace(timestamp={"word": stamps})]


@pytest.fixture
def nemo(monkeypatch, tmp_path) -> Path:
    """A stand-in `nemo` package in sys.modules and its small checkpoint (returned)."""
    asr = ModuleType("nemo.collections.asr")
    asr.models = SimpleNamespace(
        ASRModel=SimpleNamespace(
            restore_from=lambda restore_path, map_location=None: StandInParakeet(restore_path)
        )
    )
    for name, module in (
        ("nemo", ModuleType("nemo")),
        ("nemo.collections", ModuleType("nemo.collections")),
        ("nemo.collections.asr", asr),
    ):
        monkeypatch.setitem(sys.modules, name, module)
    checkpoint = tmp_path / "parakeet-standin.nemo"
    checkpoint.write_text(json.dumps({"words": WORDS}))
    return checkpoint


@pytest.fixture
def run(tmp_path, monkeypatch) -> RunPaths:
    """A recorded one-sample v1.0 repeat: a session with two 4 s replies and its exported window."""
    monkeypatch.setenv("FDB_WORK", str(tmp_path / "work"))
    run = RunPaths(tmp_path / "work" / "runs" / "r")
    rep = run.repeat(1)
    t = np.arange(4 * OUT_RATE) / OUT_RATE
    replies = [
        {
            "id": f"resp_{k}",
            "audio": (amp * (1 + np.sin(2 * np.pi * 220 * t)) / 2).astype(np.float32),
            "t": 2.0 + 5 * k,
            "transcript": "hello there general kenobi",
        }
        for k, amp in enumerate((0.3, 0.5))
    ]
    write_session(rep.v10_recording / "shard-0" / "candor_turn_taking" / "1" / "main", replies)
    tree = V10Tree(rep.v10_reference)
    tone = (0.3 * np.sin(2 * np.pi * 220 * np.arange(6 * 16000) / 16000)).astype(np.float32)
    tree.add("candor_turn_taking", "1", 6.0, annotation=turn_json(2.0), audio=tone)
    tree.manifest()
    save_manifest(
        run,
        RunManifest(
            run_name="r",
            num_shards=1,
            server=ServerUse(url=None, system="stand-in", model=None, turn_detection=None),
            datasets={
                "v1.0": DatasetUse(
                    dataset="v1.0",
                    root=str(tmp_path / "absent"),
                    source="synthetic",
                    revision=None,
                    selection={},
                    sample_ids=["candor_turn_taking/1"],
                )
            },
        ),
    )
    return run


def published(nemo: Path, tmp_path: Path) -> list[str]:
    utmos, ecapa = tmp_path / "utmos.pt", tmp_path / "ecapa.pt"
    return [
        "--asr",
        "parakeet",
        "--nemo",
        str(nemo),
        "--nemo-sha256",
        sha256_file(nemo),
        "--mos",
        "utmos",
        "--utmos-checkpoint",
        str(utmos),
        "--utmos-sha256",
        _save(LoudnessMos(), utmos),
        "--speaker",
        "wavlm-ecapa",
        "--speaker-checkpoint",
        str(ecapa),
        "--speaker-sha256",
        _save(FrameEmbedder(), ecapa),
    ]


def test_published_backends_are_chosen_once_and_kept(run, nemo, tmp_path, capsys):
    code, _, err = cli(["asr", "--run-name", "r", *published(nemo, tmp_path)], capsys)
    assert code == 0, err
    rep = run.repeat(1)
    scoring = read_json(run.manifest)["scoring"]
    assert [scoring[k]["name"] for k in ("asr", "mos", "speaker")] == [
        "parakeet",
        "utmos",
        "wavlm-ecapa",
    ]
    out = rep.v10_reference / "candor_turn_taking" / "1" / "output.json"
    assert read_json(out)["text"] == " ".join(WORDS)
    assert (
        read_json(rep.v10_reference / "asr.json")["backend"]["name"]
        == "nemo/nvidia/parakeet-tdt-0.6b-v2"
    )
    summary = read_json(rep.listening / "summary.json")
    assert {k: v["name"] for k, v in summary["backends"].items()} == {
        "asr": "nemo/nvidia/parakeet-tdt-0.6b-v2",
        "mos": "utmos",
        "speaker": "wavlm-large-ecapa",
    }
    assert all(
        r.mos is not None and r.voice_similarity is not None
        for r in ListeningScores.load(rep.listening / "scores.json").replies
    )

    inode, receipt = out.stat().st_ino, (rep.v10_reference / "asr.json").read_bytes()
    code, _, err = cli(["asr", "--run-name", "r"], capsys)  # no options: the run's backends again
    assert code == 0, err
    assert out.stat().st_ino == inode and (rep.v10_reference / "asr.json").read_bytes() == receipt

    code, _, err = cli(["aggregate", "--run-name", "r", "--quiet"], capsys)
    assert code == 0, err
    text = run.results_md.read_text()
    assert "| UTMOS mean | UTMOS p10 | Voice similarity mean |" in text and "| MOS mean" not in text
    assert (
        "- asr: nemo/nvidia/parakeet-tdt-0.6b-v2" in text
        and "Scoring backends (run.json): asr `parakeet" in text
    )


def test_another_backend_is_refused_or_scored_side_by_side(run, nemo, tmp_path, capsys):
    assert cli(["asr", "--run-name", "r", *published(nemo, tmp_path)], capsys)[0] == 0
    rep = run.repeat(1)
    listening = (rep.listening / "summary.json").read_bytes()
    code, _, err = cli(["asr", "--run-name", "r", "--asr", "faster-whisper"], capsys)
    assert code == 2 and "is scored with other backends" in err and "--side-by-side" in err
    for args, message in (
        (["--nemo", str(nemo)], "--nemo is given without --asr"),
        (["--mos", "utmos"], "--mos utmos needs --utmos-checkpoint PATH and --utmos-sha256 SHA"),
        (["--speaker", "ecapa"], "unknown speaker backend 'ecapa'"),
    ):
        code, _, err = cli(["asr", "--run-name", "r", *args], capsys)
        assert code == 2 and message in err
    code, out, _ = cli(["asr", "--help"], capsys)
    assert (
        code == 0
        and "another backend than the run's stops with an error before anything is written, unless "
        "--side-by-side"
        in " ".join(out.split())
    )
    other = tmp_path / "utmos-2.pt"

    class Louder(LoudnessMos):
        def forward(self, wav, rate: int):
            return 2.0 + wav.abs().mean(dim=1)

    flags = [
        "--mos",
        "utmos",
        "--utmos-checkpoint",
        str(other),
        "--utmos-sha256",
        _save(Louder(), other),
    ]
    code, _, err = cli(["asr", "--run-name", "r", *flags, "--side-by-side"], capsys)
    assert code == 0, err
    side = rep.root / "scoring" / "parakeet+utmos+wavlm-ecapa"
    assert read_json(side / "scoring.json")["backends"]["mos"]["checkpoint_sha256"] == sha256_file(
        other
    )
    assert read_json(side / "v10" / "reference" / "candor_turn_taking" / "1" / "output.json")[
        "text"
    ] == " ".join(WORDS)
    moses = [r.mos for r in ListeningScores.load(side / "listening" / "scores.json").replies]
    assert moses and all(m >= 2.0 for m in moses)
    assert (
        rep.listening / "summary.json"
    ).read_bytes() == listening  # the run's own outputs untouched
    assert read_json(run.manifest)["scoring"]["mos"]["sha256"] != sha256_file(other)


def test_a_run_transcribed_by_another_model_is_not_scored_over(run, nemo, tmp_path, capsys):
    assert cli(["asr", "--run-name", "r", *published(nemo, tmp_path)], capsys)[0] == 0
    doc = read_json(run.manifest)
    doc.pop("scoring")  # as after `fdb score transcribe --asr parakeet` on the run's tree
    atomic_write_json(run.manifest, doc)
    receipt = run.repeat(1).v10_reference / "asr.json"
    before = receipt.read_bytes()
    code, _, err = cli(["asr", "--run-name", "r"], capsys)
    assert code == 2 and f"{receipt} holds asr results of nemo/nvidia/parakeet-tdt-0.6b-v2" in err
    assert receipt.read_bytes() == before and "scoring" not in read_json(run.manifest)
    code, _, err = cli(["score", "transcribe", "--tree", str(receipt.parent)], capsys)
    assert (
        code == 2
        and "holds transcripts of nemo/nvidia/parakeet-tdt-0.6b-v2" in err
        and "--replace" in err
    )
    assert receipt.read_bytes() == before
