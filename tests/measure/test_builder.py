"""LocalBuilder with real compilations: parallel workers, compile errors, hangs, crashes."""
import dataclasses
import os

import numpy as np
import pytest

from autosched.measure.builder import LocalBuilder

BUILD_TIMEOUT = 5.0


@pytest.fixture(scope="module")
def builder(tmp_path_factory, settings):
    b = LocalBuilder(dataclasses.replace(settings, build_timeout=BUILD_TIMEOUT),
                     str(tmp_path_factory.mktemp("builder")))
    yield b
    b.close()


def _product_ok(path):
    import tvm

    rng = np.random.default_rng(0)
    a, b = (rng.uniform(-1, 1, (32, 32)).astype("float32") for _ in range(2))
    c = tvm.runtime.tensor(np.zeros((32, 32), "float32"))
    tvm.runtime.load_module(path)["main"](tvm.runtime.tensor(a), tvm.runtime.tensor(b), c)
    return np.allclose(c.numpy(), a @ b, rtol=1e-5, atol=1e-5)


def test_good_modules_build_to_working_libraries(builder, kernels, matmul_task, inp):
    mods = [kernels.plain, kernels.vectorized, kernels.rfactor, matmul_task.func]
    arts = builder.build([inp(matmul_task, m) for m in mods])
    assert [a.error_kind for a in arts] == [None] * 4
    paths = [a.path for a in arts]
    assert len(set(paths)) == 4 and all(p.endswith(".so") and os.path.isfile(p) for p in paths)
    assert all(a.build_seconds > 0 for a in arts)
    assert all(_product_ok(p) for p in paths)
    assert len(builder.worker_pids) == 2


def test_compile_error_is_build_error_with_the_compiler_message(builder, kernels, matmul_task,
                                                                 inp):
    pids = builder.worker_pids
    arts = builder.build([inp(matmul_task, kernels.compile_error),
                          inp(matmul_task, kernels.plain)])
    assert arts[0].error_kind == "build_error" and arts[0].path is None
    assert "InternalError: not implemented" in arts[0].error_msg
    assert "GetThreadIndex" in arts[0].error_msg  # where the compiler gave up
    assert arts[1].ok and _product_ok(arts[1].path)
    assert sorted(builder.worker_pids) == sorted(pids)  # an exception kills no worker
    result = arts[0].failure()
    assert result.error_kind == "build_error" and not result.ok


def test_hanging_build_times_out_while_the_other_worker_builds(builder, kernels, matmul_task,
                                                               inp, is_alive):
    mods = [kernels.build_hang, kernels.plain, kernels.vectorized, kernels.plain]
    arts = builder.build([inp(matmul_task, m) for m in mods])
    assert [a.error_kind for a in arts] == ["build_timeout", None, None, None]
    assert arts[0].error_msg == f"build did not finish within {BUILD_TIMEOUT:g}s"
    assert BUILD_TIMEOUT <= arts[0].build_seconds < BUILD_TIMEOUT + 30
    assert all(_product_ok(a.path) for a in arts[1:])
    # the hung worker is gone; the next batch gets a replacement
    arts = builder.build([inp(matmul_task, kernels.plain)] * 3)
    assert all(a.ok for a in arts)
    assert all(is_alive(p) for p in builder.worker_pids)


def test_crashing_build_worker_is_build_error_with_its_signal(builder, kernels, matmul_task,
                                                              inp, is_alive):
    before = set(builder.worker_pids)
    arts = builder.build([inp(matmul_task, kernels.build_crash), inp(matmul_task, kernels.plain)])
    assert arts[0].error_kind == "build_error"
    assert arts[0].error_msg.startswith("build worker killed by signal 11 (SIGSEGV)")
    assert arts[1].ok
    dead = before - set(builder.worker_pids)
    assert len(dead) == 1 and not any(is_alive(p) for p in dead)


def test_close_kills_workers_and_deletes_libraries(tmp_path, settings, kernels, matmul_task,
                                                   inp, is_alive):
    b = LocalBuilder(settings, str(tmp_path))
    arts = b.build([inp(matmul_task, kernels.plain)])
    pids = b.worker_pids
    assert arts[0].ok and len(pids) == 1 and is_alive(pids[0])  # one job, one worker
    b.close()
    assert not any(is_alive(p) for p in pids)
    assert not os.path.exists(arts[0].path) and not os.path.exists(b.out_dir)
    assert os.listdir(os.path.join(tmp_path, "workers")) == []  # worker logs removed
