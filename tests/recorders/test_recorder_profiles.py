"""Dialects: the turn-based contract and --turn-detection validation."""

from __future__ import annotations

import pytest

from fdb.dialects import TURN_BASED, dialect_for_trace_format, get_dialect
from fdb.errors import FdbError


def test_turn_based_profile_contract():
    p = get_dialect("turn-based")
    assert p is TURN_BASED
    assert p.trace_format == "realtime-turn-based-pcm16-v1"
    assert (p.formats.input_rate, p.formats.output_rate, p.units.unit_ms, p.packet_samples) == (
        16000,
        24000,
        200,
        1280,
    )
    assert p.units.tail_policy == "flush" and p.units.padding_ms(1234.5) == 0.0
    assert p.events.receipts and p.events.unit_done
    assert p.events.audio_delta == ("response.output_audio.delta",)
    assert [rule.event for rule in p.cuts.rules] == ["response.done"]
    assert dialect_for_trace_format("realtime-turn-based-pcm16-v1") is p


def test_unknown_profile_and_trace_format_name_the_known_ones():
    with pytest.raises(FdbError) as err:
        get_dialect("nemotron")
    assert "'nemotron'" in err.value.one_line() and "turn-based" in err.value.one_line()
    with pytest.raises(FdbError) as err:
        dialect_for_trace_format("realtime-pcm16-v2")
    assert "realtime-turn-based-pcm16-v1" in err.value.one_line()
    assert dialect_for_trace_format("realtime-pcm16-v1").name == "minicpmo-native-pr2377"
    assert dialect_for_trace_format("realtime-legacy-pcm16-v1").name == "qwen3-omni-half-duplex"


def test_turn_detection_accepts_json_and_dicts():
    td = TURN_BASED.validate_turn_detection('{"type": "server_vad", "silence_duration_ms": 500}')
    assert td == {"type": "server_vad", "silence_duration_ms": 500}
    full = {
        "type": "server_vad",
        "threshold": 0.5,
        "prefix_padding_ms": 300,
        "silence_duration_ms": 500,
        "interrupt_response": False,
    }
    assert TURN_BASED.validate_turn_detection(full) == full


@pytest.mark.parametrize(
    "value,needle",
    [
        (None, "requires --turn-detection"),
        ("", "requires --turn-detection"),
        ("{nope", "not valid JSON"),
        ("[1]", "must be a JSON object"),
        ('{"type": "near_field"}', "type 'near_field'"),
        ('{"type": "semantic_vad", "threshold": 0.5}', "semantic_vad does not take threshold"),
        ('{"silence_duration_ms": 500}', "type None"),
        ('{"type": "server_vad", "eagerness": "low"}', "server_vad does not take eagerness"),
        ('{"type": "semantic_vad", "eagerness": "eager"}', "eagerness='eager'"),
        ('{"type": "server_vad", "create_response": true}', "unknown keys: create_response"),
        ('{"type": "server_vad", "threshold": 1.5}', "threshold=1.5"),
        ('{"type": "server_vad", "silence_duration_ms": 0}', "silence_duration_ms=0"),
        ('{"type": "server_vad", "prefix_padding_ms": -1}', "prefix_padding_ms=-1"),
        ('{"type": "server_vad", "interrupt_response": "no"}', "interrupt_response='no'"),
        ('{"type": "server_vad", "threshold": true}', "threshold=True"),
    ],
)
def test_turn_detection_rejections(value, needle):
    with pytest.raises(FdbError) as err:
        TURN_BASED.validate_turn_detection(value)
    assert needle in err.value.one_line()
