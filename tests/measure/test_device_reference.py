"""Where expected outputs are computed: the plan for each target, the reduced instance
the device reference is checked at, the check itself through the real reference worker
on the CPU, and the device module the plan would run, emulated (no GPU here)."""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import textwrap

import numpy as np
import pytest

from autosched.measure.reference.device import (SMALL_EXTENT, block_names, cpu_run, plan,
                                                reduced_args, reduced_task)
from autosched.measure.reference.data import load_reference
from autosched.measure.reference.store import ensure_reference
from autosched.measure.reference.job import (TEST_FAULT_ATTR, ReferenceFailed,
                                             reference_request)
from autosched.measure.worker import WorkerProcess


@pytest.fixture(scope="module")
def cuda_here():
    """The cuda target as on a machine with its GPU (the device path is planned)."""
    from autosched.target import resolve_target

    return dataclasses.replace(resolve_target("cuda"), has_local_device=True)


@pytest.fixture(scope="module")
def cuda_remote():
    """The cuda target of this machine, which has no GPU (an RPC or bundle run)."""
    from autosched.target import resolve_target

    return resolve_target("cuda")


def test_reduced_args_lower_every_large_integer_to_the_small_extent():
    args = {"M": 4096, "N": 48, "K": 65, "pad": 1, "eps": 1e-5, "bias": True, "dtype": "float16"}
    assert SMALL_EXTENT == 64
    assert reduced_args(args) == {"M": 64, "N": 48, "K": 64, "pad": 1, "eps": 1e-5,
                                  "bias": True, "dtype": "float16"}


def test_reduced_task_is_the_workload_at_small_arguments(task_of):
    task = task_of("conv2d.py", "conv2d", N=2, C=96, H=112, W=30, F=128)
    small = reduced_task(task)
    assert small.args == {"N": 2, "C": 64, "H": 64, "W": 30, "F": 64, "R": 3, "S": 3, "pad": 1,
                          "dtype": "float32"}
    assert [s.shape for s in small.inputs] == [(2, 64, 64, 30), (64, 64, 3, 3)]
    assert block_names(small.func) == block_names(task.func) == ["pad", "conv"]


def test_no_reduced_task_when_none_is_smaller_or_it_cannot_stand_in(task_of, tmp_path):
    from autosched.workload import load_tasks

    assert reduced_task(task_of("conv2d.py", "conv2d")) is None  # every extent <= 64
    big = task_of("matmul.py", M=128, N=128, K=128)
    assert reduced_task(dataclasses.replace(big, definition=None)) is None  # read from JSON
    op = tmp_path / "odd.py"
    op.write_text(textwrap.dedent("""
        from tvm import te
        import autosched

        @autosched.workload
        def needs_big(N=128):
            if N < 100:
                raise ValueError("N must be at least 100")
            a = te.placeholder((N,), name="a")
            return a, te.compute((N,), lambda i: a[i] * 2, name="b")

        @autosched.workload
        def changes_shape(N=128):
            a = te.placeholder((N,), name="a")
            b = te.compute((N,), lambda i: a[i] * 2, name="b")
            if N > 64:
                b = te.compute((N,), lambda i: b[i] + 1, name="c")
            return a, b
    """))
    for task in load_tasks(str(op)):
        assert reduced_task(task) is None, task.name


def test_the_cpu_computes_without_a_gpu_here(task_of, target, cuda_remote):
    task = task_of("matmul.py", M=128, N=128, K=128)
    for where in (None, target, cuda_remote):
        p = plan(task, where)
        assert p["check"] is None and p["fallback"] is None
        assert {k: p["expected"][k] for k in ("target", "device", "schedule")} == {
            "target": {"kind": "llvm"}, "device": "cpu", "schedule": "unscheduled"}


def test_the_device_plan_is_the_reference_schedule_checked_at_a_reduced_shape(
        task_of, cuda_here):
    task = task_of("matmul.py", M=512, N=256, K=1024, dtype="float16")
    p = plan(task, cuda_here)
    assert {k: p["expected"][k] for k in ("target", "device", "schedule")} == {
        "target": cuda_here.config, "device": "cuda", "schedule": "reference_schedule"}
    check = p["check"]
    assert (check["shape"], check["args"]) == ("reduced", {"M": 64, "N": 64, "K": 64,
                                                           "dtype": "float16"})
    assert check["task"]["reduction_extent"] == 64
    assert check["device"]["schedule"] == "reference_schedule"
    assert check["cpu"]["schedule"] == "unscheduled"
    assert p["fallback"] == cpu_run(task.func)


