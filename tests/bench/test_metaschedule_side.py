"""MetaSchedule beside autosched (bench/gpu/metaschedule_side.py): a tiny matmul tuned by
MetaSchedule on llvm, its best module measured and checked by autosched's own harness;
a module that computes something else fails our check; MetaSchedule's build workers
compile CUDA through autosched's compile path (nvcc, build-host driver) on this
machine; the record bookkeeping on recorded values."""
from __future__ import annotations

import os
import sys
import tarfile
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "gpu"))

import metaschedule_side as mss  # noqa: E402

MATMUL = str(ROOT / "examples" / "matmul.py")
TINY = ["M=64", "N=64", "K=64"]
FATBIN_MAGIC = bytes.fromhex("50ed55ba")


def test_record_times_mark_failures_and_take_medians():
    recs = [SimpleNamespace(run_secs=[3e-5, 1e-5, 2e-5]), SimpleNamespace(run_secs=[1e10]),
            SimpleNamespace(run_secs=None), SimpleNamespace(run_secs=[4e-5, 1e10])]
    assert mss.record_times(recs) == [2e-5, None, None, None]


def test_the_rule_set_follows_the_target():
    from autosched.target import resolve_target

    assert mss.space_kind(resolve_target("llvm")) == "from-target"
    assert mss.space_kind(resolve_target("cuda")) == "cuda-tensorcore"
    assert mss.target_spec("llvm").kind == "llvm"
    # MetaSchedule's CUDA rules need max_threads_per_block, which our config lacks
    cuda = mss.ms_target(resolve_target("cuda"))
    assert int(cuda.attrs["max_threads_per_block"]) == int(cuda.attrs["max_num_threads"])
    assert "max_threads_per_block" not in mss.ms_target(resolve_target("llvm")).attrs


def test_a_load_error_is_a_result_not_an_exception(tmp_path):
    r = mss.tune_and_measure(MATMUL, "no_such_workload", TINY, "llvm", trials=4,
                             work_dir=str(tmp_path))
    assert r["ok"] is False and r["error"].startswith("load: ")
    assert r["trials_asked"] == 4 and r["trials_measured"] == 0 and r["latency_s"] is None


@pytest.mark.slow
def test_metaschedule_best_is_measured_and_checked_by_our_harness(tmp_path):
    r = mss.tune_and_measure(MATMUL, "matmul", TINY, "llvm", trials=4,
                             work_dir=str(tmp_path / "ms"), seed=3)
    assert r["ok"] is True and r["error"] is None, r["error"]
    assert r["task"] == "matmul(M=64,N=64,K=64,dtype=float32)" and r["flops"] == 2 * 64 ** 3
    assert r["trials_asked"] == 4
    assert 1 <= r["trials_measured"] <= r["trials_recorded"] <= 4
    assert r["trials_failed"] == r["trials_recorded"] - r["trials_measured"]
    assert len(r["latencies_s"]) == 3 and r["latency_s"] == sorted(r["latencies_s"])[1]
    assert 0 < r["latency_s"] < 0.1 and 0 < r["ms_best_s"] < 0.1
    assert 0 < r["tuning_wall_s"] <= r["wall_s"]
    assert r["space"] == "from-target" and "sample_perfect_tile" in r["trace"]
    # our harness computed the task's reference in the work dir: a correct latency
    assert os.listdir(tmp_path / "ms")


@pytest.mark.slow
def test_a_module_that_computes_something_else_fails_our_check(tmp_path):
    import tvm
    from tvm import te

    task = mss.load_task(MATMUL, "matmul", TINY)
    spec = mss.target_spec("llvm")
    a = te.placeholder((64, 64), name="A")
    b = te.placeholder((64, 64), name="B")
    k = te.reduce_axis((0, 64), name="k")
    c = te.compute((64, 64), lambda i, j: te.sum(a[i, k] * b[j, k], axis=k), name="C")
    wrong = tvm.IRModule({"main": te.create_prim_func([a, b, c])})
    bad = mss.measure_module(task, spec, wrong, str(tmp_path))
    assert bad.error_kind == "wrong_answer"
    good = mss.measure_module(task, spec, task.mod, str(tmp_path))
    assert good.ok and good.median > 0


@pytest.mark.slow
def test_metaschedule_build_workers_compile_cuda_through_our_path():
    import shutil

    if shutil.which("nvcc") is None:
        pytest.skip("needs nvcc")
    import tvm
    from tvm.s_tir.meta_schedule.builder import BuilderInput

    task = mss.load_task(MATMUL, "matmul", TINY)
    spec = mss.target_spec("cuda")
    sch = tvm.s_tir.Schedule(task.mod)
    i, j, k = sch.get_loops(sch.get_sblock("C"))
    bx, tx = sch.split(sch.fuse(i, j), [None, 128])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    builder, runner = mss.ms_builder_runner(spec, build_workers=1)
    try:
        (res,) = builder.build([BuilderInput(sch.mod, spec.tvm())])
    finally:
        runner.pool.shutdown()
    assert res.error_msg is None, res.error_msg
    with tarfile.open(res.artifact_path) as tar:
        blobs = [tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()]
    # device code embedded (a fatbin: nvcc's magic bytes), not CUDA source
    assert any(FATBIN_MAGIC in blob for blob in blobs)
    assert not any(b"__global__" in blob for blob in blobs)
    shutil.rmtree(os.path.dirname(res.artifact_path), ignore_errors=True)
