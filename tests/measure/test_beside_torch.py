"""A CPU candidate timed as a torch model calls it (`MeasureSettings.beside`): in a
process that imported torch first, its parallel loops on the OpenMP pool torch uses,
each call right after torch's own operator, outputs checked like any run's."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
PEER = "support.beside_peers:counting_matmul"

RUN = """
import json, sys
import torch
from autosched.measure.run_job import run_job
from autosched import kernel_pool
from support import beside_peers
torch.set_num_threads(1)
replies = []
for r in json.loads(sys.argv[1]):
    before_launches, before_calls = kernel_pool.launches(), beside_peers.CALLS["peer"]
    reply = run_job(r)
    reply["launches"] = kernel_pool.launches() - before_launches
    reply["peer_calls"] = beside_peers.CALLS["peer"] - before_calls
    reply["threads_after"] = torch.get_num_threads()
    ops = torch._C._dispatch_dump("autosched_measure::kernel_2_1").splitlines()
    reply["timing_op"] = next((l for l in ops if l.startswith("CPU:")), "")
    replies.append(reply)
print(json.dumps(replies))
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory, matmul_task, kernels):
    """Libraries of a good, a wrong and a half-writing kernel, and the reference."""
    from support.kernels import built_libraries

    return built_libraries(tmp_path_factory.mktemp("beside"), matmul_task,
                           {name: getattr(kernels, name) for name in ('vectorized', 'plus_one', 'half_written')})


def _beside_request(built, lib, matmul_task, **over):
    from autosched.measure import MeasureSettings
    from autosched.measure.run_job import run_request

    settings = MeasureSettings(**dict(dict(warmup=2, repeat=4, min_repeat_ms=2), **over))
    beside = {"peer": PEER, "workload": matmul_task.workload,
              "args": dict(matmul_task.args), "threads": 2}
    return run_request(settings, built[lib], built["reference"], "cpu", beside)


def _run(requests, child_env, pool="openmp"):
    env = {**child_env, "AUTOSCHED_KERNEL_POOL": pool,
           "PYTHONPATH": os.pathsep.join((str(TESTS), child_env["PYTHONPATH"]))}
    proc = subprocess.run([sys.executable, "-c", RUN, json.dumps(requests)], check=False,
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_calls_alternate_with_torchs_operator_on_the_openmp_pool(built, matmul_task,
                                                                 child_env):
    (reply,) = _run([_beside_request(built, "vectorized", matmul_task)], child_env)
    assert reply["ok"], reply
    assert len(reply["latencies"]) == 4 and len(reply["beside_latencies"]) == 4
    # measured times: a 32x32 matmul takes microseconds; one repeat of a couple of
    # milliseconds can still hold a whole time slice where a busy machine (CI's other
    # test worker) deschedules one of the two OpenMP threads, so only the fastest
    # repeat of each side is held to that
    for side in (reply["latencies"], reply["beside_latencies"]):
        assert all(0 < t < 1.0 for t in side) and min(side) < 0.01, side
    # one parallel loop a call, every call on the OpenMP launcher: torch's operator once
    # before any candidate code, the checked call into poisoned outputs, then one kernel
    # call after each of torch's calls (2 warm-up, then 4 repeats' worth)
    assert reply["peer_calls"] >= 1 + 2 + 4
    assert reply["launches"] == reply["peer_calls"]
    assert reply["threads_after"] == 1  # torch's own setting is given back
    # called through the C++ kernel a compiled model's calls go through (graph_call.py)
    assert "graph_call.cpp" in reply["timing_op"]


def test_on_tvms_pool_no_loop_goes_through_the_launcher(built, matmul_task, child_env):
    (reply,) = _run([_beside_request(built, "vectorized", matmul_task)], child_env, "tvm")
    assert reply["ok"] and reply["launches"] == 0 and reply["peer_calls"] >= 7


def test_a_wrong_kernel_is_a_wrong_answer_and_is_not_timed(built, matmul_task, child_env):
    wrong, half = _run([_beside_request(built, "plus_one", matmul_task),
                        _beside_request(built, "half_written", matmul_task)], child_env)
    assert wrong == {**wrong, "ok": False, "kind": "wrong_answer"}
    assert wrong["error"].startswith("output C: 1024 of 1024 elements outside tolerance; "
                                     "max abs err 1.000e+00;")
    # the elements it leaves unwritten are poisoned, whatever torch.empty hands back
    assert half["kind"] == "wrong_answer" and half["error"].startswith("output C: 512 of 1024")
    # checked before any timing: the first peer call and the warm-up's only
    assert wrong["peer_calls"] == half["peer_calls"] == 1 + 2


def test_a_peer_that_does_not_run_is_the_machines_fault_not_the_candidates(
        built, matmul_task, child_env):
    bad_name, raising = _run([
        dict(_beside_request(built, "vectorized", matmul_task),
             beside=dict(_beside_request(built, "vectorized", matmul_task)["beside"],
                         peer="support.beside_peers:no_such_peer")),
        dict(_beside_request(built, "vectorized", matmul_task),
             beside=dict(_beside_request(built, "vectorized", matmul_task)["beside"],
                         workload="not_matmul"))], child_env)
    for reply in (bad_name, raising):
        assert reply["infrastructure"] is True and "kind" not in reply, reply
        assert "\n" not in reply["cause"] + reply["remedy"]
        assert reply["launches"] == 0  # no candidate code ran
    assert bad_name["cause"].startswith("torch's operator to time matmul beside "
                                        "(support.beside_peers:no_such_peer) does not run "
                                        "here: AttributeError")
    assert raising["cause"].startswith("torch's operator to time not_matmul beside "
                                       f"({PEER}) does not run here: AssertionError")


def test_only_the_cpu_is_timed_beside_torch(built, matmul_task):
    from autosched.measure import MeasureSettings
    from autosched.measure.run_job import run_request

    with pytest.raises(ValueError, match="on the CPU only"):
        run_request(MeasureSettings(), built["vectorized"], built["reference"], "cuda",
                    {"peer": PEER})


def test_the_local_runner_times_beside_torch_in_a_torch_worker(tmp_path, matmul_task,
                                                               kernels, target, monkeypatch):
    from autosched.measure import MeasureInput, MeasureSettings
    from autosched.measure.factory import make_measurer

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        p for p in (str(TESTS), os.environ.get("PYTHONPATH")) if p))
    settings = MeasureSettings(repeat=3, min_repeat_ms=1, build_workers=1, beside=PEER)
    measurer = make_measurer(settings, "local", str(tmp_path))
    try:
        good, wrong = [f.result() for f in measurer.measure(
            [MeasureInput(matmul_task, target, None, kernels.vectorized),
             MeasureInput(matmul_task, target, None, kernels.plus_one)])]
        role = measurer.runner._role
    finally:
        measurer.close()
    assert role == "run_torch"
    assert good.ok and len(good.latencies) == 3
    assert not wrong.ok and wrong.error_kind == "wrong_answer"
