"""Official-layout loaders, on the real reference examples laid out in a tmp tree."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from fdb.datasets.official import list_ids, load_v10, load_v15, sample_dirs
from fdb.errors import FdbError, SampleError
from tests.conftest import EXAMPLES, needs_examples

LAYOUT = {  # official subset -> reference example folder
    "synthetic_pause_handling": "pause_handling_example",
    "candor_turn_taking": "smooth_turn_taking_example",
    "synthetic_user_interruption": "user_interruption_example",
}

pytestmark = needs_examples


def _lay_out(root: Path, subset: str, sample: str, example: str, copy: bool = False) -> Path:
    dest = root / subset / sample
    dest.mkdir(parents=True)
    for src in sorted((EXAMPLES / example / "1").iterdir()):
        if copy:
            shutil.copy(src, dest / src.name)
        else:
            (dest / src.name).symlink_to(src)
    return dest


@pytest.fixture
def v10_root(tmp_path: Path) -> Path:
    root = tmp_path / "v1.0"
    for subset, example in LAYOUT.items():
        _lay_out(root, subset, "1", example, copy=True)  # copied, as the official archive unpacks
    return root


def test_reference_examples_load(v10_root: Path) -> None:
    loaded = load_v10(v10_root)
    assert list(loaded) == list(LAYOUT)  # present subsets only, in the official order
    pause = loaded["synthetic_pause_handling"][0]
    assert pause.rate == 48000 and pause.duration_s == pytest.approx(4.72)
    assert pause.task == "pause_handling" and pause.annotation.name == "pause.json"
    assert pause.pauses == [pytest.approx((3.32, 4.0))]
    turn = loaded["candor_turn_taking"][0]
    assert turn.rate == 16000 and turn.duration_s == pytest.approx(10.4)
    assert turn.turn_end_s == 2.0100000000000016
    interrupt = loaded["synthetic_user_interruption"][0]
    assert interrupt.interrupt == (10.530666666666667, 13.144)
    assert interrupt.interrupt_text.startswith("Can we talk about something else?")
    assert interrupt.interrupt_context.startswith("Could you suggest some books")
    assert interrupt.sample_id == "synthetic_user_interruption/1"


def test_numeric_order_and_non_digit_folders(v10_root: Path) -> None:
    subset = v10_root / "candor_turn_taking"
    for name in ("10", "2"):
        shutil.copytree(subset / "1", subset / name, symlinks=True)
    (subset / "notes").mkdir()
    (subset / "README.md").write_text("x")
    assert [d.name for d in sample_dirs(subset)] == ["1", "2", "10"]
    assert [s.id for s in load_v10(v10_root, ["candor_turn_taking"])["candor_turn_taking"]] == [
        "1",
        "2",
        "10",
    ]
    assert list_ids(v10_root, "v1.0")["candor_turn_taking"] == ["1", "2", "10"]


def test_missing_root_and_subset_name_the_fix(tmp_path: Path, v10_root: Path) -> None:
    with pytest.raises(FdbError) as err:
        load_v10(tmp_path / "nowhere")
    assert "nowhere" in err.value.message and "python -m fdb setup" in err.value.hint
    with pytest.raises(FdbError) as err:
        load_v10(v10_root, ["icc_backchannel"])
    assert str(v10_root / "icc_backchannel") in err.value.message
    assert "FDB_WORK" in err.value.hint
    with pytest.raises(FdbError, match="not a v1.0 subset"):
        load_v10(v10_root, ["user_backchannel"])


def _break(root: Path, subset: str, name: str, text: str | None) -> Path:
    """Replace one file of sample 1 with ``text`` (None: delete it)."""
    path = root / subset / "1" / name
    path.unlink()
    if text is not None:
        path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("subset", "name", "text", "needle"),
    [
        ("synthetic_pause_handling", "pause.json", "[{not json", "malformed JSON"),
        ("synthetic_pause_handling", "pause.json", None, "annotation file is missing"),
        (
            "synthetic_pause_handling",
            "pause.json",
            '[{"timestamp": [3.0, 3.5]}, {"timestamp": [1.0, 2.0]}]',
            "unsorted or overlap",
        ),
        (
            "synthetic_pause_handling",
            "pause.json",
            '[{"timestamp": [3.0, 9.5]}]',
            "outside the input audio",
        ),
        ("candor_turn_taking", "turn_taking.json", '{"timestamp": [1, 2]}', "non-empty JSON list"),
        (
            "synthetic_user_interruption",
            "interrupt.json",
            '[{"context": "c", "interrupt": "i", "timestamp": [13.1, 10.5]}]',
            "starts after it ends",
        ),
        (
            "synthetic_user_interruption",
            "interrupt.json",
            '[{"context": "c", "interrupt": "i", "timestamps": [10.5, 13.1]}]',
            'uses "timestamp"',
        ),
        ("synthetic_user_interruption", "input.wav", None, "audio file is missing"),
        ("candor_turn_taking", "input.wav", "RIFF garbage", "unreadable WAV"),
    ],
)
def test_bad_sample_errors_name_sample_and_file(v10_root, subset, name, text, needle) -> None:
    path = _break(v10_root, subset, name, text)
    with pytest.raises(SampleError) as err:
        load_v10(v10_root)
    assert err.value.sample == f"{subset}/1"
    assert err.value.path == str(path)
    assert needle in err.value.message and name in err.value.message
    assert err.value.hint


def test_lenient_mode_collects_problems(v10_root: Path) -> None:
    _break(v10_root, "synthetic_pause_handling", "pause.json", "oops")
    loaded, problems = load_v10(v10_root, strict=False)
    assert loaded["synthetic_pause_handling"] == []
    assert (
        len(loaded["candor_turn_taking"]) == 1 and len(loaded["synthetic_user_interruption"]) == 1
    )
    assert [p.sample_id for p in problems] == ["synthetic_pause_handling/1"]
    assert problems[0].path.endswith("pause.json") and "malformed JSON" in problems[0].message
    assert problems[0].one_line().startswith("synthetic_pause_handling/1: ")


def _v15_tree(tmp_path: Path, metadata: dict) -> Path:
    root = tmp_path / "v1.5"
    pair = root / "user_interruption" / "3"
    pair.mkdir(parents=True)
    wav = EXAMPLES / "user_interruption_example" / "1" / "input.wav"
    (pair / "input.wav").symlink_to(wav)
    audio = np.zeros(16000 * 5, dtype=np.int16)
    sf.write(pair / "clean_input.wav", audio, 16000, subtype="PCM_16")
    (pair / "metadata.json").write_text(json.dumps(metadata))
    return root


def test_v15_pair_loads(tmp_path: Path) -> None:
    root = _v15_tree(
        tmp_path,
        {
            "context_text": "",
            "current_turn_text": "Could you?",
            "timestamps": [10.530666666666667, 13.144],
        },
    )
    loaded = load_v15(root)
    assert list(loaded) == ["user_interruption"]
    pair = loaded["user_interruption"][0]
    assert pair.sample_id == "user_interruption/3"
    assert pair.rate == 16000 and pair.duration_s == pytest.approx(28.16)
    assert pair.clean_duration_s == pytest.approx(5.0)
    assert pair.overlap == (10.530666666666667, 13.144)
    assert pair.current_turn_text == "Could you?" and pair.context_text == ""


def test_v15_metadata_errors(tmp_path: Path) -> None:
    root = _v15_tree(tmp_path, {"context_text": "", "timestamp": [1.0, 2.0]})
    with pytest.raises(SampleError, match='metadata.json uses "timestamps"'):
        load_v15(root)
    _, problems = load_v15(root, strict=False)
    assert problems[0].sample_id == "user_interruption/3"
    (root / "user_interruption" / "3" / "clean_input.wav").unlink()
    with pytest.raises(SampleError, match="clean_input.wav: audio file is missing"):
        load_v15(root, ["user_interruption"])


def test_backchannel_has_no_annotation(v10_root: Path) -> None:
    sample = v10_root / "icc_backchannel" / "0"
    sample.mkdir(parents=True)
    sf.write(sample / "input.wav", np.zeros((8000, 2), dtype=np.int16), 16000, subtype="PCM_16")
    loaded = load_v10(v10_root, ["icc_backchannel"])
    (icc,) = loaded["icc_backchannel"]
    assert icc.annotation is None and icc.task == "backchannel"
    assert icc.channels == 2 and icc.duration_s == pytest.approx(0.5)


def test_non_digit_folders_are_skipped_with_a_warning(v10_root: Path, caplog) -> None:
    subset = v10_root / "candor_turn_taking"
    for name in ("notes", "1a", "²", "__MACOSX"):
        shutil.copytree(subset / "1", subset / name, symlinks=True)
    (subset / ".cache").mkdir()  # hidden: ignored without a word
    with caplog.at_level("WARNING", logger="fdb.datasets.official"):
        loaded = load_v10(v10_root, ["candor_turn_taking"])  # strict: a warning, not an error
    assert [s.id for s in loaded["candor_turn_taking"]] == ["1"]
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 4 and any(
        "candor_turn_taking/notes" in m and "not all digits" in m for m in warned
    )
    _, problems = load_v10(v10_root, ["candor_turn_taking"], strict=False)
    assert sorted(p.sample_id for p in problems) == [
        "candor_turn_taking/1a",
        "candor_turn_taking/__MACOSX",
        "candor_turn_taking/notes",
        "candor_turn_taking/²",
    ]
    assert {p.kind for p in problems} == {"skipped"} and all(p.hint for p in problems)
    assert list_ids(v10_root, "v1.0", ["candor_turn_taking"]) == {"candor_turn_taking": ["1"]}


@pytest.mark.parametrize(
    "text",
    [
        "candor_turn_taking/../1",
        "../candor_turn_taking/1",
        "candor_turn_taking/1/../../x",
        "/etc/1",
        "candor_turn_taking/²",
    ],
)
def test_sample_ids_cannot_escape_the_root(text: str) -> None:
    from fdb.datasets.selection import SelectionSpec

    with pytest.raises(FdbError):
        SelectionSpec.from_options("v1.0", sample_ids=[text])
