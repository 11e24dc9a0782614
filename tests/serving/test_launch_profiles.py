"""The shipped launch profiles (serving/profiles/*.yaml) and the checks of serving.launch_profiles:
vars, ports, GPU memory shares, nodes calling the profile's own services; and one profile served
for real with stand-ins for SGLang (tests/serving/sglang_stand_in.py)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import tomllib
from fnmatch import fnmatch

import httpx
import pytest
import yaml

from fdb.errors import FdbError
from serving.launch_profiles import PROFILE_DIR, gpus, profile_names
from serving.systems import resolve_system
from tests.conftest import REPO, free_port

PROFILES = profile_names()


@pytest.mark.parametrize("name", PROFILES)
def test_every_shipped_profile_loads_and_passes_its_checks(name):
    config = resolve_system(
        profile=name
    )  # parses, vars filled, ports, GPU shares, nodes -> services
    commands = {entry.name: entry.command for entry in config.services}
    assert set(commands) == {"asr", "llm", "tts"} and set(config.backends.nodes()) == {
        "asr",
        "llm",
        "tts",
    }
    assert config.backends.vad == "silero"  # fdb's graph keeps VAD, turn taking and dialog
    for entry in config.services:
        assert "sglang" in " ".join(entry.command) and "--mem-fraction-static" in entry.command
        assert "CUDA_VISIBLE_DEVICES" in entry.env and "${" not in " ".join(entry.command)
    assert "sglang.launch_server" in commands["llm"]


def test_the_profiles_are_one_and_two_gpus():
    one = {
        gpu for entry in resolve_system(profile="sglang-qwen3-1gpu").services for gpu in gpus(entry)
    }
    two = {
        gpu for entry in resolve_system(profile="sglang-qwen3-2gpu").services for gpu in gpus(entry)
    }
    assert one == {"GPU 0"} and two == {"GPU 0", "GPU 1"}
    assert {"sglang-qwen3-1gpu", "sglang-qwen3-2gpu"} <= set(PROFILES)


def test_the_profiles_and_the_graph_are_package_data():
    """A wheel without them could not serve (serving/graph/embedded-cascade.yaml was left out
    before)."""
    globs = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]["serving"]
    for path in (REPO / "serving").rglob("*.yaml"):
        assert any(fnmatch(str(path.relative_to(REPO / "serving")), glob) for glob in globs), path


def test_a_var_moves_a_port_everywhere_and_a_bare_override_is_caught():
    config = resolve_system(
        profile="sglang-qwen3-1gpu", overrides=[("vars.llm_port", 9100), ("vars.gpu", 3)]
    )
    llm = next(entry for entry in config.services if entry.name == "llm")
    assert llm.port == 9100 and "9100" in llm.command and llm.env["CUDA_VISIBLE_DEVICES"] == "3"
    assert config.backends.llm.base_url == "http://127.0.0.1:9100/v1"
    with pytest.raises(
        FdbError, match=r"services.llm: its command's --port 8000 differs from port 9100"
    ):
        resolve_system(profile="sglang-qwen3-1gpu", overrides=[("services.llm.port", 9100)])
    with pytest.raises(
        FdbError, match=r"backends.llm.base_url http://127.0.0.1:9000/v1: no service of the profile"
    ):
        resolve_system(
            profile="sglang-qwen3-1gpu",
            overrides=[("backends.llm.base_url", "http://127.0.0.1:9000/v1")],
        )
    with pytest.raises(FdbError, match=r"no service of the profile serves :9000"):
        resolve_system(
            profile="sglang-qwen3-1gpu",
            overrides=[("backends.asr.base_url", "http://[::1]:9000/v1")],
        )
    elsewhere = resolve_system(
        profile="sglang-qwen3-1gpu",
        overrides=[("backends.llm.base_url", "http://gpu-host:8000/v1")],
    )
    assert (
        elsewhere.backends.llm.base_url == "http://gpu-host:8000/v1"
    )  # a service you run elsewhere
    with pytest.raises(FdbError, match=r"no such shipped profile .*sglang-qwen3-1gpu"):
        resolve_system(profile="nope")


def _service(
    name: str, port: int, fraction: float | None, gpu: str | None = "0", tp: int = 1
) -> dict:
    command = ["python", "-m", "sglang.launch_server", "--port", str(port), "--tp-size", str(tp)]
    command += ["--mem-fraction-static", str(fraction)] if fraction is not None else []
    return {
        "name": name,
        "command": command,
        "port": port,
        "env": {"CUDA_VISIBLE_DEVICES": gpu} if gpu else {},
    }


@pytest.mark.parametrize(
    ("launch", "message"),
    [
        (
            {"services": [_service("a", 9001, 0.6), _service("b", 9002, 0.5)]},
            "GPU 0: the services' --mem-fraction-static add up to 1.10 > 1 (a 0.6, b 0.5)",
        ),
        (
            {"services": [_service("a", 9001, 0.6, "0,1", tp=2), _service("b", 9002, 0.5, "1")]},
            "GPU 1: the services' --mem-fraction-static add up to 1.10 > 1",
        ),
        (
            {"services": [_service("a", 9001, 0.6, None), _service("b", 9002, 0.5, None)]},
            "GPU #0 of the server's own CUDA_VISIBLE_DEVICES: "
            "the services' --mem-fraction-static add up to 1.10",
        ),
        (
            {"services": [_service("a", 9001, 0.6), _service("b", 9002, None)]},
            "services.b: runs SGLang on GPU 0 beside other services without --mem-fraction-static",
        ),
        (
            {"services": [_service("a", 9001, 1.5)]},
            "services.a: --mem-fraction-static '1.5' is not a number in (0, 1)",
        ),
        (
            {
                "vars": {"p": 9001},
                "services": [{"name": "a", "command": ["x", "--port=${q}"], "port": "${p}"}],
            },
            "services[0].command[1]: ${q} is not defined under vars (defined: ['p'])",
        ),
        (
            {"vars": {"p": None}, "services": [{"name": "a", "command": ["x"], "port": "${p}"}]},
            "services[0].port: vars.p has no value",
        ),
    ],
)
def test_launch_checks_name_the_file_and_the_field(tmp_path, launch, message):
    path = tmp_path / "launch.yaml"
    path.write_text(yaml.safe_dump(launch), encoding="utf-8")
    with pytest.raises(FdbError) as err:
        resolve_system(config=path)
    assert str(path) in err.value.message and message in err.value.message and err.value.hint


@pytest.mark.slow
def test_a_profile_starts_with_stand_ins_and_stops_cleanly(tmp_path):
    """fdb serve --profile with the SGLang environment's python replaced (--vars.sglang_python)
    by stand-ins on free ports: the three services start with the profile's real arguments and
    GPUs, fdb answers /health, and SIGTERM stops it and every service (no orphan)."""
    python = tmp_path / "sglang-python"
    python.write_text(
        f'#!/bin/sh\nexec {sys.executable} {REPO}/tests/serving/sglang_stand_in.py "$@"\n'
    )
    python.chmod(0o755)
    ports = {role: free_port() for role in ("asr", "llm", "tts", "fdb")}
    flags = [f"--vars.{role}_port={ports[role]}" for role in ("asr", "llm", "tts")]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fdb",
            "serve",
            "--profile",
            "sglang-qwen3-2gpu",
            "--port",
            str(ports["fdb"]),
            f"--vars.sglang_python={python}",
            *flags,
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    launched, alive = {}, []
    try:
        deadline = time.monotonic() + 90
        while not _healthy(ports["fdb"]):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read().decode()[
                -2000:
            ]
            time.sleep(0.2)
        launched = {
            role: httpx.get(f"http://127.0.0.1:{ports[role]}/test/launch").json()
            for role in ("asr", "llm", "tts")
        }
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        alive = [seen["pid"] for seen in launched.values() if _alive(seen["pid"])]
        for pid in alive:
            os.kill(pid, signal.SIGKILL)
    assert len(launched) == 3 and not alive, f"services outlived the server: {alive}"
    assert (
        launched["llm"]["argv"][:2] == ["-m", "sglang.launch_server"]
        and launched["llm"]["cuda_visible_devices"] == "0"
    )
    assert (
        launched["tts"]["argv"][:3] == ["-m", "sglang_omni.cli", "serve"]
        and launched["tts"]["cuda_visible_devices"] == "1"
    )
    assert (
        "--mem-fraction-static" in launched["asr"]["argv"]
        and str(ports["asr"]) in launched["asr"]["argv"]
    )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=0.5).status_code == 200
    except httpx.HTTPError:
        return False


def test_the_server_port_must_not_be_a_service_port():
    from serving.launcher import serve

    with pytest.raises(FdbError, match="--port 8000 is also the port of service 'llm'"):
        serve(port=8000, profile="sglang-qwen3-1gpu")


def test_profile_and_config_together_are_refused(tmp_path):
    with pytest.raises(FdbError, match="--profile and --config both"):
        resolve_system(config=tmp_path / "x.yaml", profile="sglang-qwen3-1gpu")


def test_docs_name_every_var_and_only_vars_that_exist():
    doc = (REPO / "docs" / "sglang.md").read_text(encoding="utf-8")
    defined = {
        name
        for path in PROFILE_DIR.glob("*.yaml")
        for name in yaml.safe_load(path.read_text())["vars"]
    }
    assert defined <= set(re.findall(r"`([a-z_]+)`", doc)), (
        "a profile var is missing from docs/sglang.md"
    )
    assert set(re.findall(r"--vars\.([a-z_]+)", doc)) <= defined
    assert set(re.findall(r"--profile (sglang-[a-z0-9-]+)", doc)) <= set(PROFILES)
