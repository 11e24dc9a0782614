"""Shards and GPUs: the planning refusals of the runbook's Troubleshooting table,
as pure functions."""

from __future__ import annotations

import pytest

from fdb.errors import FdbError
from fdb.settings import load_settings
from runs.gpus import check_capacity, max_sessions_of, parse_gpus, plan_servers, shard_server


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in ("CUDA_VISIBLE_DEVICES", "GPU", "SERVER_PORT", "JUDGE_PORT"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_one_server_per_gpu_on_derived_ports():
    plans = plan_servers(parse_gpus("0,1"), num_shards=2)
    assert [(p.gpu, p.port, p.name) for p in plans] == [
        (0, 8097, "model-server-gpu0"),
        (1, 8107, "model-server-gpu1"),
    ]
    assert [shard_server(i, 2) for i in range(5)] == [0, 1, 0, 1, 0]
    assert [p.port for p in plan_servers(parse_gpus(None), 1)] == [8097]


def test_job_gpu_sets_ports(clean_env):
    clean_env.setenv("CUDA_VISIBLE_DEVICES", "1,2")
    settings = load_settings()
    assert (settings.gpu, settings.server_port, settings.judge_port) == (1, 8107, 30010)
    assert parse_gpus(None) == [1]
    assert [p.port for p in plan_servers(parse_gpus("1,2"), 2)] == [8107, 8117]


def test_refusals(clean_env):
    with pytest.raises(FdbError, match="--num-shards 1 leaves model servers idle") as idle:
        plan_servers([0, 1], num_shards=1)
    assert "at least as many shards as GPUs" in idle.value.one_line()
    clean_env.setenv("SERVER_PORT", "9000")
    with pytest.raises(FdbError, match="SERVER_PORT gives every model server the same port"):
        plan_servers([0, 1], num_shards=2)
    assert [p.port for p in plan_servers([0], 1)] == [9000]
    clean_env.setenv("CUDA_VISIBLE_DEVICES", "0")
    with pytest.raises(FdbError, match=r"--gpus 0,1 reaches outside CUDA_VISIBLE_DEVICES"):
        parse_gpus("0,1")
    clean_env.setenv("CUDA_VISIBLE_DEVICES", "GPU-3f2a")
    with pytest.raises(
        FdbError, match="CUDA_VISIBLE_DEVICES must list distinct numeric GPU indices"
    ):
        parse_gpus(None)
    clean_env.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    clean_env.setenv("GPU", "1")
    with pytest.raises(FdbError, match="GPU and CUDA_VISIBLE_DEVICES disagree"):
        parse_gpus(None)


def test_shards_beyond_max_sessions_are_refused_up_front():
    assert max_sessions_of({"max_sessions": 2}) == 2
    assert max_sessions_of({"limits": {"max_sessions": 4}}) == 4
    assert max_sessions_of({"protocols": []}) is None
    check_capacity(2, 1, 2)
    check_capacity(4, 2, 2)
    check_capacity(8, 1, None)  # the server does not say: nothing to refuse
    with pytest.raises(
        FdbError, match="--num-shards 3 over 1 GPU\\(s\\) exceeds the model server's max_sessions"
    ) as e:
        check_capacity(3, 1, 2)
    assert "lower --num-shards or add GPUs with --gpus" in e.value.one_line()
