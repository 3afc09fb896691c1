"""The local runner's rules for CUDA, through the real run worker: a CUDA error is that
candidate's run_error and costs the worker (its context is unusable), never a later
candidate; a machine that cannot run CUDA at all stops the run (InfrastructureError)
without a result."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.cuda_standin import build_standin, driver_installed, gpu_machine_env

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
ILLEGAL_ADDRESS = ("cuda_error:700:cudaErrorIllegalAddress:an illegal memory access was "
                   "encountered")


def test_a_cuda_error_replaces_the_worker_and_fails_only_its_candidate(
        tmp_path, settings, kernels, matmul_task, inp, is_alive):
    from autosched.measure.builder import LocalBuilder
    from autosched.measure.build_run import BuildRunMeasurer
    from autosched.measure.local_runner import TEST_RUN_FAULT_ATTR, LocalRunner

    work = str(tmp_path)
    runner = LocalRunner(settings, work)
    faulty = kernels.plain.with_attr(TEST_RUN_FAULT_ATTR, ILLEGAL_ADDRESS)
    with BuildRunMeasurer(LocalBuilder(settings, work), runner, work) as measurer:
        (first,) = measurer.measure([inp(matmul_task, kernels.plain)])
        pid = runner.worker_pid
        bad, after, again = measurer.measure([inp(matmul_task, faulty),
                                              inp(matmul_task, kernels.vectorized),
                                              inp(matmul_task, kernels.plain)])
        assert runner.worker_pid != pid and not is_alive(pid)
        assert is_alive(runner.worker_pid)
    assert first.ok and after.ok and again.ok
    assert len(after.latencies) == settings.repeat
    assert bad.error_kind == "run_error"
    assert bad.error_msg.startswith("CudaError: CUDA error 700 (cudaErrorIllegalAddress: an "
                                    "illegal memory access was encountered)")
    assert bad.error_msg.endswith("so the run worker is replaced")



def test_a_library_without_code_for_this_gpu_stops_the_run(tmp_path, settings, kernels,
                                                           matmul_task, inp, is_alive):
    from autosched.errors import InfrastructureError
    from autosched.measure.builder import LocalBuilder
    from autosched.measure.build_run import BuildRunMeasurer
    from autosched.measure.local_runner import TEST_RUN_FAULT_ATTR, LocalRunner

    work = str(tmp_path)
    runner = LocalRunner(settings, work)
    no_image = kernels.plain.with_attr(
        TEST_RUN_FAULT_ATTR, "cuda_error:209:cudaErrorNoKernelImageForDevice:no kernel "
        "image is available for execution on the device")
    with BuildRunMeasurer(LocalBuilder(settings, work), runner, work) as measurer:
        assert measurer.measure([inp(matmul_task, kernels.plain)])[0].ok
        pid = runner.worker_pid
        with pytest.raises(InfrastructureError) as info:
            measurer.measure([inp(matmul_task, no_image)])
        assert runner.worker_pid is None and not is_alive(pid)
    assert info.value.cause.startswith("the kernel library holds no code for this GPU's "
                                       "architecture: CudaError: CUDA error 209")
    assert "\n" not in str(info.value)

# In a child, so that the run worker inherits the child's environment (the stand-in
# driver on LD_LIBRARY_PATH): one CUDA candidate through a LocalRunner; prints how it ended.
CUDA_RUN = """
import json, sys
from autosched.errors import InfrastructureError
from autosched.measure import MeasureInput, MeasureSettings
from autosched.measure.base import BuildArtifact
from autosched.measure.local_runner import LocalRunner
from autosched.target import resolve_target
from autosched.workload import load_tasks

work, lib, op_file = sys.argv[1:4]
task = load_tasks(op_file, None, arg_items=["M=32", "N=32", "K=32"])[0]
runner = LocalRunner(MeasureSettings(number=1, repeat=1, min_repeat_ms=0), work)
try:
    results = runner.run([MeasureInput(task, resolve_target("cuda"), None, task.mod)],
                         [BuildArtifact(lib)])
    out = {"results": [r.to_json() for r in results]}
except InfrastructureError as e:
    out = {"cause": e.cause, "remedy": e.remedy, "worker": runner.worker_pid}
finally:
    runner.close()
