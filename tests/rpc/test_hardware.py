"""Records measured through RPC carry the fingerprint of the server that measured them,
read over its session, and one key never mixes two kinds of machine. The other CPU is a
real TVM server on this machine whose start-up describes another CPU
(`support/reporting_server.py`)."""
from __future__ import annotations

import os
import platform

import pytest
import tvm_ffi

from autosched.cli import main
from autosched.config import TuneConfig
from autosched.db import open_database
from autosched.target import resolve_target
from autosched.tuner import tune_tasks
from autosched.versions import current_versions
from search_space import SPACE_VERSION

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OTHER_CPU, OTHER_CORES = "sapphirerapids", 96
TRIALS = 6


def _host_cpu() -> str:
    """What LLVM calls this machine's CPU (what a stock server here says)."""
    return str(tvm_ffi.get_global_func("target.llvm_get_system_cpu")())


def _host_cores() -> int:
    return int(tvm_ffi.get_global_func("s_tir.meta_schedule.cpu_count")(True))


def _server_cpu(model: str, cores: int) -> dict:
    """The fingerprint a server on this machine gets when it says `model` and `cores`."""
    import tvm

    host = resolve_target("llvm")
    return {"device": "cpu", "model": model,
            "vendor": tvm_ffi.get_global_func("target.llvm_get_system_x86_vendor")(),
            "mcpu": host.config["mcpu"], "cores": cores, "machine": platform.machine(),
            "memory_gib": round(tvm.cpu().total_global_memory / 2**30)}


def _tune(runner: str, farm_settings, tmp_path, matmul64):
    config = TuneConfig(target="llvm", trials=TRIALS, db_url=f"sqlite:///{tmp_path}/t.db",
                        runner=runner, work_dir=str(tmp_path / "work"), batch_size=TRIALS,
                        strategy="random", measure=farm_settings)
    return config, tune_tasks([matmul64], config)


@pytest.mark.slow
def test_records_carry_the_servers_fingerprint_and_machines_stay_apart(
        farm, pool, key, farm_settings, matmul64, tmp_path):
    farm.add_servers(key, 1, cpu=OTHER_CPU, cores=OTHER_CORES)
    host = resolve_target("llvm")
    versions = current_versions(SPACE_VERSION)

    config, other = _tune(farm.url(key), farm_settings, tmp_path, matmul64)
    assert other.stopped is None and other.trials == TRIALS
    assert other.target.fingerprint == _server_cpu(OTHER_CPU, OTHER_CORES)
    assert other.target.key == host.key and other.target.hardware_key != host.hardware_key
    with open_database(config.database_url) as db:
        records = db.records(task_key=matmul64.key)
        assert len(records) == TRIALS
        assert all(r.hardware == other.target.fingerprint for r in records)
        assert {r.hardware_key for r in records} == {other.target.hardware_key}
        assert db.measured_keys(matmul64.key, host.key, host.hardware_key, versions) == set()

    # the same database, measured on the stock servers of this machine: its own machine,
    # so the other CPU's measurements neither count as done nor rank here
    pool_key, _ = pool
    _, stock = _tune(farm.url(pool_key), farm_settings, tmp_path, matmul64)
    assert stock.trials == TRIALS
    assert stock.target.fingerprint == _server_cpu(_host_cpu(), _host_cores())
    with open_database(config.database_url) as db:
        mine = db.measured_keys(matmul64.key, host.key, stock.target.hardware_key, versions)
        theirs = db.measured_keys(matmul64.key, host.key, other.target.hardware_key, versions)
        assert len(mine) == len(theirs) == TRIALS
        assert stock.tasks[0].space.default_candidate().key in mine & theirs
        assert len(db.records(task_key=matmul64.key)) == 2 * TRIALS


@pytest.mark.slow
def test_a_key_whose_servers_differ_is_refused_in_one_line(farm, key, tmp_path, capsys):
    stock = farm.add_servers(key, 1)
    other = farm.add_servers(key, 1, cpu=OTHER_CPU, cores=OTHER_CORES)
    url = farm.url(key)
    code = main(["tune", os.path.join(ROOT, "examples", "matmul.py"), "--arg", "M=64",
                 "--arg", "N=64", "--arg", "K=64", "--target", "llvm", "--trials", "16",
                 "--strategy", "random", "--min-repeat-ms", "0", "--run-timeout", "8",
                 "--runner", url, "--db", f"sqlite:///{tmp_path}/t.db",
                 "--work-dir", str(tmp_path / "w")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    # the first server read sets the key's machine; the other is named beside it
    said = {stock[0].address: f"cores={_host_cores()}, cpu={_host_cpu()}",
            other[0].address: f"cores={OTHER_CORES}, cpu={OTHER_CPU}"}
    first, second = sorted(said, key=err[0].index)
    assert err[0] == (f"autosched: error: --runner {url}: the servers of key '{key}' are "
                      f"different machines ({first}: {said[first]}; {second}: "
                      f"{said[second]}); give each kind of machine its own key")
    # what was recorded before the refusal is all of that first machine
    with open_database(f"sqlite:///{tmp_path}/t.db") as db:
        records = db.records()
    model = OTHER_CPU if first == other[0].address else _host_cpu()
    assert all(r.hardware["model"] == model for r in records)
    assert len({r.hardware_key for r in records}) <= 1


def test_a_cuda_servers_fingerprint_is_its_gpu_whatever_this_machine_has():
    from autosched.target import server_fingerprint

    target = resolve_target("cuda")
    reading = {"name": "NVIDIA H200", "compute_version": "9.0", "sm_count": 132,
               "memory": 150_110_011_392}
    fp = server_fingerprint(target, reading)
    assert fp == {"device": "gpu", "name": "NVIDIA H200", "arch": "sm_90", "sm_count": 132,
                  "memory": 150_110_011_392}
    assert target.measured_on(fp).fingerprint == fp
    assert target.measured_on(fp).hardware_key != target.hardware_key
    assert target.measured_on(target.fingerprint) is target
    silent = server_fingerprint(target, {})  # a server that says nothing is not this one
    assert silent["name"] == silent["arch"] == "unknown (the RPC server does not say)"
