"""Replaying a GPU log on a machine without a GPU: the tuning loop on our CUDA rules'
space for sm_90a, measured by the simulated measurer from the SYNTHETIC log
(tests/support/gpu_log.py), records exactly the log's results under the log's machine."""
from __future__ import annotations

import dataclasses

import pytest
from support.gpu_log import LOG, LoggedCandidates, load_task, log_target

from autosched.config import TuneConfig
from autosched.db import open_database
from autosched.db.jsonl import read_records
from autosched.errors import UserError
from autosched.measure.simulated import NotInLog, SimulatedMeasurer
from autosched.target import resolve_target
from autosched.tuner import tune_tasks


@pytest.fixture(scope="module")
def logged():
    return read_records(LOG)


@pytest.fixture(scope="module")
def tasks():
    return [load_task(0), load_task(2)]  # matmul_mp 128^3 fp16, matmul 128^3 fp32


def replay(tmp_path, tasks, measurer, trials, name="replay", seed=0):
    config = TuneConfig(target=log_target(), trials=trials, batch_size=8, seed=seed,
                        work_dir=str(tmp_path), db_url=f"sqlite:///{tmp_path}/{name}.db")
    result = tune_tasks(tasks, config, measurer=measurer,
                        strategy_factory=lambda: LoggedCandidates(measurer))
    return result, config.database_url


def test_the_synthetic_log_is_marked_and_replays_in_our_cuda_space(logged):
    assert len(logged) == 120
    assert {r.target_key for r in logged} == {log_target()}
    assert {r.hardware["synthetic"] for r in logged} == {True}
    assert {r.provenance["synthetic"] for r in logged} == {True}
    assert {r.hardware["name"] for r in logged} == {"NVIDIA H100 80GB HBM3 (synthetic)"}
    assert sum(1 for r in logged if not r.ok) == 6


def test_a_cuda_replay_records_the_logs_results_and_machine(tmp_path, tasks, logged):
    sim = SimulatedMeasurer.from_log(LOG)
    result, url = replay(tmp_path, tasks, sim, 24)
    assert result.trials == 24
    assert result.target.fingerprint == logged[0].hardware  # the H100's, not this host's
    by_key = {(r.task_key, r.candidate_key): r for r in logged}
    with open_database(url) as db:
        records = db.records()
    assert len(records) == len({(r.task_key, r.candidate_key) for r in records}) == 24
    # three batches of 8: one a task, then the scheduler's pick
    assert sum(1 for r in records if r.task_key == tasks[0].key) == 8
    assert sum(1 for r in records if r.task_key == tasks[1].key) == 16
    for rec in records:
        assert rec.result == by_key[(rec.task_key, rec.candidate_key)].result
        assert rec.hardware == logged[0].hardware
        assert rec.hardware_key == logged[0].hardware_key
        assert rec.target_key == logged[0].target_key
    for state in result.tasks:
        mine = [r for r in records if r.task_key == state.task.key]
        assert state.trials == len(mine)
        assert state.best_latency == min(r.latency for r in mine if r.ok)
        assert state.best_record.candidate_key == min(
            (r for r in mine if r.ok), key=lambda r: r.latency).candidate_key
        assert mine[0].candidate == {"sketch": "default", "decisions": {}}


def test_a_candidate_the_log_lacks_stops_the_replay_and_nothing_is_recorded(tmp_path, tasks,
                                                                           logged):
    default_of_first = {(tasks[0].key, r.candidate_key) for r in logged
                        if r.task_key == tasks[0].key and r.candidate["sketch"] == "default"}
    partial = SimulatedMeasurer([r for r in logged
                                 if (r.task_key, r.candidate_key) not in default_of_first])
    with pytest.raises(NotInLog, match="matmul_mp"):
        replay(tmp_path, tasks, partial, 24, "partial")
    with open_database(f"sqlite:///{tmp_path}/partial.db") as db:
        assert db.count() == 0
    assert partial.measured == []


def test_a_log_of_two_machines_is_refused_unless_one_is_named(logged):
    target = resolve_target(log_target())
    other_hw = dict(logged[0].hardware, name="NVIDIA H200 (synthetic)")
    other = [dataclasses.replace(r, hardware=other_hw, hardware_key="0123456789abcdef")
             for r in logged[:3]]
    with pytest.raises(UserError, match=r"2 machines for this target: NVIDIA H200 \(synthetic\) "
                                        r"\(0123456789abcdef\), NVIDIA H100 80GB HBM3 "
                                        r"\(synthetic\) \(\w{16}\); replay one"):
        SimulatedMeasurer(logged + other).hardware(target)
    named = SimulatedMeasurer(logged + other, hardware_key="0123456789abcdef")
    assert named.hardware(target) == other_hw
    assert len(named) == 3


def test_a_log_of_another_target_config_still_names_its_machine(logged):
    """The tiny CPU log's target config is this machine's; replayed for another config
    (here the GPU log under a plain sm_90 target) the one machine is still the log's."""
    plain = resolve_target('{"kind": "cuda", "arch": "sm_90"}')
    assert plain.key != logged[0].target_key
    assert SimulatedMeasurer(logged).hardware(plain) == logged[0].hardware
    assert SimulatedMeasurer([]).hardware(plain) == plain.fingerprint
