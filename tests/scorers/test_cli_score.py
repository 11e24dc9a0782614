"""`python -m fdb score v10` on the reference tree: per-subset metrics with value, interval and
count, the official-rule reference column, n/a cells, stale-reference lines and refusals."""

from __future__ import annotations

import pytest

from fdb.cli import main
from fdb.io import atomic_write_json, read_json, sha256_file
from fdb.records import ExportManifest
from scorers.v10_evaluator import PINNED_FILES
from tests.scorers.test_asr_v15 import build
from tests.scorers.test_v10_unified import reference_tree


def cli(argv, capsys) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``python -m fdb ARGV``
    (main may or may not sys.exit on success)."""
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 0
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run(argv, capsys) -> str:
    code, out, err = cli(argv, capsys)
    assert code == 0, err
    return out


def test_score_v10_prints_metrics_and_reference(tmp_path, reference, capsys):
    root = reference_tree(tmp_path / "tree", reference)
    gt = reference.parent / "icc_gt_distribution.json"
    out = run(["score", "v10", "--tree", str(root), "--icc-gt", str(gt)], capsys)
    lines = out.splitlines()

    def row(metric):
        return next(line for line in lines if line.startswith(f"│ {metric} "))

    assert (
        "candor_turn_taking (turn_taking): declared n/a, selected 2, eligible 1" in out
    )  # no dataset known
    assert "1.350" in row("response_latency_s median") and "1/1 observed" in row(
        "response_latency_s median"
    )
    assert "[0.000, 0.500]" in row("early_start_rate") and "0/1" in row("early_start_rate")
    assert (
        "exercised 0" in out
        and "n/a" in row("speaking_at_end_rate")
        and "[0.000, 1.000]" in row("restart_rate")
    )
    latencies = [line for line in lines if line.startswith("│ latency (s)")]
    assert "1.350" in latencies[0] and "4.080" in latencies[1]  # turn-taking, interruption
    assert "1.000" in [line for line in lines if line.startswith("│ takeover rate")][0]
    assert "1.000" in row("backchannel JSD") and "icc_backchannel official-rule reference" in out
    doc = read_json(root / "official.json")
    assert doc["subsets"]["candor_turn_taking"]["latency_s"] == pytest.approx(1.35)
    assert (root / "unified.json").exists()

    doc["asr_sha256"] = "0" * 64
    atomic_write_json(root / "official.json", doc)
    stale = run(["score", "v10", "--tree", str(root), "--no-official"], capsys)
    assert "official.json left out: asr.json changed since it was written" in stale
    assert "official-rule reference" not in stale


def test_score_v10_refusals_and_help(tmp_path, capsys):
    checkout = tmp_path / "Full-Duplex-Bench"
    for rel in PINNED_FILES:
        (checkout / rel).parent.mkdir(parents=True, exist_ok=True)
        (checkout / rel).write_text("not the real file\n")
    code, _, err = cli(
        ["score", "v10", "--tree", str(tmp_path), "--reference-source", str(checkout)], capsys
    )
    assert (
        code == 2
        and "not the pinned Full-Duplex-Bench 3e799c4" in err
        and "--accept-revision" in err
    )
    code, _, err = cli(
        [
            "score",
            "v10",
            "--tree",
            str(tmp_path),
            "--reference-source",
            str(checkout),
            "--accept-revision",
            "3e799c4",
        ],
        capsys,
    )
    assert (
        code == 2 and "is not a git work tree" in err
    )  # accepting needs a revision git can vouch for
    code, _, err = cli(
        ["score", "v10", "--tree", str(tmp_path), "--accept-revision", "3e799c4"], capsys
    )
    assert code == 2 and "--accept-revision needs --reference-source" in err
    code, _, err = cli(
        ["score", "v10", "--tree", str(tmp_path), "--backchannel-rule", "2024"], capsys
    )
    assert code == 2 and "--backchannel-rule '2024' is unknown" in err
    code, _, err = cli(["score", "v10", "--tree", str(tmp_path)], capsys)
    assert code == 2 and "manifest.json is missing" in err
    code, _, err = cli(["score", "transcribe", "--tree", str(tmp_path)], capsys)
    assert code == 2 and "neither manifest.json" in err
    manifest = ExportManifest(dataset="v1.0", samples=[]).dump()
    atomic_write_json(tmp_path / "t" / "manifest.json", manifest)
    code, _, err = cli(
        ["score", "transcribe", "--tree", str(tmp_path / "t"), "--asr", "parakeet"], capsys
    )
    assert code == 2 and "--asr parakeet needs --nemo" in err
    text = " ".join(run(["score", "v10", "--help"], capsys).split())
    for phrase in (
        "--reference-source",
        "--icc-gt",
        "before-2026-02-22",
        "assume-16k",
        "official-rule reference",
    ):
        assert phrase in text


def test_score_transcribe_v15_tree(tmp_path, reference, capsys):
    build(tmp_path, reference)
    for name in (
        "input.wav",
        "clean_input.wav",
        "output.wav",
        "clean_output.wav",
    ):  # keep the model idle
        (tmp_path / "user_interruption/1" / name).write_bytes(
            (tmp_path / "user_backchannel/2/input.wav").read_bytes()
        )
    doc = read_json(tmp_path / "reference-manifest.json")
    doc["samples"][0]["files"] = {
        n: sha256_file(tmp_path / "user_interruption/1" / n)
        for n in ("input.wav", "clean_input.wav", "output.wav", "clean_output.wav")
    }
    atomic_write_json(tmp_path / "reference-manifest.json", doc)
    code, _, err = cli(["score", "transcribe", "--tree", str(tmp_path)], capsys)
    assert code == 1 and "user_backchannel/2" in err and "faster-whisper/whisper-tiny.en" in err
    receipt = read_json(tmp_path / "asr.json")
    assert [p["status"] for p in receipt["samples"]] == ["ok", "failed", "skipped"]
    assert read_json(tmp_path / "user_interruption/1/clean_output.json") == {
        "text": "",
        "chunks": [],
    }
