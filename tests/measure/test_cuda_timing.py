"""CUDA timing: the arithmetic everywhere, the CUDA runtime binding against the stand-in
driver, and (marked gpu, on a machine with one) events on the runner's own stream and
the L2 flush."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from support.cuda_standin import build_standin, cuda_toolkit_lib, gpu_machine_env

from autosched.measure import MeasureSettings
from autosched.measure.cuda.timing import MAX_NUMBER, median, next_number, repeat_latency


def test_number_grows_to_reach_min_repeat_ms():
    assert next_number(5, 2.0, 20) == 60            # 10x short, plus a 20% margin
    assert next_number(1, 19.9, 20) == 2            # always at least one more call
    assert next_number(3, 0.0, 20) == 30            # a zero reading: tenfold
    assert next_number(5, 1e-6, 20) == MAX_NUMBER   # never past the cap
    assert next_number(5, 1e-6, 20, cap=1000) == 1000
    assert next_number(1000, 1e-6, 20, cap=1000) == 1000


def test_number_stays_once_a_repeat_is_long_enough_or_nothing_is_asked():
    assert next_number(5, 20.0, 20) == 5
    assert next_number(5, 25.0, 20) == 5
    assert next_number(5, 0.5, 0) == 5


def test_a_repeat_reports_seconds_per_call_and_a_record_the_median():
    assert repeat_latency([1.0, 2.0, 3.0], 3) == pytest.approx(0.002)
    assert repeat_latency([6.0], 3) == pytest.approx(0.002)  # one event pair, three calls
    assert median([0.003, 0.001, 0.002]) == 0.002
    assert median([0.004, 0.001, 0.002, 0.003]) == 0.0025


def test_the_timing_settings_are_recorded_with_cuda_defaults():
    d = MeasureSettings().to_json()
    assert d["flush_l2"] is True and d["stream"] == "runner"
    assert MeasureSettings(flush_l2=False, stream="default").to_json()["stream"] == "default"
    with pytest.raises(ValueError, match="stream must be one of runner, default, got 'main'"):
        MeasureSettings(stream="main")


BINDING = """
import json
from autosched.measure.cuda.cudart import Cudart, CudaError
from autosched.measure.cuda.timing import CudaTimer
out = {}
for what, make in (("count", lambda: Cudart().device_count()), ("timer", CudaTimer)):
    try:
        make()
        out[what] = None
    except CudaError as e:
        out[what] = [e.code, e.call, str(e)]
print(json.dumps(out))
"""


@pytest.mark.skipif(cuda_toolkit_lib() is None, reason="needs libcudart.so.13")
def test_cuda_runtime_errors_come_back_with_code_call_and_text(tmp_path, child_env):
    env = gpu_machine_env(build_standin(str(tmp_path)), base=child_env)
    proc = subprocess.run([sys.executable, "-c", BINDING], check=False, capture_output=True,
                          text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    text = ("CUDA error 35 (cudaErrorInsufficientDriver: CUDA driver version is insufficient "
            "for CUDA runtime version) in ")
    assert out["count"] == [35, "cudaGetDeviceCount", text + "cudaGetDeviceCount"]
    assert out["timer"] == [35, "cudaStreamCreateWithFlags", text + "cudaStreamCreateWithFlags"]


# ----------------------------------------------------------------------- on a GPU


@pytest.fixture(scope="module")
def gpu():
    """(device, Cudart) on a machine with an NVIDIA GPU; skipped elsewhere."""
    from autosched.errors import InfrastructureError
    from autosched.measure.cuda.cudart import Cudart
    from autosched.measure.run_job import open_device

    try:
        return open_device("cuda"), Cudart()
    except InfrastructureError as e:
        pytest.skip(f"needs an NVIDIA GPU: {e.cause}")


def _copy_kernel(n: int):
    """B = A, for n float32 elements (n a multiple of 256), compiled for this GPU."""
    import tvm
    from tvm.script import tirx as T

    @T.prim_func
    def copy(A: T.Buffer((n,), "float32"), B: T.Buffer((n,), "float32")):
        T.func_attr({"global_symbol": "main", "tir.noalias": True})
        for bx in T.thread_binding(n // 256, thread="blockIdx.x"):
            for tx in T.thread_binding(256, thread="threadIdx.x"):
                B[bx * 256 + tx] = A[bx * 256 + tx]

    return tvm.compile(tvm.IRModule({"main": copy}), target=tvm.target.Target("cuda")).jit()


def _copy_call(gpu, n):
    import numpy as np

    from autosched.measure.device_arrays import to_device

    dev, _ = gpu
    lib = _copy_kernel(n)
    a = to_device(np.ones(n, "float32"), "float32", dev)
    b = to_device(np.zeros(n, "float32"), "float32", dev)
    func = lib["main"]
    return lambda: func(a, b)


@pytest.mark.gpu
def test_kernels_run_on_the_runners_own_stream(gpu):
    from autosched.measure.cuda.timing import CudaTimer

    dev, rt = gpu
    call = _copy_call(gpu, 1 << 26)  # 256 MiB each way: milliseconds of work
    timer = CudaTimer(0, flush_l2=False)
    try:
        assert timer.stream != 0
        with timer.on_stream(dev):
            for _ in range(20):
                call()
        assert rt.stream_busy(timer.stream)  # TVM queued the copies on our stream
        timer.synchronize()
        assert not rt.stream_busy(timer.stream)
    finally:
        timer.close()


@pytest.mark.gpu
def test_flushing_l2_times_data_that_fits_in_it_cold(gpu):
    from autosched.measure.cuda.timing import CudaTimer

    dev, rt = gpu
    n = rt.attribute("l2_cache_bytes") // 4 // 4  # in + out: half of L2
    n -= n % 256
    call = _copy_call(gpu, n)
    medians = {}
    for flush in (False, True):
        timer = CudaTimer(0, flush_l2=flush)
        try:
            timer.warm_up(dev, call, 3)
            latencies, number = timer.measure(dev, call, 10, 5, 1)
            assert len(latencies) == 5 and number >= 10
            medians[flush] = median(latencies)
            assert timer.flush_bytes == (2 * timer.l2_bytes if flush else 0)
        finally:
            timer.close()
    assert medians[True] > medians[False] > 0  # hot in L2 without the flush