def test_a_task_that_cannot_shrink_is_checked_at_its_own_shape(task_of, cuda_here):
    task = task_of("conv2d.py", "conv2d", C=16, H=20, W=20, F=16)
    check = plan(task, cuda_here)["check"]
    assert (check["shape"], check["args"], check["task"]["key"]) == ("full", task.args, task.key)


def _on_cpu(task, inputs: dict) -> dict:
    import tvm

    lib = tvm.compile(task.mod, target="llvm")
    dev = tvm.cpu()
    args = [tvm.runtime.tensor(inputs[s.name], dev) for s in task.inputs]
    outs = [tvm.runtime.tensor(np.zeros(s.shape, s.dtype), dev) for s in task.outputs]
    lib["main"](*args, *outs)
    return {s.name: o.numpy() for s, o in zip(task.outputs, outs)}


def test_the_planned_device_modules_compute_the_cpu_values(task_of, cuda_here):
    """What the worker would run on the GPU for softmax at 100x80 (the expected outputs)
    and at its reduced 64x64 (the check), run by the CUDA emulator."""
    if shutil.which("g++") is None:
        pytest.skip("the CUDA emulator needs g++")
    import tvm

    from support import cuda_emulator

    task = task_of("softmax.py", "softmax", M=100, N=80)
    p = plan(task, cuda_here)
    for run, t in ((p["expected"], task), (p["check"]["device"], reduced_task(task))):
        rng = np.random.default_rng(0)
        inputs = {s.name: rng.uniform(-3, 3, s.shape).astype(s.dtype) for s in t.inputs}
        got = cuda_emulator.emulate(tvm.ir.load_json(run["mod"]), cuda_here, inputs,
                                    {s.name: (s.shape, s.dtype) for s in t.outputs})
        want = _on_cpu(t, inputs)
        np.testing.assert_allclose(got["softmax"], want["softmax"], rtol=1e-5, atol=1e-7)


def _ask_worker(request: dict, log_dir: str) -> dict:
    worker = WorkerProcess("reference", log_dir)
    try:
        worker.wait_ready()
        worker.send(request)
        return worker.wait_reply(120)
    finally:
        worker.kill()


def _cpu_standing_in_for_the_device(task, cuda_here, directory: str) -> dict:
    """The device plan's request with its device runs made on the CPU, the expected one
    for a target config ("num-cores": 1) that shows in meta.json when it was used."""
    request = reference_request(task, cuda_here, directory, 0)
    request["expected"] = dict(cpu_run(task.func), target={"kind": "llvm", "num-cores": 1})
    small = reduced_task(task)
    request["check"]["device"] = cpu_run(small.func)
    return request


def test_the_worker_trusts_the_expected_outputs_after_the_check(tmp_path, task_of, cuda_here):
    task = task_of("matmul.py", M=96, N=80, K=72)
    out = tmp_path / "ref"
    out.mkdir()
    reply = _ask_worker(_cpu_standing_in_for_the_device(task, cuda_here, str(out)),
                        str(tmp_path / "logs"))
    assert reply["ok"], reply
    meta = reply["meta"]
    assert meta["target"] == {"kind": "llvm", "num-cores": 1}  # the expected run's
    assert meta["check"] == {"task": "matmul(M=64,N=64,K=64,dtype=float32)",
                             "task_key": reduced_task(task).key,
                             "args": {"M": 64, "N": 64, "K": 64, "dtype": "float32"},
                             "shape": "reduced", "target": {"kind": "llvm"}, "ok": True,
                             "message": None}
    ref = load_reference(str(out))
    (a, b), (c,) = ref.arrays()
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5,
                               atol=1e-5)
    with open(out / "meta.json") as f:
        assert json.load(f) == meta


