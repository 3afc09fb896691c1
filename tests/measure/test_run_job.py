"""run_job in a process without the TVM compiler: `import tvm` is refused there, yet a
real llvm kernel runs, is checked and timed, a wrong kernel is a wrong answer, and a
machine without a usable CUDA device is an infrastructure reply, never a result."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from support.cuda_standin import build_standin, driver_installed, gpu_machine_env

# Put first in the child: `tvm` is found (its lib/ folder holds the runtime libraries)
# but importing it, or any submodule, fails.
BLOCK_TVM = """
import importlib.machinery, sys
class _Refuse:
    def create_module(self, spec): return None
    def exec_module(self, module): raise ImportError("the TVM compiler is not installed here")
class _BlockTvm:
    def find_spec(self, name, path=None, target=None):
        if name != "tvm" and not name.startswith("tvm."):
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None:
            spec.loader = _Refuse()
        return spec
sys.meta_path.insert(0, _BlockTvm())
"""
RUN = BLOCK_TVM + """
import json
from autosched.measure.run_job import run_job
from autosched import kernel_pool
replies = []
for r in json.loads(sys.argv[1]):
    replies.append(run_job(r))
    replies[-1]["pool_launches"] = kernel_pool.launches()
try:
    import tvm
    imported = True
except ImportError:
    imported = False
print(json.dumps({"replies": replies, "tvm_importable": imported,
                  "tvm_modules": sorted(m for m in sys.modules if m.split(".")[0] == "tvm")}))
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory, matmul_task, kernels):
    """Libraries of the good and a wrong kernel, and the task's reference directory."""
    from support.kernels import built_libraries

    return built_libraries(tmp_path_factory.mktemp("run_job"), matmul_task,
                           {name: getattr(kernels, name) for name in ('plain', 'plus_one', 'vectorized')})


def _request(built, lib, **over):
    return dict({"lib": built[lib], "reference": built["reference"], "device": "cpu",
                 "warmup": 1, "number": 3, "repeat": 4, "min_repeat_ms": 0, "check": True},
                **over)


def _run_without_compiler(requests, child_env, env=None):
    proc = subprocess.run([sys.executable, "-c", RUN, json.dumps(requests)],
                          check=False, capture_output=True, text=True, timeout=120,
                          env={**child_env, **(env or {})})
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not out["tvm_importable"] and out["tvm_modules"] == []
    return out["replies"]


def test_a_kernel_runs_checks_and_times_without_the_tvm_compiler(built, child_env):
    good, wrong, unchecked = _run_without_compiler(
        [_request(built, "plain"), _request(built, "plus_one"),
         _request(built, "plus_one", check=False, repeat=2)], child_env)
    assert good["ok"] and len(good["latencies"]) == 4
    assert all(0 < t < 0.1 for t in good["latencies"])  # a 32^3 matmul: microseconds
    assert wrong["ok"] is False and wrong["kind"] == "wrong_answer"
    # plus_one computes A @ B + 1: every element is off by exactly one
    assert wrong["error"].startswith("output C: 1024 of 1024 elements outside tolerance; "
                                     "max abs err 1.000e+00;")
    assert unchecked["ok"] and len(unchecked["latencies"]) == 2


def test_a_library_that_does_not_load_is_the_candidates_run_error(built, child_env, tmp_path):
    bogus = tmp_path / "bogus.so"
    bogus.write_bytes(b"not a shared object")
    (reply,) = _run_without_compiler([_request({**built, "bogus": str(bogus)}, "bogus")],
                                     child_env)
    assert reply["kind"] == "run_error" and "bogus.so" in reply["error"]
    assert "restart" not in reply  # a CPU failure leaves the worker usable


def test_the_measuring_worker_keeps_tvms_pool_whatever_the_kernel_pool_setting(built,
                                                                              child_env):
    # the OpenMP launcher is for torch processes: a worker times on TVM's own pool
    for env in ({}, {"AUTOSCHED_KERNEL_POOL": "openmp"}, {"AUTOSCHED_KERNEL_POOL": "bogus"}):
        (reply,) = _run_without_compiler([_request(built, "vectorized")], child_env, env)
        assert reply["ok"] and reply["pool_launches"] == 0


@pytest.mark.skipif(driver_installed(), reason="this machine has an NVIDIA driver")
def test_without_a_driver_cuda_is_an_infrastructure_failure(built, child_env):
    (reply,) = _run_without_compiler([_request(built, "plain", device="cuda")], child_env)
    assert reply["infrastructure"] is True and "kind" not in reply
    assert reply["cause"].startswith("TVM's CUDA runtime does not load here: libcuda.so.1")
    assert "\n" not in reply["cause"] + reply["remedy"]


def test_a_driver_without_a_device_is_an_infrastructure_failure(built, child_env, tmp_path):
    env = gpu_machine_env(build_standin(str(tmp_path / "driver")), base=child_env)
    for visible in (None, "1"):
        extra = {"CUDA_VISIBLE_DEVICES": visible} if visible else {}
        (reply,) = _run_without_compiler([_request(built, "plain", device="cuda")],
                                         {**env, **extra})
        assert reply["infrastructure"] is True and "kind" not in reply
        # the stand-in driver answers every call with "no device": the CUDA runtime says so
        assert reply["cause"].startswith("no cuda device is visible here: CUDA error 35 "
                                         "(cudaErrorInsufficientDriver")
        assert reply["cause"].endswith("in cudaGetDeviceCount" + (
            f" (CUDA_VISIBLE_DEVICES='{visible}')" if visible else ""))
        assert "\n" not in reply["cause"] + reply["remedy"]


def test_an_injected_cuda_error_asks_for_a_fresh_worker(built, child_env):
    fault = "cuda_error:700:cudaErrorIllegalAddress:an illegal memory access was encountered"
    bad, after = _run_without_compiler([_request(built, "plain", test_fault=fault),
                                        _request(built, "plain")], child_env)
    assert bad["kind"] == "run_error" and bad["restart"] is True
    assert bad["error"].startswith("CudaError: CUDA error 700 (cudaErrorIllegalAddress: an "
                                   "illegal memory access was encountered)")
    assert bad["error"].endswith("a CUDA error leaves the process's CUDA context unusable, "
                                 "so the run worker is replaced")
    assert after["ok"] and len(after["latencies"]) == 4


def test_code_for_another_gpu_is_the_machines_fault_not_the_candidates(built, child_env):
    fault = ("cuda_error:209:cudaErrorNoKernelImageForDevice:no kernel image is available "
             "for execution on the device")
    (reply,) = _run_without_compiler([_request(built, "plain", test_fault=fault)], child_env)
    assert reply["infrastructure"] is True and "kind" not in reply
    assert reply["cause"].startswith("the kernel library holds no code for this GPU's "
                                     "architecture: CudaError: CUDA error 209")
    assert reply["remedy"].startswith("build for this GPU")
