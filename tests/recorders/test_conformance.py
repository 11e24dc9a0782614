"""The conformance battery against loopback peers: a correct OpenAI Realtime fake passes every
rule; each broken switch of the fake fails exactly the rule that checks it; what a scenario
could not exercise is ``not exercised``, never ``pass``; the CLI needs no --turn-detection and
exits 1 on a failed rule."""

from __future__ import annotations

import asyncio

import pytest

from fdb.audio import write_wav
from fdb.cli import main
from fdb.dialects import get_dialect
from fdb.errors import FdbError
from recorders.conformance import (
    SCENARIO_RULES,
    resolve_turn_detection,
    rule_table,
    run_conformance,
)
from tests.recorders.conformance_fakes import Broken, ConformanceFake, in_thread, speech_burst
from tests.recorders.dialect_fakes import DialectServer, Faults
from tests.recorders.recorder_fakes import Script, ScriptedServer
from tests.recorders.test_recorder_session import TD

FAST_TD = {"type": "server_vad", "silence_duration_ms": 200}
FAST = dict(question=speech_burst(), timeout_s=20, reply_timeout_s=5, reply_room_s=1.0)


def statuses(rows):
    return {r.rule: r.status for r in rows}


def details(rows):
    return [(r.rule, r.status, r.detail) for r in rows]


async def battery(
    broken: Broken | None = None,
    profile: str = "openai-ga",
    only=None,
    reply_ms: int = 3000,
    input_rate: int = 24000,
    **options,
):
    async with ConformanceFake(broken, reply_ms=reply_ms, input_rate=input_rate) as server:
        return await run_conformance(server.url, profile, FAST_TD, only=only, **{**FAST, **options})


async def _turn_based_peer_with_a_bad_seq():
    async with ScriptedServer(Script(bad_seq_at_packet=2)) as server:
        only = {r for r, _ in rule_table(get_dialect("turn-based"))} - set(SCENARIO_RULES)
        return await run_conformance(server.url, "turn-based", TD, only=only, **FAST)


async def _native_peer():
    async with DialectServer("minicpmo-native-pr2377") as server:
        return await run_conformance(server.url, "minicpmo-native-pr2377", None, **FAST)


async def _a_peer_that_drops_the_connection():
    async with DialectServer(
        "openai-ga", Faults(reply_at_packet=None, disconnect_at_packet=5)
    ) as server:
        return await run_conformance(
            server.url, "openai-ga", FAST_TD, only=set(SCENARIO_RULES), **FAST
        )


SWITCHES = [
    ("ignore_barge_in", "barge-in"),
    ("cancel_regardless", "barge-in-off"),
    ("ignore_cancel", "cancel"),
    ("ignore_truncate", "truncate"),
]
# Each battery of the tests below, by name: a coroutine against a loopback fake of its own.
BATTERIES = {
    **{f"correct {p}": lambda p=p: battery(profile=p) for p in ("openai-ga", "openai-beta")},
    **{
        f"broken {switch}": lambda switch=switch: battery(
            Broken(**{switch: True}), only=set(SCENARIO_RULES)
        )
        for switch, _ in SWITCHES
    },
    "hang up at barge-in": lambda: battery(
        Broken(hang_up_at_barge_in=True), only={"barge-in", "barge-in-off"}
    ),
    "short reply": lambda: battery(only={"barge-in-off"}, reply_ms=160),
    "never speaks": lambda: battery(only=set(SCENARIO_RULES), reply_ms=0, reply_timeout_s=1.5),
    "refused update": lambda: battery(Broken(refuse_update=True)),
    "input read as 16 kHz": lambda: battery(only={"input-24k"}, input_rate=16000),
    "turn-based bad seq": _turn_based_peer_with_a_bad_seq,
    "native": _native_peer,
    "drops the connection": _a_peer_that_drops_the_connection,
}


# The batteries whose tests require the pacing rule to pass (no packet more than 80 ms late).
PACED = {"correct openai-ga", "correct openai-beta", "native", "turn-based bad seq"}
PACED_START_S = 1.0


