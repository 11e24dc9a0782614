"""The local-checkpoint backends (UTMOS, WavLM-ECAPA) load a hash-checked TorchScript file and
call it with the documented contract. No real checkpoint is on this machine, so small scripted
stand-ins with the same call signature are written in the test: this checks fdb's loading,
hashing, identity and calling code, not the published models' numbers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fdb.errors import FdbError
from fdb.io import sha256_file
from fdb.models.mos import load_mos
from fdb.models.speaker import load_speaker


class LoudnessMos(torch.nn.Module):
    """UTMOS's contract: (batch, samples) float32 at `rate` -> one score per row."""

    def forward(self, wav: torch.Tensor, rate: int) -> torch.Tensor:
        return 1.0 + 4.0 * wav.abs().mean(dim=1).clamp(0.0, 1.0)


class FrameEmbedder(torch.nn.Module):
    """The ECAPA contract: (batch, samples) at 16 kHz -> one embedding per row."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(400, 8, bias=False)
        torch.nn.init.constant_(self.proj.weight, 0.01)

    def forward(self, wav: torch.Tensor) -> torch.Tensor:
        frames = wav[:, : wav.shape[1] // 400 * 400].reshape(wav.shape[0], -1, 400)
        return self.proj(frames).mean(dim=1)


def _save(module: torch.nn.Module, path) -> str:
    torch.jit.script(module).save(str(path))
    return sha256_file(path)


def test_utmos_checkpoint_scores_and_records_its_hash(tmp_path):
    path = tmp_path / "utmos.pt"
    sha = _save(LoudnessMos(), path)
    mos = load_mos(str(path), sha)
    assert mos.identity.name == "utmos" and mos.identity.checkpoint_sha256 == sha
    quiet, loud = np.full(16000, 0.05, np.float32), np.full(16000, 0.5, np.float32)
    assert mos.score(quiet) == pytest.approx(1.2, abs=1e-5)
    assert mos.score(loud) > mos.score(quiet)


def test_ecapa_checkpoint_embeds(tmp_path):
    path = tmp_path / "ecapa.pt"
    sha = _save(FrameEmbedder(), path)
    speaker = load_speaker(str(path), sha)
    assert (
        speaker.identity.name == "wavlm-large-ecapa" and speaker.identity.checkpoint_sha256 == sha
    )
    vec = speaker.embed(np.full(16000, 0.25, np.float32))
    assert vec.shape == (8,) and vec.dtype == np.float64
    assert vec == pytest.approx(np.full(8, 0.01 * 400 * 0.25), rel=1e-5)


def test_wrong_hash_missing_file_and_missing_hash_are_clear_errors(tmp_path):
    path = tmp_path / "utmos.pt"
    sha = _save(LoudnessMos(), path)
    with pytest.raises(FdbError, match=f"has sha256 {sha}, expected 0+") as err:
        load_mos(str(path), "0" * 64)
    assert "pinned checkpoint" in err.value.one_line()
    with pytest.raises(FdbError, match="does not exist"):
        load_speaker(str(tmp_path / "absent.pt"), sha)
    with pytest.raises(FdbError, match="needs its expected sha256"):
        load_mos(str(path), None)
    with pytest.raises(FdbError, match="needs its expected sha256"):
        load_speaker(str(path), "")
