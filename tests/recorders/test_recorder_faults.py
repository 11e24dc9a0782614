"""Every fault of issue 5's list against a scripted native peer (and the legacy one where the
fault differs there): the session ends with session.json, trace.jsonl and a verdict or failure
that names the fault; nothing raises; many faulty sessions in one batch are all kept."""

from __future__ import annotations

import asyncio

import pytest

from fdb.dialects import LEGACY, NATIVE
from fdb.session_records import read_trace
from recorders.batch import SessionJob, record_many
from tests.recorders.dialect_fakes import DialectServer, Faults
from tests.recorders.test_recorder_dialects import TD, record
from tests.recorders.test_recorder_session import speech

# fault, expected status, a phrase the failure or a violation must contain
NATIVE_FAULTS = [
    (Faults(disconnect_at_packet=3), "disconnected", "code 1011"),
    (Faults(error_at_packet=3), "error", "server error internal"),
    (Faults(invalid_json_at_packet=3), "error", "invalid JSON"),
    (Faults(stall_at_packet=3), "timeout", "waiting for sglang.input_audio.drained"),
    (Faults(out_of_order=True), "ok", "before its response.created"),
    (Faults(duplicate_updated=True), "ok", "2 session.updated events"),
    (Faults(deny_admissions=9), "admission_denied", "HTTP 503"),
    (Faults(oversized_at_packet=3), "disconnected", "message too big"),
    (Faults(output_rate=22050), "ok", "output rate 22050, expected 24000"),
    (Faults(drain_delay_s=3.0), "timeout", "waiting for sglang.input_audio.drained"),
    (Faults(error_at_packet=3, error_body="boom"), "error", "error 'boom', not an object"),
]


def _named(rec, phrase: str) -> bool:
    return phrase in (rec.failure or "") or any(phrase in v for v in rec.verdict.violations)


@pytest.mark.parametrize("faults,status,phrase", NATIVE_FAULTS, ids=lambda x: None)
def test_native_faults_are_recorded_and_named(tmp_path, faults, status, phrase):
    out = tmp_path / "s"
    rec, _ = record(NATIVE.name, out, faults, timeout_s=2.0)
    assert rec.status == status, rec.failure
    assert rec.verdict.status == "fail" and _named(rec, phrase), (
        rec.failure,
        rec.verdict.violations,
    )
    assert (out / "session.json").is_file() and read_trace(out / "trace.jsonl")


def test_slow_drain_within_the_deadline_passes_and_is_timed(tmp_path):
    rec, _ = record(NATIVE.name, tmp_path / "s", Faults(drain_delay_s=0.4), timeout_s=5.0)
    assert rec.status == "ok" and rec.verdict.status == "pass", rec.verdict.violations
    assert rec.drain_s >= 0.4


@pytest.mark.parametrize(
    "faults,status,phrase",
    [
        (Faults(delta_rate=16000), "ok", "audio delta at 16000 Hz, expected 24000"),
        (Faults(stall_at_packet=2), "timeout", "--legacy-tail"),
        (Faults(duplicate_updated=True), "ok", "session.updated"),
        (Faults(disconnect_at_packet=2), "disconnected", "code 1011"),
        (Faults(error_at_packet=2, error_body="boom"), "error", "error 'boom', not an object"),
    ],
    ids=lambda x: None,
)
def test_legacy_faults_are_named(tmp_path, faults, status, phrase):
    rec, _ = record(LEGACY.name, tmp_path / "s", faults, td=TD, timeout_s=2.0)
    assert rec.status == status and rec.verdict.status == "fail", (
        rec.failure,
        rec.verdict.violations,
    )
    assert _named(rec, phrase), (rec.failure, rec.verdict.violations)


def test_a_batch_of_faulty_sessions_loses_none(tmp_path):
    async def main():
        servers = [DialectServer(NATIVE.name, f) for f, _, _ in NATIVE_FAULTS[:4]] + [
            DialectServer(NATIVE.name)
        ]
        for s in servers:
            await s.__aenter__()
        try:
            jobs = [
                SessionJob(
                    s.url,
                    speech(),
                    tmp_path / str(k),
                    f"c/{k}",
                    "main",
                    NATIVE.name,
                    None,
                    timeout_s=2.0,
                )
                for k, s in enumerate(servers)
            ]
            return await record_many(jobs, concurrency=5)
        finally:
            for s in servers:
                await s.__aexit__(None, None, None)

    records = asyncio.run(main())
    assert [r.status for r in records] == ["disconnected", "error", "error", "timeout", "ok"]
    assert all((tmp_path / str(k) / "session.json").is_file() for k in range(5))
