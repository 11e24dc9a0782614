"""The conformance battery against scripted peers: a faulty peer's failing rules are named,
a well-behaved native peer passes every rule it declares (the bundled server: integration)."""

from __future__ import annotations

import asyncio

from recorders.conformance import run_conformance
from tests.recorders.dialect_fakes import DialectServer
from tests.recorders.recorder_fakes import Script, ScriptedServer
from tests.recorders.test_recorder_session import TD


def statuses(rows):
    return {r.rule: r.status for r in rows}


def test_faulty_turn_based_peer_names_the_failing_rules():
    async def main():
        async with ScriptedServer(Script(bad_seq_at_packet=2)) as server:
            return await run_conformance(server.url, "turn-based", TD, timeout_s=10)

    got = statuses(asyncio.run(main()))
    assert got == {
        "handshake": "pass", "paced-append": "pass", "receipts": "fail", "units": "pass",
        "end-drain-close": "pass", "responses": "pass", "no-error": "pass", "pacing": "pass",
        "question-answered": "skip", "invalid-json": "fail", "out-of-order-seq": "fail", "model-mismatch": "fail",
    }


def test_native_peer_session_rules_pass_and_probes_fail():
    async def main():
        async with DialectServer("minicpmo-native-pr2377") as server:
            return await run_conformance(server.url, "minicpmo-native-pr2377", None, timeout_s=10)

    rows = asyncio.run(main())
    got = statuses(rows)
    assert all(got[r] == "pass" for r in ("handshake", "paced-append", "receipts", "units", "end-drain-close",
                                          "responses", "no-error", "pacing")), [(r.rule, r.status, r.detail) for r in rows]
    assert got["invalid-json"] == "fail" and "without an error event" in next(
        r.detail for r in rows if r.rule == "invalid-json")


def test_unreachable_server_fails_connect(tmp_path):
    rows = asyncio.run(run_conformance("ws://127.0.0.1:9/v1/realtime", "turn-based", TD, timeout_s=3))
    assert rows[0].rule == "connect" and rows[0].status == "fail" and "cannot connect" in rows[0].detail