print(json.dumps(out))
"""


def _run_cuda_candidate(tmp_path, child_env, env):
    lib = tmp_path / "never_loaded.so"  # the device is checked before any library
    lib.write_bytes(b"")
    proc = subprocess.run([sys.executable, "-c", CUDA_RUN, str(tmp_path / "work"), str(lib),
                           str(EXAMPLES / "matmul.py")],
                          check=False, capture_output=True, text=True, timeout=240,
                          env={**child_env, **env})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(driver_installed(), reason="this machine has an NVIDIA driver")
def test_no_driver_stops_the_run_with_one_line(tmp_path, child_env):
    out = _run_cuda_candidate(tmp_path, child_env, {})
    assert "results" not in out and out["worker"] is None
    assert out["cause"] == ("TVM's CUDA runtime does not load here: libcuda.so.1: cannot open "
                            "shared object file: No such file or directory")
    assert "\n" not in out["remedy"] and "libcudart.so.13" in out["remedy"]


def test_a_driver_without_a_device_stops_the_run_with_one_line(tmp_path, child_env):
    env = gpu_machine_env(build_standin(str(tmp_path / "driver")), base={})
    out = _run_cuda_candidate(tmp_path, child_env, {"LD_LIBRARY_PATH": env["LD_LIBRARY_PATH"]})
    assert "results" not in out and out["worker"] is None
    assert out["cause"].startswith("no cuda device is visible here: CUDA error 35 "
                                   "(cudaErrorInsufficientDriver")
    assert "\n" not in out["cause"] + out["remedy"]


def _cuda_matmuls(n: int) -> dict:
    """A correct n^3 fp32 matmul for CUDA (one thread per output) and one whose store
    lands 4 TiB past C (an illegal address), compiled for this machine's GPU."""
    import tvm
    from tvm.script import tirx as T

    far = 1 << 40

    @T.prim_func
    def good(A: T.Buffer((n, n), "float32"), B: T.Buffer((n, n), "float32"),
             C: T.Buffer((n, n), "float32")):
        T.func_attr({"global_symbol": "main", "tir.noalias": True})
        for i in T.thread_binding(n, thread="blockIdx.x"):
            for j in T.thread_binding(n, thread="threadIdx.x"):
                C[i, j] = T.float32(0)
                for k in range(n):
                    C[i, j] = C[i, j] + A[i, k] * B[k, j]

    @T.prim_func
    def wild(A: T.Buffer((n, n), "float32"), B: T.Buffer((n, n), "float32"),
             C: T.Buffer((n, n), "float32")):
        T.func_attr({"global_symbol": "main", "tir.noalias": True})
        D = T.decl_buffer((T.int64(far),), "float32", data=C.data)
        for i in T.thread_binding(n, thread="blockIdx.x"):
            for j in T.thread_binding(n, thread="threadIdx.x"):
                D[T.int64(far) - T.int64(1) - T.int64(i * n + j)] = A[i, j]

    target = tvm.target.Target("cuda")
    return {name: tvm.compile(tvm.IRModule({"main": f}), target=target)
            for name, f in (("good", good), ("wild", wild))}


@pytest.mark.gpu
def test_an_illegal_address_on_the_gpu_costs_only_its_candidate(tmp_path, settings,
                                                                 matmul_task, is_alive):
    from autosched.errors import InfrastructureError
    from autosched.measure import MeasureInput
    from autosched.measure.base import BuildArtifact
    from autosched.measure.local_runner import LocalRunner
    from autosched.measure.run_job import open_device
    from autosched.target import resolve_target

    try:
        open_device("cuda")
    except InfrastructureError as e:
        pytest.skip(f"needs an NVIDIA GPU: {e.cause}")
    libs = {}
    for name, exe in _cuda_matmuls(32).items():
        libs[name] = str(tmp_path / f"{name}.so")
        exe.export_library(libs[name])
    target = resolve_target("cuda")
    runner = LocalRunner(settings, str(tmp_path / "work"))
    inp = MeasureInput(matmul_task, target, None, matmul_task.mod)
    try:
        (first,) = runner.run([inp], [BuildArtifact(libs["good"])])
        pid = runner.worker_pid
        wild, after = runner.run([inp, inp], [BuildArtifact(libs["wild"]),
                                              BuildArtifact(libs["good"])])
        assert runner.worker_pid != pid and not is_alive(pid)
    finally:
        runner.close()
    assert first.ok and after.ok and len(after.latencies) == settings.repeat
    assert wild.error_kind == "run_error"
    assert "an illegal memory access was encountered" in wild.error_msg