@pytest.fixture(scope="module")
def batteries() -> dict[str, list]:
    """Every battery above at once on one event loop, each against its own fake: they wait on
    real-time audio and the fakes do next to no work, so together they take about the time of
    the longest (13 s; one after another they took 88 s). The paced ones start PACED_START_S
    later: the others' start (a burst of work on the loop, some 30 ms here) left their first
    packets up to 110 ms late on a loaded machine; once it is over the packets are a few ms late
    at most, loaded or not. Keep them on this one loop in this one thread: a second thread
    or process doing work beside them (tried: the CLI test) had the same effect."""

    async def start(name: str):
        if name in PACED:
            await asyncio.sleep(PACED_START_S)
        return await BATTERIES[name]()

    async def all_():
        return await asyncio.gather(*(start(name) for name in BATTERIES))

    return dict(zip(BATTERIES, asyncio.run(all_()), strict=True))


@pytest.mark.parametrize("profile", ["openai-ga", "openai-beta"])
def test_a_correct_server_passes_every_rule(batteries, profile):
    rows = batteries[f"correct {profile}"]
    assert [r.rule for r in rows] == [rule for rule, _ in rule_table(get_dialect(profile))]
    assert all(r.status == "pass" for r in rows), details(rows)
    got = {r.rule: r.detail for r in rows}
    assert "turn_detected" in got["barge-in"] and "client_cancelled" in got["cancel"]
    assert "still in progress when the client ended the session" in got["responses"]


@pytest.mark.parametrize(("switch", "rule"), SWITCHES)
def test_each_broken_switch_fails_exactly_its_rule(batteries, switch, rule):
    rows = batteries[f"broken {switch}"]
    got = statuses(rows)
    assert got == {r: "fail" if r == rule else "pass" for r in SCENARIO_RULES}, details(rows)


def test_a_server_that_hangs_up_at_the_barge_in_fails_both_barge_in_rules(batteries):
    """A closed connection is neither a cancelled reply nor one that plays on (it passed
    barge-in-off as a reply 'still in progress')."""
    rows = batteries["hang up at barge-in"]
    assert statuses(rows) == {"barge-in": "fail", "barge-in-off": "fail"}, details(rows)
    assert all("code 1011" in r.detail for r in rows), details(rows)


def test_a_reply_too_short_to_barge_into_is_not_exercised(batteries):
    """The reply is over before a VAD could hear the client: barge-in-off cannot be judged."""
    rows = batteries["short reply"]
    assert statuses(rows) == {"barge-in-off": "not exercised"}, details(rows)
    assert "before a VAD could hear it" in rows[0].detail


def test_a_server_that_never_speaks_exercises_no_reply_scenario(batteries):
    """Replies without audio: nothing to barge into, cancel or truncate; commit-response fails."""
    rows = batteries["never speaks"]
    assert statuses(rows) == {
        "barge-in": "not exercised",
        "barge-in-off": "not exercised",
        "cancel": "not exercised",
        "truncate": "not exercised",
        "commit": "pass",
        "commit-response": "fail",
    }, details(rows)
    assert "no reply audio within 1.5 s of the question" in rows[0].detail


def test_a_failed_handshake_exercises_nothing(batteries):
    rows = batteries["refused update"]
    got = statuses(rows)
    assert got["handshake"] == "fail" and got["no-error"] == "fail"
    for rule in (
        "paced-append",
        "legacy-tail",
        "responses",
        "pacing",
        "question-answered",
        "input-24k",
        *SCENARIO_RULES,
    ):
        assert got[rule] == "not exercised", details(rows)
    assert "session.update was refused (invalid_session" in next(
        r.detail for r in rows if r.rule == "barge-in"
    )
    assert "pass" not in {got[r] for r in got if r not in ("invalid-json", "model-mismatch")}


def test_a_server_that_reads_24k_as_16k_fails_input_24k(batteries):
    """The fake's VAD times run 1.5 times fast, as a server's that took 24 kHz for 16 kHz."""
    rows = batteries["input read as 16 kHz"]
    assert statuses(rows) == {"input-24k": "fail"}, details(rows)
    assert "beyond the" in rows[0].detail or "declares input rate 16000" in rows[0].detail


