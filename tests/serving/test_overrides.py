"""Command-line overrides of a launch file: one leaf per flag, services by name, values as YAML
scalars, groups and lists refused, the result validated like the file."""

from __future__ import annotations

import pytest

from fdb.errors import FdbError
from serving.overrides import apply_overrides, parse_override_args

FILE = {
    "system": "embedded-cascade",
    "vad": {"silence_duration_ms": 500},
    "services": [{"name": "tts", "command": ["python", "-m", "x"], "port": 8105, "env": {}}],
    "backends": {
        "llm": {"kind": "openai_chat", "base_url": "http://127.0.0.1:9000/v1", "model": "m"}
    },
}


def test_the_three_spellings_and_yaml_scalar_values():
    assert parse_override_args(
        [
            "--vad.silence_duration_ms",
            "800",
            "max_sessions=32",
            "--backends.llm.temperature=0.3",
            "--instructions",
            "Be brief.",
            "--backends.llm.base_url",
            '""',
            "--warmup",
            "false",
            "--backends.llm.temperature",
            "null",
        ]
    ) == [
        ("vad.silence_duration_ms", 800),
        ("max_sessions", 32),
        ("backends.llm.temperature", 0.3),
        ("instructions", "Be brief."),
        ("backends.llm.base_url", ""),
        ("warmup", False),
        ("backends.llm.temperature", None),
    ]


@pytest.mark.parametrize(
    "args,phrase",
    [
        (["--vad.silence_duration_ms"], "has no value"),
        (["vad.silence_duration_ms"], "has no value"),
        (["--vad..x", "1"], "empty path segment"),
        (["--vad.silence_duration_ms", "{a: 1}"], "a group of values"),
    ],
)
def test_malformed_flags_are_refused_by_name(args, phrase):
    with pytest.raises(FdbError, match=phrase):
        parse_override_args(args)


def test_overrides_set_leaves_add_options_and_address_services_by_name():
    out = apply_overrides(
        FILE,
        [
            ("vad.silence_duration_ms", 800),
            ("vad.threshold", 0.6),
            ("services.tts.port", 8106),
            ("services.tts.env.CUDA_VISIBLE_DEVICES", "1"),
            ("backends.llm.temperature", 0.3),
            ("max_sessions", 32),
        ],
    )
    assert out["vad"] == {"silence_duration_ms": 800, "threshold": 0.6}
    assert out["services"][0]["port"] == 8106 and out["services"][0]["env"] == {
        "CUDA_VISIBLE_DEVICES": "1"
    }
    assert out["backends"]["llm"]["temperature"] == 0.3 and out["max_sessions"] == 32
    assert FILE["vad"] == {"silence_duration_ms": 500}  # the file's mapping is not touched


@pytest.mark.parametrize(
    "path,phrase",
    [
        ("vad", "addresses a settings group, not a single value"),
        ("backends.llm", "addresses a settings group, not a single value"),
        ("services.tts", "addresses a settings group, not a single value"),
        ("services.asr.port", "no service named 'asr'"),
        ("services.tts.command", "is a list"),
        ("vad.silence_duration_ms.x", "is a single value, not a settings group"),
    ],
)
def test_groups_lists_and_unknown_services_are_refused(path, phrase):
    with pytest.raises(FdbError, match=phrase):
        apply_overrides(FILE, [(path, 1)])


def test_a_group_the_file_leaves_out_is_still_a_group():
    with pytest.raises(FdbError, match="addresses a settings group"):
        apply_overrides({}, [("vad", 5)], groups=["vad"])


def test_resolve_system_applies_flags_to_the_file_and_validates_like_the_file(tmp_path):
    from serving.systems import resolve_system

    launch = tmp_path / "launch.yaml"
    launch.write_text(
        "system: embedded-cascade\nmax_sessions: 2\nvad: {silence_duration_ms: 500}\n"
    )
    got = resolve_system(
        config=launch,
        overrides=parse_override_args(
            ["--max_sessions", "8", "--vad.silence_duration_ms=800", "instructions=Be brief."]
        ),
    )
    assert (got.max_sessions, got.vad.silence_duration_ms, got.instructions) == (
        8,
        800,
        "Be brief.",
    )
    assert got.vad.prefix_padding_ms == 300  # the rest of the group keeps the system's value
    bare = resolve_system("duplex-baseline", overrides=[("max_sessions", 3)])
    assert bare.name == "duplex-baseline" and bare.max_sessions == 3
    with pytest.raises(FdbError, match="vad.bogus: Extra inputs are not permitted"):
        resolve_system(config=launch, overrides=[("vad.bogus", 1)])
    with pytest.raises(FdbError, match="command-line overrides: max_sessions"):
        resolve_system(config=launch, overrides=[("max_sessions", "many")])
    with pytest.raises(FdbError, match="addresses a settings group"):
        resolve_system(config=launch, overrides=[("backends", 1)])


def test_the_first_chunk_rule_is_a_system_setting_a_flag_sets(tmp_path):
    """``first_chunk`` (the reply's first speakable chunk): the default rule unless set, one leaf
    by a flag, the other kept, and a rule of no words refused by its name."""
    from serving.conversation.chunker import FIRST_CHUNK
    from serving.systems import resolve_system

    launch = tmp_path / "launch.yaml"
    launch.write_text("system: embedded-cascade\n")
    assert resolve_system(config=launch).first_chunk.rule == FIRST_CHUNK
    got = resolve_system(
        config=launch, overrides=parse_override_args(["--first_chunk.max_words", "4"])
    )
    assert got.first_chunk.rule == (FIRST_CHUNK[0], 4)
    with pytest.raises(FdbError, match="first_chunk.max_words"):
        resolve_system(config=launch, overrides=[("first_chunk.max_words", 0)])


def test_serve_help_explains_overrides_and_a_bad_flag_fails_before_binding():
    import subprocess
    import sys

    helped = subprocess.run(
        [sys.executable, "-m", "fdb", "serve", "--help"], capture_output=True, text=True, timeout=60
    )
    assert helped.returncode == 0 and "--vad.silence_duration_ms" in helped.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "fdb", "serve", "--vad.bogus", "1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode != 0 and "Extra inputs are not permitted" in bad.stderr
