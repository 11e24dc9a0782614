"""The runbook's sample-selection rules (pure functions)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fdb.datasets.selection import (
    SelectionSpec,
    count_by_subset,
    format_ids,
    read_ids_file,
    require_some_selection,
    same_selection,
    select,
)
from fdb.errors import FdbError

CATALOG = {
    "candor_turn_taking": ["10", "2", "1", "11", "3"],
    "synthetic_pause_handling": [str(i) for i in range(1, 21)],
    "icc_backchannel": ["0", "1", "2"],
}


def spec(**kwargs) -> SelectionSpec:
    return SelectionSpec.from_options("v1.0", **kwargs)


def test_numeric_order_and_subset_order() -> None:
    ids = select(spec(per_subset=3), CATALOG)
    assert ids == [
        "synthetic_pause_handling/1",
        "synthetic_pause_handling/2",
        "synthetic_pause_handling/3",
        "candor_turn_taking/1",
        "candor_turn_taking/2",
        "candor_turn_taking/3",
        "icc_backchannel/0",
        "icc_backchannel/1",
        "icc_backchannel/2",
    ]
    assert select(spec(subset_counts=["candor_turn_taking=all"], per_subset=0), CATALOG) == [
        "candor_turn_taking/1",
        "candor_turn_taking/2",
        "candor_turn_taking/3",
        "candor_turn_taking/10",
        "candor_turn_taking/11",
    ]


@pytest.mark.parametrize("small", [0, 1, 2, 4, 7])
def test_smaller_n_is_a_prefix_per_subset(small: int) -> None:
    big = select(spec(per_subset=12), CATALOG)
    little = select(spec(per_subset=small), CATALOG)
    for name in CATALOG:
        mine = [s for s in little if s.startswith(name + "/")]
        theirs = [s for s in big if s.startswith(name + "/")]
        assert mine == theirs[: len(mine)]
        assert len(mine) == min(small, len(CATALOG[name]))


def test_default_all_and_overrides() -> None:
    assert len(select(spec(), CATALOG)) == 12 + 5 + 3  # default 12 per subset
    assert len(select(spec(per_subset="all"), CATALOG)) == 20 + 5 + 3
    ids = select(
        spec(per_subset=2, subset_counts=["icc_backchannel=0", "candor_turn_taking=all"]), CATALOG
    )
    assert count_by_subset(ids) == {"synthetic_pause_handling": 2, "candor_turn_taking": 5}


def test_zero_leaves_the_dataset_out() -> None:
    assert spec(per_subset=0).leaves_out
    assert select(spec(per_subset=0), CATALOG) == []
    small = spec(per_subset=0, subset_counts=["icc_backchannel=all"])
    assert not small.leaves_out and small.subsets_to_load() == ["icc_backchannel"]
    assert spec(per_subset=3).subsets_to_load() is None
    with pytest.raises(FdbError, match="leaves both"):
        require_some_selection([], [])
    require_some_selection(["icc_backchannel/0"], [])


def test_explicit_ids_and_ids_file(tmp_path: Path) -> None:
    ids_file = tmp_path / "sample-ids.txt"
    ids_file.write_text(
        "# from another run\n\ncandor_turn_taking/10\n  icc_backchannel/1  # note\n"
    )
    chosen = spec(sample_ids=["synthetic_pause_handling/7"], ids_file=ids_file)
    assert chosen.subsets_to_load() == [
        "synthetic_pause_handling",
        "candor_turn_taking",
        "icc_backchannel",
    ]
    assert select(chosen, CATALOG) == [
        "synthetic_pause_handling/7",
        "candor_turn_taking/10",
        "icc_backchannel/1",
    ]
    assert read_ids_file(ids_file, "v1.0") == ["candor_turn_taking/10", "icc_backchannel/1"]
    replay = tmp_path / "replay.txt"
    replay.write_text(format_ids(select(chosen, CATALOG)))
    assert same_selection(chosen, spec(ids_file=replay))
    assert format_ids([]) == ""


def test_unknown_names_and_ids_are_errors(tmp_path: Path) -> None:
    with pytest.raises(FdbError, match="unknown v1.0 subset 'user_backchannel'"):
        spec(subset_counts=["user_backchannel=2"])
    with pytest.raises(FdbError, match="unknown v1.0 sample id candor_turn_taking/99") as err:
        select(spec(sample_ids=["candor_turn_taking/99"]), CATALOG)
    assert "1..11" in err.value.hint
    with pytest.raises(FdbError, match="not in this dataset tree"):
        select(spec(sample_ids=["candor_pause_handling/1"]), CATALOG)
    with pytest.raises(FdbError, match="not in this dataset tree"):
        select(spec(subset_counts=["candor_pause_handling=2"]), CATALOG)
    with pytest.raises(FdbError, match="not NAME/ID"):
        spec(sample_ids=["candor_turn_taking"])
    with pytest.raises(FdbError, match="not a count"):
        spec(per_subset="some")
    with pytest.raises(FdbError, match="select exactly those samples"):
        spec(per_subset=3, sample_ids=["icc_backchannel/1"])
    bad = tmp_path / "ids.txt"
    bad.write_text("icc_backchannel/1\nbogus/2\n")
    with pytest.raises(FdbError, match=r"ids.txt:2: unknown v1.0 subset 'bogus'"):
        read_ids_file(bad, "v1.0")
    with pytest.raises(FdbError, match="cannot read the sample ids file"):
        read_ids_file(tmp_path / "missing.txt", "v1.0")


def test_spec_records_and_compares_repeats() -> None:
    a = spec(per_subset="12", subset_counts=["icc_backchannel=all"])
    b = SelectionSpec.model_validate_json(a.model_dump_json())
    assert b == a and same_selection(a, b)
    assert same_selection(spec(), spec(per_subset=12))
    assert not same_selection(spec(per_subset=3), spec(per_subset=4))
    assert same_selection(
        spec(sample_ids=["icc_backchannel/2", "icc_backchannel/1"]),
        spec(sample_ids=["icc_backchannel/1", "icc_backchannel/2"]),
    )
    v15 = SelectionSpec.from_options("v1.5", per_subset=1, subset_counts=["user_backchannel=0"])
    assert select(v15, {"user_backchannel": ["1"], "talking_to_other": ["2", "1"]}) == [
        "talking_to_other/1"
    ]
