"""The Seed-TTS list loader on small hand-made trees in the official layout."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from fdb.datasets.seedtts import load_seedtts
from fdb.errors import FdbError, SampleError


def _wav(path: Path, seconds: float = 0.5) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(path, np.zeros(int(16000 * seconds), dtype=np.int16), 16000, subtype="PCM_16")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "seedtts_testset"
    for name in ("p1", "p2"):
        _wav(root / "en" / "prompt-wavs" / f"common_voice_en_{name}.wav")
    _wav(root / "en" / "wavs" / "common_voice_en_p1-common_voice_en_t1.wav")
    _wav(root / "zh" / "prompt-wavs" / "10002287-00000094.wav")
    (root / "en" / "meta.lst").write_text(
        "common_voice_en_p1-common_voice_en_t1|Prompt one.|prompt-wavs/common_voice_en_p1.wav"
        "|Target one.|wavs/common_voice_en_p1-common_voice_en_t1.wav\n"
        "\n"
        "  common_voice_en_p2-common_voice_en_t2 | Prompt two. | prompt-wavs/common_voice_en_p2.wav"
        " | Target two.\r\n"
    )
    (root / "zh" / "meta.lst").write_text(
        "10002287-00000095|在一无所知中。|prompt-wavs/10002287-00000094.wav|我们走吧。\n"
    )
    (root / "zh" / "hardcase.lst").write_text(
        "hard_1|提示。|prompt-wavs/10002287-00000094.wav|八百标兵奔北坡。\n"
    )
    return root


def test_lists_load_with_paths_relative_to_each_list(root: Path) -> None:
    data = load_seedtts(root, check_audio=True)
    assert data.counts == {"en/meta.lst": 2, "zh/meta.lst": 1, "zh/hardcase.lst": 1}
    first, second = data.lists["en/meta.lst"]
    assert first.id == "common_voice_en_p1-common_voice_en_t1" and first.line == 1
    assert first.prompt_wav == root / "en" / "prompt-wavs" / "common_voice_en_p1.wav"
    assert first.gt_wav == root / "en" / "wavs" / "common_voice_en_p1-common_voice_en_t1.wav"
    assert (first.prompt_text, first.target_text) == ("Prompt one.", "Target one.")
    assert second.line == 3 and second.gt_wav is None and second.target_text == "Target two."
    hard = data.lists["zh/hardcase.lst"][0]
    assert hard.prompt_wav == root / "zh" / "prompt-wavs" / "10002287-00000094.wav"
    assert hard.target_text == "八百标兵奔北坡。"
    assert "en/meta.lst 2 (official: 1,088)" in data.summary()
    assert list(load_seedtts(root, ["zh/hardcase.lst"]).counts) == ["zh/hardcase.lst"]


def _append(root: Path, line: str) -> int:
    path = root / "en" / "meta.lst"
    text = path.read_text() + line + "\n"
    path.write_text(text)
    return len(text.splitlines())


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        (
            "u3|Prompt.|prompt-wavs/common_voice_en_p1.wav",
            "row has 3 '|'-separated fields, expected 4 or 5",
        ),
        (
            "u3|P|prompt-wavs/common_voice_en_p1.wav|T|wavs/x.wav|extra",
            "row has 6 '|'-separated fields",
        ),
        ("u3|P|../../outside.wav|T", "escapes the dataset root"),
        ("u3|P|prompt-wavs/../../../x.wav|T", "escapes the dataset root"),
        ("u3|P|/etc/hostname|T", "escapes the dataset root"),
        ("u3|P|prompt-wavs/missing.wav|T", "prompt wav prompt-wavs/missing.wav is missing"),
        (
            "u3|P|prompt-wavs/common_voice_en_p1.wav|T|wavs/none.wav",
            "ground-truth wav wavs/none.wav is missing",
        ),
        ("u3|P|prompt-wavs/common_voice_en_p1.wav|", "empty target text"),
        (
            "common_voice_en_p2-common_voice_en_t2|P|prompt-wavs/common_voice_en_p1.wav|T",
            "duplicate utt_id",
        ),
    ],
)
def test_bad_rows_name_the_list_line_and_fix(root: Path, line: str, needle: str) -> None:
    number = _append(root, line)
    with pytest.raises(SampleError) as err:
        load_seedtts(root)
    assert needle in err.value.message and err.value.hint
    assert err.value.sample.startswith("en/meta.lst")
    if "fields" in needle:
        assert err.value.sample == f"en/meta.lst:{number}" and f"line {number}" in err.value.hint
    data, problems = load_seedtts(root, strict=False)  # the other rows are kept
    assert data.counts == {"en/meta.lst": 2, "zh/meta.lst": 1, "zh/hardcase.lst": 1}
    assert len(problems) == 1 and needle in problems[0].message


def test_unreadable_audio_only_with_check_audio(root: Path) -> None:
    (root / "en" / "prompt-wavs" / "common_voice_en_p2.wav").write_bytes(b"RIFF garbage")
    assert load_seedtts(root).counts["en/meta.lst"] == 2  # existence only
    with pytest.raises(SampleError, match="unreadable WAV"):
        load_seedtts(root, check_audio=True)


def test_symlinked_roots_and_inside_absolute_paths_work(root: Path, tmp_path: Path) -> None:
    inside = root / "en" / "prompt-wavs" / "common_voice_en_p2.wav"
    _append(root, f"u9|P|{inside}|T")
    link = tmp_path / "linked"
    link.symlink_to(root, target_is_directory=True)
    data = load_seedtts(link)
    assert data.counts["en/meta.lst"] == 3 and data.lists["en/meta.lst"][2].prompt_wav == inside
    assert (
        data.lists["en/meta.lst"][0].prompt_wav
        == link / "en" / "prompt-wavs" / "common_voice_en_p1.wav"
    )


def test_missing_root_lists_and_unknown_names(tmp_path: Path, root: Path) -> None:
    with pytest.raises(FdbError, match="does not exist") as err:
        load_seedtts(tmp_path / "nowhere")
    assert "SEED_TTS_DATASET" in err.value.hint
    (tmp_path / "empty").mkdir()
    with pytest.raises(FdbError, match="holds none of the Seed-TTS lists"):
        load_seedtts(tmp_path / "empty")
    with pytest.raises(FdbError, match="not a Seed-TTS list"):
        load_seedtts(root, ["en/other.lst"])
    with pytest.raises(FdbError, match="cannot read the Seed-TTS list"):
        load_seedtts(tmp_path / "empty", ["en/meta.lst"])
