"""The RPC runner against real TVM servers: results are checked on the wire, every
failure kind is classified, a hung server is let go and its candidate measured
elsewhere."""
from __future__ import annotations

import time

import pytest

from autosched.errors import NoServersLeft
from autosched.measure import MeasureInput
from autosched.measure.factory import make_measurer
from autosched.measure.rpc.runner import GRACE

N = 64  # the kernels below have the signature of the 64^3 matmul task


def _kernels(task):
    from support.kernels import broken_kernels, vectorized_matmul

    broken = broken_kernels(N)
    return dict(plain=task.mod, vectorized=vectorized_matmul(task, 16),
                **{name: broken[name] for name in
                   ("plus_one", "half_written", "missing_symbol", "hang")})


@pytest.mark.slow
def test_outputs_are_checked_and_failures_classified(farm, key, farm_settings, target,
                                                     matmul64, tmp_path):
    servers = farm.add_servers(key, 2)
    kernels = _kernels(matmul64)
    names = ["plain", "vectorized", "plus_one", "half_written", "hang", "missing_symbol"]
    inputs = [MeasureInput(matmul64, target, None, kernels[n]) for n in names]
    with make_measurer(farm_settings, farm.url(key), str(tmp_path / "work")) as measurer:
        results = dict(zip(names, measurer.measure(inputs)))
        runner = measurer.runner
        # the server that ran the endless kernel ended that session and still serves
        after = measurer.measure([MeasureInput(matmul64, target, None, kernels["plain"])])
    assert results["plain"].ok and results["vectorized"].ok
    assert all(0 < x < 0.1 for x in results["plain"].latencies + results["vectorized"].latencies)
    assert len(results["plain"].latencies) == farm_settings.repeat
    assert results["plus_one"].error_kind == "wrong_answer"
    assert "output C: 4096 of 4096 elements outside tolerance" in results["plus_one"].error_msg
    assert results["half_written"].error_kind == "wrong_answer"
    assert "2048 of 4096" in results["half_written"].error_msg
    hang = results["hang"]
    assert hang.error_kind == "run_timeout"
    assert f"{farm_settings.run_timeout:g}s timeout" in hang.error_msg
    assert farm_settings.run_timeout <= hang.run_seconds < farm_settings.run_timeout + GRACE
    assert after[0].ok
    # calling a missing symbol kills the session process, and TVM's server with it; the
    # candidate is blamed, not sent on to crash the other server
    crash = results["missing_symbol"]
    assert crash.error_kind == "run_error"
    assert "the kernel took RPC server 127.0.0.1:" in crash.error_msg
    (crashed,) = runner.lost_servers
    assert runner.stats == {"measured": 6, "lost": 1, "crashed": 1}
    assert sum(runner.servers_used.values()) == 6
    assert set(runner.servers_used) <= {s.address for s in servers}
    assert farm.registered(key) == [s.address for s in servers if s.address != crashed]


@pytest.mark.slow
def test_hung_server_is_let_go_and_its_candidate_measured_elsewhere(farm, key, farm_settings,
                                                                    target, matmul64,
                                                                    tmp_path):
    frozen, healthy = farm.add_servers(key, 2)
    farm.freeze(frozen)  # still registered, still in the free list, never answers
    inputs = [MeasureInput(matmul64, target, None, matmul64.mod) for _ in range(4)]
    try:
        with make_measurer(farm_settings, farm.url(key, sessions=2), str(tmp_path / "w")) as m:
            start = time.monotonic()
            results = m.measure(inputs)
            seconds = time.monotonic() - start
            runner = m.runner
        # every server hung: wait for a free one as long as allowed, then stop
        farm.freeze(healthy)
        with make_measurer(farm_settings, farm.url(key, wait=2), str(tmp_path / "w")) as m:
            with pytest.raises(NoServersLeft, match=f"none of the 2 RPC servers of key '{key}' "
                               f"at tracker {farm.address} became free within 2s"):
                m.measure(inputs[:1])
    finally:
        farm.kill(frozen)
        farm.kill(healthy)
    assert [r.ok for r in results] == [True] * 4
    assert runner.stats == {"measured": 4, "lost": 1, "retried": 1}
    assert runner.servers_used == {healthy.address: 4}
    assert runner.lost_servers == {frozen.address}
    assert seconds >= farm_settings.run_timeout + GRACE  # it waited out the hung server once


def test_sessions_option_caps_concurrency(farm, pool, farm_settings, target, matmul64,
                                          tmp_path):
    key, servers = pool
    before = sum(s.sessions_started() for s in servers)
    inputs = [MeasureInput(matmul64, target, None, matmul64.mod) for _ in range(3)]
    with make_measurer(farm_settings, farm.url(key, sessions=1), str(tmp_path / "w")) as m:
        assert m.runner.concurrency == 1
        assert all(r.ok for r in m.measure(inputs))
        assert len([w for w in m.runner._workers if w is not None]) == 1
    with make_measurer(farm_settings, farm.url(key), str(tmp_path / "w")) as m:
        assert m.runner.concurrency == 2
    assert sum(s.sessions_started() for s in servers) == before + 3


def test_a_key_without_the_targets_device_is_a_user_error(farm, pool, farm_settings, matmul64,
                                                          tmp_path):
    """CUDA candidates sent to CPU-only servers: one clear line, not a failure per kernel."""
    from tvm import s_tir

    from autosched.errors import UserError
    from autosched.target import resolve_target

    cuda = resolve_target('{"kind": "cuda", "arch": "sm_90"}')
    sch = s_tir.Schedule(matmul64.mod)
    i, j, _ = sch.get_loops(sch.get_sblock("C"))
    sch.bind(i, "blockIdx.x")
    sch.bind(j, "threadIdx.x")
    key, servers = pool
    with make_measurer(farm_settings, farm.url(key), str(tmp_path / "w")) as m:
        with pytest.raises(UserError, match=r"RPC server 127\.0\.0\.1:\d+ has no cuda device"):
            m.measure([MeasureInput(matmul64, cuda, None, sch.mod)])
    assert farm.registered(key) == sorted(s.address for s in servers)  # both still serve