def test_faulty_turn_based_peer_names_the_failing_rules(batteries):
    got = statuses(batteries["turn-based bad seq"])
    assert got == {
        "handshake": "pass",
        "paced-append": "pass",
        "receipts": "fail",
        "units": "pass",
        "end-drain-close": "pass",
        "responses": "pass",
        "no-error": "pass",
        "pacing": "pass",
        "question-answered": "pass",
        "invalid-json": "fail",
        "out-of-order-seq": "fail",
        "model-mismatch": "fail",
    }


def test_native_peer_session_rules_pass_and_probes_fail(batteries):
    rows = batteries["native"]
    got = statuses(rows)
    assert not set(SCENARIO_RULES) & set(
        got
    )  # the native profile has no turn detection to exercise
    assert all(
        got[r] == "pass"
        for r in (
            "handshake",
            "paced-append",
            "receipts",
            "units",
            "end-drain-close",
            "responses",
            "no-error",
            "pacing",
        )
    ), details(rows)
    assert got["invalid-json"] == "fail" and "without an error event" in next(
        r.detail for r in rows if r.rule == "invalid-json"
    )


def test_unreachable_server_fails_connect_and_exercises_nothing():
    rows = asyncio.run(
        run_conformance(
            "ws://127.0.0.1:9/v1/realtime", "turn-based", TD, question=speech_burst(), timeout_s=3
        )
    )
    assert (
        rows[0].rule == "connect"
        and rows[0].status == "fail"
        and "cannot connect" in rows[0].detail
    )
    assert {r.status for r in rows[1:]} == {"not exercised"}
    assert [r.rule for r in rows[1:]] == [rule for rule, _ in rule_table(get_dialect("turn-based"))]


def test_default_turn_detection_per_profile():
    for name in ("turn-based", "qwen3-omni-half-duplex", "openai-ga", "openai-beta"):
        assert resolve_turn_detection(get_dialect(name), None) == {
            "type": "server_vad",
            "silence_duration_ms": 500,
        }
    assert resolve_turn_detection(get_dialect("minicpmo-native-pr2377"), "") is None
    assert resolve_turn_detection(get_dialect("openai-ga"), '{"type": "semantic_vad"}') == {
        "type": "semantic_vad"
    }
    with pytest.raises(FdbError, match="does not take --turn-detection"):
        resolve_turn_detection(get_dialect("minicpmo-native-pr2377"), '{"type": "server_vad"}')


def test_a_question_without_speech_is_refused(tmp_path):
    import numpy as np

    from fdb.audio import Audio

    with pytest.raises(FdbError, match="holds no speech"):
        asyncio.run(
            run_conformance(
                "ws://127.0.0.1:9/v1/realtime",
                "openai-ga",
                question=Audio(np.zeros(16000, np.float32), 16000),
            )
        )


def _cli(url: str, tmp_path, capsys, *extra: str) -> tuple[int, str]:
    wav = tmp_path / "q.wav"
    burst = speech_burst()
    write_wav(wav, burst.samples, burst.rate)
    args = [
        "conformance",
        "--url",
        url,
        "--profile",
        "openai-ga",
        "--question",
        str(wav),
        "--reply-timeout",
        "5",
        *extra,
    ]
    with pytest.raises(SystemExit) as done:
        main(args)
    return done.value.code, capsys.readouterr().out


def test_cli_exits_1_and_lists_failed_and_not_exercised_rules(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    with in_thread(ConformanceFake(Broken(ignore_truncate=True), reply_ms=160)) as url:
        code, out = _cli(url, tmp_path, capsys)
    assert code == 1, out
    summary = out.strip().splitlines()[-1]
    assert "failed: truncate; not exercised: barge-in-off" in summary, summary


def test_a_server_that_drops_the_connection_leaves_the_scenarios_not_exercised(batteries):
    """The peer closes after 5 packets on every connection: nothing hangs,
    and no scenario rule passes."""
    rows = batteries["drops the connection"]
    assert {r.status for r in rows} == {"not exercised"}, details(rows)
    assert all("code 1011" in r.detail for r in rows), details(rows)
