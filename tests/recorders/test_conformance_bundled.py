"""The conformance battery against the bundled server (``python -m fdb serve``, embedded cascade)
with the default question (fdb's own spoken one) and the default turn detection: every rule of
turn-based, openai-ga and openai-beta passes, none is left not exercised (the README's example:
no --turn-detection)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest

from fdb.dialects import get_dialect
from recorders.conformance import rule_table, run_conformance
from tests.conftest import REPO

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def work(tmp_path_factory):
    """One $FDB_WORK for the module: the spoken question is synthesized once and cached there."""
    path = tmp_path_factory.mktemp("work")
    saved = os.environ.get("FDB_WORK")
    os.environ["FDB_WORK"] = str(path)
    yield path
    if saved is None:
        os.environ.pop("FDB_WORK", None)
    else:
        os.environ["FDB_WORK"] = saved


PROFILES = ("turn-based", "openai-beta")


@pytest.fixture(scope="module")
def batteries(server_url):
    """Both batteries at once against the one server: they wait on real-time audio, so together
    they take about the time of one."""

    async def both():
        return await asyncio.gather(*(run_conformance(server_url, profile) for profile in PROFILES))

    return dict(zip(PROFILES, asyncio.run(both()), strict=True))


@pytest.mark.parametrize("profile", PROFILES)
def test_every_rule_of_the_profile_passes(batteries, profile):
    rows = batteries[profile]
    assert [r.rule for r in rows] == [rule for rule, _ in rule_table(get_dialect(profile))]
    assert {r.status for r in rows} == {"pass"}, [
        (r.rule, r.status, r.detail) for r in rows if r.status != "pass"
    ]


def test_the_readme_command_passes_with_openai_ga(server_url, work):
    cmd = [
        sys.executable,
        "-m",
        "fdb",
        "conformance",
        "--url",
        server_url,
        "--profile",
        "openai-ga",
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "220", "FDB_WORK": str(work)}
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    summary = done.stdout.strip().splitlines()[-1]
    total = len(rule_table(get_dialect("openai-ga")))
    assert summary == f"{total} of {total} rules passed", done.stdout
    for rule in ("barge-in", "barge-in-off", "cancel", "truncate", "commit-response", "input-24k"):
        assert rule in done.stdout
