"""torch's one call computing several gradients as a baseline record of its own: kept
apart from each task's single baseline, timed once per call by `tune-model`, carried by
a CUDA bundle round as a job of its own and imported back, and deciding the call's
kernels together where only the records are known."""
from __future__ import annotations

import io
import json

import pytest

torch = pytest.importorskip("torch")

from support.model_files import write_model_file  # noqa: E402

GPU = {"device": "gpu", "name": "NVIDIA H100 80GB HBM3", "arch": "sm_90", "driver": "580.65"}


@pytest.fixture(scope="module")
def resnet(tmp_path_factory):
    """(model ops, tasks, sibling groups) of the small ResNet's training step, one stage."""
    from autosched.model.extract import extract, model_tasks
    from autosched.model.joint_calls import sibling_groups
    from autosched.model.modelfile import load_model_file

    path = write_model_file(tmp_path_factory.mktemp("m"), "resnet", stages=1)
    model_ops = extract(load_model_file(str(path)), True)
    groups = sibling_groups(model_ops)
    assert groups  # the convolutions' gradients
    return model_ops, model_tasks(model_ops), groups


@pytest.fixture
def db(tmp_path):
    from autosched.db import open_database

    with open_database(f"sqlite:///{tmp_path}/db.sqlite") as d:
        yield d


def _versions():
    from autosched.versions import current_versions
    from search_space import SPACE_VERSION

    return current_versions(SPACE_VERSION)


def test_a_calls_baseline_is_found_only_as_that_call(resnet, db, target):
    from autosched.model.baseline import Baseline, joint_outputs, lookup, record_baseline

    _, tasks, groups = resnet
    members = [tasks[i] for i in groups[0]]
    first, outputs = joint_outputs(members)
    assert joint_outputs(members[::-1]) == (first, outputs)   # whatever the order
    assert list(outputs) == sorted(t.key for t in members) and first.key == outputs[0]
    versions = _versions()
    single = record_baseline(db, first, target, versions, [2e-6], 2)
    joint = record_baseline(db, first, target, versions, [5e-6], 2, outputs=outputs)
    # the newer joint record is not the task's own baseline, nor the reverse
    assert lookup(db, first, target, versions, 2).record_id == single
    assert lookup(db, first, target, versions, 2, outputs) == Baseline(5e-6, joint)
    assert lookup(db, first, target, versions, 2, outputs[:1]) is None
    (rec,) = [r for r in db.records(ok_only=True) if r.id == joint]
    assert rec.candidate["outputs"] == list(outputs)
    assert rec.task_key == "torch:" + first.key


def test_tune_models_baselines_time_each_call_once(resnet, db, target):
    from autosched.measure.settings import MeasureSettings
    from autosched.model.baseline import joint_outputs, lookup
    from autosched.model.tuning import measure_baselines

    model_ops, tasks, groups = resnet
    settings = MeasureSettings(repeat=1, min_repeat_ms=1, warmup=1)
    versions = _versions()
    assert measure_baselines(model_ops, tasks, db, target, versions, settings) \
        == len(tasks) + len(groups)
    assert measure_baselines(model_ops, tasks, db, target, versions, settings) == 0
    for group in groups:
        first, outputs = joint_outputs([tasks[i] for i in group])
        base = lookup(db, first, target, versions, torch.get_num_threads(), outputs)
        assert base is not None and 0 < base.latency_s < 1
    joint = [r for r in db.records(ok_only=True) if "outputs" in r.candidate]
    assert len(joint) == len(groups) and all(len(r.result.latencies) >= 7 for r in joint)


