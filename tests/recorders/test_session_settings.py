"""--instructions / --voice / --sampling / --reference-audio: checked before any session, and the
wire form of session.sglang."""

from __future__ import annotations

import base64

import numpy as np
import pytest

from fdb.audio import write_wav
from fdb.dialects import LEGACY, NATIVE_80
from fdb.errors import FdbError
from fdb.session_settings import session_settings


def test_settings_become_the_sglang_fields_of_the_first_update(tmp_path):
    write_wav(tmp_path / "ref.wav", np.full(8000, 0.1, np.float32), 16000)
    settings = session_settings(
        NATIVE_80.name,
        "Be brief.",
        "NATF2",
        '{"temperature": 0.7, "greedy": false}',
        tmp_path / "ref.wav",
    )
    assert settings.reference_audio.duration_s == 0.5 and settings.reference_audio.bytes == 16044
    body = NATIVE_80.session_update(None, None, settings.instructions, settings.sglang_fields())
    assert body["instructions"] == "Be brief." and body["sglang"]["voice"] == "NATF2"
    assert body["sglang"]["timebase"] == {"native_unit_ms": 80}
    assert body["sglang"]["sampling"] == {"temperature": 0.7, "greedy": False}
    reference = body["sglang"]["reference_audio"]
    assert reference["media_type"] == "audio/wav"
    assert base64.b64decode(reference["data"]) == (tmp_path / "ref.wav").read_bytes()
    assert session_settings(NATIVE_80.name) is None


@pytest.mark.parametrize(
    "args, match",
    [
        (dict(sampling="[1]"), "--sampling must be a non-empty JSON object"),
        (dict(sampling='{"temperature": "hot"}'), "temperature are not numbers"),
        (dict(sampling="{"), "--sampling is not valid JSON"),
        (dict(reference="long.wav"), "long.wav: 31.00 s, not between 0 and 30 s"),
        (dict(reference="missing.wav"), "not a readable WAV"),
    ],
)
def test_malformed_settings_are_refused_naming_the_option(tmp_path, args, match):
    write_wav(tmp_path / "long.wav", np.zeros(31 * 8000, np.float32), 8000)
    if "reference" in args:
        args["reference"] = tmp_path / args["reference"]
    with pytest.raises(FdbError, match=match):
        session_settings(NATIVE_80.name, **args)


def test_a_profile_without_sglang_settings_refuses_them_but_takes_instructions():
    with pytest.raises(FdbError, match="has no sglang session settings"):
        session_settings(LEGACY.name, voice="NATF2")
    assert session_settings(LEGACY.name, "Be brief.").instructions == "Be brief."
