"""No key value appears in any file or log the judges write: every path is run with keys set (the
server checks they were sent), a wrong key is echoed back by the server's 401 as OpenAI does,
and then every file under the run, the captured logs and the CLI's output are scanned."""

from __future__ import annotations

import logging
import subprocess
import sys

from benchmarks.support.trees import REFERENCE, Interrupt, Pair, Repeat, judge_config
from judges import JudgeSettings, judge_repeat
from tests.conftest import REPO, needs_behavior_prompt
from tests.judges.conftest import CUSTOM_KEY, OPENAI_KEY

WRONG_KEY = "sk-wrong-5d1c0e9a7b3f2468aa"
PAIRS = [
    Pair("user_interruption", "1"),
    Pair("user_interruption", "2", reply="x #malformed"),
    Pair("user_backchannel", "1", reply="x #500"),
    Pair("user_backchannel", "2", reply="x #wrongmodel"),
    Pair("talking_to_other", "1", reply="Words #badquote"),
]
INTERRUPTS = [Interrupt("1"), Interrupt("2", reply="no format here at all #unparsable")]


def _scan(root, texts: list[str]) -> list[str]:
    keys = (CUSTOM_KEY, OPENAI_KEY, WRONG_KEY)
    found = [
        f"{p}: {k}"
        for p in root.rglob("*")
        if p.is_file()
        for k in keys
        if k.encode() in p.read_bytes()
    ]
    return found + [f"log: {k}" for t in texts for k in keys if k in t]


@needs_behavior_prompt
def test_no_key_value_is_written_anywhere(tmp_path, fake, monkeypatch, capsys, caplog):
    caplog.set_level(logging.DEBUG)
    work = tmp_path / "work"
    repeat = Repeat(work / "runs" / "r1" / "repeat-1", pairs=PAIRS, interrupts=INTERRUPTS).write()
    config = judge_config(tmp_path / "judge")
    settings = JudgeSettings.custom(
        config, fake.base_url, reference_source=REFERENCE, timeout_s=1.5
    )
    fake.control_mismatch = True
    assert judge_repeat(repeat, settings).semantic.status == "control_failed"
    fake.control_mismatch = False
    assert judge_repeat(repeat, settings, retry_failed=True).semantic.status == "has_failures"
    assert fake.requests and all(r["auth_ok"] for r in fake.requests)  # the key really was sent

    monkeypatch.setenv(
        "OPENAI_API_KEY", WRONG_KEY
    )  # the server expects OPENAI_KEY and echoes what it got
    fake.reset(api_key=OPENAI_KEY)
    other = Repeat(
        work / "runs" / "r2" / "repeat-1", pairs=PAIRS[:1], interrupts=INTERRUPTS[:1]
    ).write()
    summary = judge_repeat(
        other, JudgeSettings.openai("judge-model", fake.base_url, reference_source=REFERENCE)
    )
    reason = summary.behavior.samples[0].reason
    assert (
        summary.behavior.samples[0].outcome == "failed"
        and "HTTP 401" in reason
        and "<redacted>" in reason
    )

    fake.reset(api_key=CUSTOM_KEY)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "fdb",
            "judge",
            "--run-name",
            "r1",
            "--judge-config",
            str(config),
            "--base-url",
            fake.base_url,
            "--reference-source",
            str(REFERENCE),
            "--retry-failed",
            "--timeout",
            "0.3",
            "--log-level",
            "debug",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={
            "PATH": "/usr/bin:/bin",
            "FDB_WORK": str(work),
            "CUSTOM_JUDGE_API_KEY": CUSTOM_KEY,
            "OPENAI_API_KEY": OPENAI_KEY,
        },
    )
    assert "judge:" in out.stderr
    captured = capsys.readouterr()
    leaks = _scan(tmp_path, [out.stdout, out.stderr, captured.out, captured.err, caplog.text])
    assert leaks == []
