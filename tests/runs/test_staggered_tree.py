"""benchmarks/cascade_capacity.staggered_tree: a v1.0 turn-taking cohort whose sessions start at
spread phases (gpu_cascade.py --stagger-s), read back by fdb's own v1.0 loader."""

from __future__ import annotations

import numpy as np

from benchmarks.cascade_capacity import SUBSET, staggered_tree
from fdb.audio import read_wav, write_wav
from fdb.datasets.official import load_v10
from fdb.io import atomic_write_json

RATE = 16000


def _tree(root, n):
    for k in range(1, n + 1):
        sample = root / SUBSET / str(k)
        sample.mkdir(parents=True)
        tone = np.concatenate([np.zeros(8192), 0.3 * np.ones(RATE), np.zeros(5 * RATE)])
        write_wav(sample / "input.wav", tone.astype(np.float32), RATE)
        atomic_write_json(sample / "turn_taking.json", [{"text": "[T]", "timestamp": [1.512, 5.0]}])
        atomic_write_json(
            sample / "transcription.json",
            [{"speaker": 1, "item": [{"text": "Hi", "timestamp": [0.512, 1.512]}]}],
        )
    return root


def test_sample_j_of_n_starts_spread_j_over_n_later(tmp_path):
    root = _tree(tmp_path / "src" / "v1.0", 4)
    tree = staggered_tree(root, tmp_path / "out", 2.0)
    loaded, _ = load_v10(tree, [SUBSET], strict=False)
    ends = {s.sample_id: s.turn_end_s for s in loaded[SUBSET]}
    leads = [0.0, 0.496, 0.992, 1.504]  # 2 s * j / 4 on the 16 ms grid
    for k, lead in enumerate(leads, 1):
        key = next(sid for sid in ends if sid.endswith(str(k)))
        assert abs(ends[key] - (1.512 + lead)) < 1e-6
        original = read_wav(root / SUBSET / str(k) / "input.wav")
        moved = read_wav(tree / SUBSET / str(k) / "input.wav")
        assert len(moved.samples) - len(original.samples) == round(lead * RATE)
        np.testing.assert_array_equal(moved.samples[round(lead * RATE) :], original.samples)
    assert (tmp_path / "out" / "v1.0.revision").read_text().startswith("fdb-stagger-2s-")
    first = staggered_tree(root, tmp_path / "first", 2.0, count=2)
    assert sorted(d.name for d in (first / SUBSET).iterdir()) == ["1", "2"]