def test_a_failed_check_falls_back_to_the_cpu_and_says_why(tmp_path, task_of, cuda_here):
    task = task_of("matmul.py", M=96, N=80, K=72)
    task = dataclasses.replace(task, func=task.func.with_attr(TEST_FAULT_ATTR,
                                                              "check_mismatch"))
    out = tmp_path / "ref"
    out.mkdir()
    reply = _ask_worker(_cpu_standing_in_for_the_device(task, cuda_here, str(out)),
                        str(tmp_path / "logs"))
    meta = reply["meta"]
    assert meta["target"] == {"kind": "llvm"} and meta["expected"] == {
        "device": "cpu", "schedule": "unscheduled"}  # the fallback's
    assert meta["check"]["ok"] is False
    assert meta["check"]["message"].startswith(
        "output C: 4096 of 4096 elements outside tolerance; max abs err 1.000e+00")
    (a, b), (c,) = load_reference(str(out)).arrays()
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5,
                               atol=1e-5)


def test_a_device_reference_without_the_device_is_one_clear_line(tmp_path, task_of,
                                                                 cuda_here):
    task = task_of("softmax.py", "softmax", M=100, N=80)
    with pytest.raises(ReferenceFailed) as caught:
        ensure_reference(task, str(tmp_path), target=cuda_here)
    line = str(caught.value)
    assert line.startswith("reference of softmax(M=100,N=80,dtype=float32) on the GPU "
                           "(cuda, sm_90) failed: ")
    assert "RuntimeError: no cuda device is visible to this process" in line
    assert "\n" not in line
    assert os.listdir(tmp_path / "reference") == []


_GPU_MACHINE_CHILD = textwrap.dedent("""
    import dataclasses, sys, tempfile
    from autosched.workload import load_tasks
    from autosched.target import resolve_target
    from autosched.measure.reference.store import ensure_reference
    task = load_tasks(sys.argv[1], ["softmax"], arg_items=["M=100", "N=80"])[0]
    target = dataclasses.replace(resolve_target("cuda"), has_local_device=True)
    try:
        ensure_reference(task, tempfile.mkdtemp(dir=sys.argv[2]), target=target)
    except Exception as e:
        print(type(e).__name__, e)
""")


@pytest.mark.slow
def test_on_a_gpu_machine_the_worker_builds_for_the_device_and_stops_at_it(
        tmp_path, child_env, examples_dir):
    """With the stand-in driver, TVM's CUDA runtime loads as on a GPU machine: the
    worker compiles the device reference with nvcc for sm_90 (the architecture comes
    from the target's scope) and fails only where the GPU is needed, in one line."""
    import subprocess
    import sys

    from support import cuda_standin

    if shutil.which("nvcc") is None or cuda_standin.cuda_toolkit_lib() is None:
        pytest.skip("needs the CUDA toolkit")
    env = cuda_standin.gpu_machine_env(cuda_standin.build_standin(str(tmp_path / "driver")),
                                       child_env)
    env["TVM_CUDA_COMPILE_MODE"] = "nvcc"
    out = subprocess.run([sys.executable, "-c", _GPU_MACHINE_CHILD,
                          str(examples_dir / "softmax.py"), str(tmp_path)], env=env,
                         capture_output=True, text=True, timeout=300).stdout.strip()
    assert out.startswith("ReferenceFailed reference of softmax(M=100,N=80,dtype=float32) "
                          "on the GPU (cuda, sm_90) failed: RuntimeError: no cuda device is "
                          "visible to this process"), out
    assert "\n" not in out


def test_first_mismatch_names_the_first_output_outside_the_tolerance():
    from autosched.measure.reference.job import first_mismatch
    from autosched.task import TensorSpec

    specs = [TensorSpec("y", (2, 2), "float32"), TensorSpec("n", (3,), "int32")]
    want = [np.array([[1.0, 2.0], [3.0, 4.0]], "float32"), np.array([1, 2, 3], "int32")]
    close = [want[0] * (1 + 1e-6), want[1].copy()]
    assert first_mismatch(specs, close, want, 1) is None
    off = [want[0].copy(), np.array([1, 2, 4], "int32")]
    assert first_mismatch(specs, off, want, 1) == (
        "output n: 1 of 3 elements differ (exact dtype); first at (2,): got 4, expected 3")
