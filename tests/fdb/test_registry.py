"""fdb.registry: the one registry of every backend kind (issue #26): lazy ``"module:Name"``
entries, one unknown-name error, a name added once, names in the order added; and the registries
built on it keep their names and errors."""

from __future__ import annotations

import sys
from collections import OrderedDict

import pytest

from fdb.dialects import get_dialect
from fdb.errors import FdbError
from fdb.models.asr import ASR_BACKENDS, load_asr
from fdb.models.scoring import CHOICES, choose
from fdb.models.turn import TURN_BACKENDS, load_turn_backend
from fdb.registry import Registry, choose_one_of_sorted, known, resolve


def test_a_lazy_entry_is_imported_on_first_lookup_only():
    sys.modules.pop("json.tool", None)
    registry = Registry[type](
        "thing", {"dict": "collections:OrderedDict", "tool": "json.tool:main"}
    )
    assert "json.tool" not in sys.modules  # added, listed and described without importing
    assert registry.names() == ("dict", "tool") and "json.tool:main" in registry.describe()
    assert registry["dict"] is OrderedDict and registry.find("dict") is OrderedDict
    assert "json.tool" not in sys.modules
    assert registry.values()[1] is sys.modules["json.tool"].main


def test_resolve_leaves_objects_alone():
    assert resolve(OrderedDict) is OrderedDict and resolve("collections:OrderedDict") is OrderedDict


def test_an_unknown_name_is_one_error_listing_the_choices():
    registry = Registry("ASR backend", {"b": 1, "a": 2})
    with pytest.raises(FdbError) as caught:
        registry["c"]
    assert (caught.value.message, caught.value.hint) == (
        "unknown ASR backend 'c'",
        "choose one of b, a",
    )
    assert registry.find("c") is None and "c" not in registry
    assert Registry("x", {"b": 1, "a": 2}, hint=choose_one_of_sorted).unknown("c").hint == (
        "choose one of ['a', 'b']"
    )
    assert Registry("x", {"b": 1, "a": 2}, hint=known("profiles")).unknown("c").hint == (
        "known profiles: a, b"
    )


def test_a_name_is_added_once_unless_replaced():
    registry = Registry("speaker backend", {"a": 1, "b": 2})
    with pytest.raises(ValueError, match="speaker backend 'a' is already registered"):
        registry.add("a", 3)
    assert registry["a"] == 1
    registry.add("a", 3, replace=True)  # a replaced entry moves to the end
    assert registry.items() == [("b", 2), ("a", 3)]


def test_names_keep_the_order_added():
    registry = Registry("thing", {"z": 1, "a": 2})
    registry.add("m", 3)
    assert registry.names() == ("z", "a", "m") == tuple(registry)
    assert len(registry) == 3 and registry.values() == [1, 2, 3]
    assert registry.describe().splitlines()[0].startswith("z  ")


def test_the_backend_registries_keep_their_names_and_errors():
    assert ASR_BACKENDS == ("faster-whisper", "parakeet", "openai-compatible")
    assert TURN_BACKENDS == ("smart-turn",)
    assert CHOICES["mos"] == ("dnsmos", "utmos")
    cases = [
        (
            lambda: load_asr("x"),
            "unknown ASR backend 'x' (choose one of "
            "['faster-whisper', 'openai-compatible', 'parakeet'])",
        ),
        (lambda: load_turn_backend("x"), "unknown turn backend 'x' (choose one of ['smart-turn'])"),
        (
            lambda: choose("speaker", "x"),
            "unknown speaker backend 'x' (choose one of resemblyzer, wavlm-ecapa)",
        ),
        (lambda: get_dialect("x"), "unknown recorder profile 'x' (known profiles: "),
    ]
    for call, expected in cases:
        with pytest.raises(FdbError) as caught:
            call()
        assert caught.value.one_line().startswith(expected)