def test_a_bundle_round_carries_each_call_and_its_result_comes_back(resnet, db, tmp_path):
    from autosched.measure.bundle.baselines import measure_baselines
    from autosched.measure.bundle.format import read_results
    from autosched.model.baseline import joint_outputs, lookup
    from autosched.model.bundle_jobs import import_baselines, missing_jobs
    from autosched.target import resolve_target

    model_ops, tasks, groups = resnet
    there = resolve_target(json.dumps({"kind": "cuda", "arch": "sm_90a"})).measured_on(GPU)
    versions = _versions()
    jobs = missing_jobs(db, model_ops, tasks, there, versions)
    assert len(jobs) == len(tasks) + len(groups)
    calls = jobs[len(tasks):]
    for job, group in zip(calls, groups):
        first, outputs = joint_outputs([tasks[i] for i in group])
        assert (job["task_key"], job["outputs"]) == (first.key, list(outputs))
        assert [m["workload"] for m in job["members"]] == \
            [model_ops.ops[i].workload for i in group]
        assert job["members"][0]["inputs"] == [
            {"shape": list(s.shape), "dtype": s.dtype} for s in tasks[group[0]].inputs]
    # the measuring side (no GPU for torch here): the result file still names the call
    (tmp_path / "results").mkdir()
    ided = [dict(j, id=f"r1-b{i:03d}") for i, j in enumerate(calls)]
    manifest = {"round": 1, "settings": {"repeat": 3, "run_timeout": 30.0},
                "candidates": [], "baselines": ided}
    assert measure_baselines(manifest, str(tmp_path), ided, GPU, io.StringIO()) == 0
    files = read_results(str(tmp_path))
    assert sorted(r["outputs"] for r in files.values()) == sorted(j["outputs"] for j in calls)
    # what a GPU machine would have written: every job timed, one call twice (rounds 1, 2)
    results = [dict(f, result={"latencies": [1e-4 * (n + 1)] * 3}, host="gpu01", user="u",
                    time=1.0, runtime={"torch": "2.11.0+cu130"})
               for n, f in enumerate(files.values())]
    results.append(dict(results[0], round=2, result={"latencies": [9e-4] * 3}))
    stray = dict(results[0], outputs=results[0]["outputs"] + ["a task of another model"])
    assert import_baselines(db, results + [stray], tasks, there, versions) == len(groups)
    assert import_baselines(db, results, tasks, there, versions) == 0
    by_key = {t.key: t for t in tasks}
    for n, r in enumerate(results[:-1]):   # the newest round's result of a call wins
        first = by_key[r["outputs"][0]]
        assert lookup(db, first, there, versions, 0, tuple(r["outputs"])).latency_s == \
            (9e-4 if n == 0 else 1e-4 * (n + 1))
        assert lookup(db, first, there, versions, 0) is None  # no single baseline came
    assert len(missing_jobs(db, model_ops, tasks, there, versions)) == len(tasks)


def test_export_times_every_call_whose_outputs_all_have_kernels(resnet):
    """Whatever the records say, a call's kernels are timed beside torch's one call
    where each output has a kernel; not where one lacks it, nor where one would share
    a torch op's dispatch key with a task already timed."""
    from autosched.model.choice import OpChoice, dispatch_key
    from autosched.model.export import calls_to_time

    model_ops, tasks, groups = resnet

    def choice(i, kernel=True):   # torch "faster" on every record, alone and joint
        op = model_ops.ops[i]
        return OpChoice(op.workload, dict(op.params), op.count, dict(op.ops), tasks[i].key,
                        1e-9, 1e-3 if kernel else None, 1, 2, joint_kernel_s=1.0,
                        joint_torch_s=1e-9)

    choices = [choice(i) for i in range(len(tasks))]
    assert all(c.chosen == "torch" for c in choices)
    members = {tasks[i].key for g in groups for i in g}
    assert calls_to_time(model_ops, tasks, choices, set()) == members
    lacking = groups[0][0]
    choices[lacking] = choice(lacking, kernel=False)
    assert calls_to_time(model_ops, tasks, choices, set()) == \
        members - {tasks[i].key for i in groups[0]}
    # a task of another model's call already timed under the dispatch key of one of its
    # tasks: a 1x1 weight gradient reads the same tensors as the 3x3 one (stride 1)
    from autosched.model.workloads import WORKLOADS
    from autosched.workload import make_task

    choices[lacking] = choice(lacking)
    g, i = next((g, i) for g in groups for i in g
                if model_ops.ops[i].workload.endswith("grad_weight")
                and model_ops.ops[i].params["R"] == 3)
    op = model_ops.ops[i]
    params = dict(op.params, R=1, S=1, pad=0)
    other = make_task(WORKLOADS[op.workload].definition(), params)
    assert other.key != tasks[i].key and dispatch_key(other) == dispatch_key(tasks[i])
    extra = OpChoice(op.workload, params, 1, dict(op.ops), other.key, 1.0, 1e-9, 1, 2)
    assert calls_to_time(model_ops, tasks + [other], choices + [extra], {other.key}) == \
        members - {tasks[j].key for j in g}
