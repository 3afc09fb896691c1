"""Reference data: deterministic inputs, outputs of the unscheduled kernel computed in a
reference worker with a timeout, files on disk shared by processes."""
import json
import os
import re
import subprocess
import sys
import textwrap

import ml_dtypes
import numpy as np
import pytest

from autosched.errors import InfrastructureError
from autosched.measure.reference.check import relative_tolerance
from autosched.measure.reference.data import (REFERENCE_VERSION, load_reference, random_inputs,
                                              longest_reduction, reference_dir)
from autosched.measure.reference.store import ensure_reference
from autosched.measure.reference.job import TEST_FAULT_ATTR, ReferenceFailed
from autosched.task import TensorSpec


def test_matmul_reference_is_the_product_of_its_inputs(tmp_path, matmul_task):
    ref = ensure_reference(matmul_task, str(tmp_path))
    assert ref.created and ref.directory == reference_dir(str(tmp_path), matmul_task.key)
    (a, b), (c,) = ref.arrays()
    assert a.shape == (32, 32) and a.dtype == np.float32
    assert a.min() >= -1 and a.max() <= 1 and a.std() > 0.4
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5,
                               atol=1e-5)
    assert ref.meta["reduction_extent"] == 32
    assert (ref.meta["version"], ref.meta["target"], ref.meta["expected"], ref.meta["check"]) \
        == (3, {"kind": "llvm"}, {"device": "cpu", "schedule": "unscheduled"}, None)
    (tol,) = ref.tolerances()
    assert tol.rtol == relative_tolerance("float32", 32) == 1e-5
    assert tol.atol == pytest.approx(1e-5 * np.abs(c).max())
    names = sorted(os.listdir(ref.directory))
    assert names == ["in0.npy", "in1.npy", "meta.json", "out0.npy"]
    again = ensure_reference(matmul_task, str(tmp_path))
    assert not again.created and again.meta == ref.meta


def test_inputs_are_deterministic_per_task_key_and_seed():
    specs = [TensorSpec("x", (5, 7), "float32"), TensorSpec("y", (3,), "float64")]
    one, two = random_inputs(specs, "k1"), random_inputs(specs, "k1")
    assert all(np.array_equal(p, q) for p, q in zip(one, two))
    assert not np.array_equal(one[0], random_inputs(specs, "k1", seed=1)[0])
    assert not np.array_equal(one[0], random_inputs(specs, "k2")[0])
    assert one[1].dtype == np.float64


def test_integer_and_boolean_inputs_are_small():
    specs = [TensorSpec("i", (4000,), "int32"), TensorSpec("u", (4000,), "uint8"),
             TensorSpec("b", (4000,), "bool"), TensorSpec("h", (4000,), "float16")]
    i, u, b, h = random_inputs(specs, "key")
    assert (i.dtype, u.dtype, b.dtype, h.dtype) == (np.int32, np.uint8, np.bool_, np.float16)
    assert set(np.unique(i)) == set(range(-3, 4))
    assert set(np.unique(u)) == set(range(0, 8))
    assert set(np.unique(b)) == {False, True}
    assert -1 <= h.min() and h.max() <= 1


@pytest.mark.parametrize("op_file, args, extent", [
    ("matmul.py", dict(M=8, N=8, K=24), 24),
    ("batch_matmul.py", dict(B=2, M=8, N=8, K=16), 16),
    ("softmax.py", dict(M=4, N=40), 40),
    ("conv2d.py", dict(N=1, C=3, H=6, W=6, F=2), 3 * 3 * 3),
    ("dense_gelu.py", dict(M=4, N=8, K=48), 48),
])
def test_reduction_extent_is_the_longest_reduction(task_of, op_file, args, extent):
    assert longest_reduction(task_of(op_file, **args).func) == (extent, "float32")


def test_elementwise_work_has_reduction_extent_one(tmp_path):
    from autosched.workload import load_tasks

    op = tmp_path / "add.py"
    op.write_text(textwrap.dedent("""
        from tvm import te
        import autosched

        @autosched.workload
        def add(N=16):
            a = te.placeholder((N,), name="a")
            b = te.placeholder((N,), name="b")
            return a, b, te.compute((N,), lambda i: a[i] + b[i], name="c")
    """))
    task = load_tasks(str(op))[0]
    assert longest_reduction(task.func) == (1, None)
    ref = ensure_reference(task, str(tmp_path / "wd"))
    (a, b), (c,) = ref.arrays()
    assert np.array_equal(c, a + b)


def test_bfloat16_is_stored_as_raw_bits_and_loads_as_bfloat16(tmp_path, task_of):
    task = task_of("matmul.py", M=4, N=4, K=8, dtype="bfloat16")
    ref = ensure_reference(task, str(tmp_path))
    for entry in ref.meta["inputs"] + ref.meta["outputs"]:
        assert entry["storage"] == "uint16"
        raw = np.load(os.path.join(ref.directory, entry["file"]), allow_pickle=False)
        assert raw.dtype == np.uint16
    (a, b), (c,) = ref.arrays()
    assert a.dtype == ml_dtypes.bfloat16 and c.dtype == ml_dtypes.bfloat16
    exact = a.astype(np.float64) @ b.astype(np.float64)
    assert np.abs(c.astype(np.float64) - exact).max() <= 0.05 * np.abs(exact).max()


def test_a_reference_of_an_older_version_is_recomputed(tmp_path, matmul_task):
    ref = ensure_reference(matmul_task, str(tmp_path))
    meta_path = os.path.join(ref.directory, "meta.json")
    with open(meta_path) as f:
        meta = json.load(f)
    with open(meta_path, "w") as f:
        json.dump(dict(meta, version=REFERENCE_VERSION - 1), f)
    assert load_reference(ref.directory) is None
    again = ensure_reference(matmul_task, str(tmp_path))
    assert again.created and again.meta["version"] == REFERENCE_VERSION == 3


def test_a_partial_directory_is_recomputed(tmp_path, matmul_task):
    broken = reference_dir(str(tmp_path), matmul_task.key)
    os.makedirs(broken)
    open(os.path.join(broken, "in0.npy"), "wb").close()  # a crash before meta.json
    assert load_reference(broken) is None
    ref = ensure_reference(matmul_task, str(tmp_path))
    assert ref.created and load_reference(broken) is not None
    assert os.listdir(os.path.dirname(broken)) == [matmul_task.key]  # no temp dirs left


_CHILD = textwrap.dedent("""
    import hashlib, json, os, sys, time
    from autosched.workload import load_tasks
    from autosched.measure.reference.store import ensure_reference
    task = load_tasks(sys.argv[1], arg_items=["M=48", "N=40", "K=56"])[0]
    work, scratch, barrier = sys.argv[2], sys.argv[3] or None, sys.argv[4] or None
    if barrier:  # start writing together with the other process
        open(os.path.join(barrier, str(os.getpid())), "w").close()
        while len(os.listdir(barrier)) < 2:
            time.sleep(0.01)
    ref = ensure_reference(task, work, scratch_dir=scratch)
    inputs, expected = ref.arrays()
    out = os.path.join(ref.directory, "out0.npy")
    print(json.dumps({"created": ref.created, "dir": ref.directory,
                      "mtime": os.stat(out).st_mtime_ns, "pid": os.getpid(),
                      "files": sorted(os.listdir(ref.directory)),
                      "digest": hashlib.sha256(b"".join(
                          a.tobytes() for a in inputs + expected)).hexdigest()}))
""")


def _spawn(env, examples, work_dir, scratch="", barrier=""):
    return subprocess.Popen([sys.executable, "-c", _CHILD, str(examples / "matmul.py"),
                             work_dir, scratch, barrier], env=env, stdout=subprocess.PIPE,
                            text=True)


def _result(proc):
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.slow  # two processes, each starting a reference worker
def test_reference_files_are_reused_across_processes(tmp_path, child_env, examples_dir):
    wd = str(tmp_path / "work")
    runs = [tmp_path / "work" / "runs" / name for name in ("a", "b")]
    first = _result(_spawn(child_env, examples_dir, wd, str(runs[0])))
    second = _result(_spawn(child_env, examples_dir, wd, str(runs[1])))
    assert first["created"] is True and second["created"] is False
    assert first["dir"] == second["dir"] and first["mtime"] == second["mtime"]
    assert first["pid"] != second["pid"]
    # the first started a reference worker (its log folder is left, empty); the second
    # found the files and started none
    assert os.listdir(runs[0]) == ["workers"] and os.listdir(runs[0] / "workers") == []
    assert not runs[1].exists()


@pytest.mark.slow  # two processes, each starting a reference worker
def test_processes_racing_for_one_reference_agree(tmp_path, child_env, examples_dir):
    wd = str(tmp_path)
    procs = [_spawn(child_env, examples_dir, wd) for _ in range(2)]
    results = [_result(p) for p in procs]
    assert sum(r["created"] for r in results) == 1
    assert len({r["dir"] for r in results}) == 1
    ref_root = os.path.dirname(results[0]["dir"])
    assert len(os.listdir(ref_root)) == 1  # losers removed their temporary directories
    with open(os.path.join(results[0]["dir"], "meta.json")) as f:
        assert json.load(f)["task_key"] == os.path.basename(results[0]["dir"])


@pytest.mark.slow  # two processes, each starting a reference worker
def test_processes_writing_one_reference_at_once_end_with_the_same_complete_one(
        tmp_path, child_env, examples_dir, task_of):
    """Both start together, each writing in its own scratch folder, with a partial
    directory (a crash of an earlier version) in the way that one of them must replace."""
    wd = str(tmp_path / "work")
    task = task_of("matmul.py", M=48, N=40, K=56)
    broken = reference_dir(wd, task.key)
    os.makedirs(broken)
    open(os.path.join(broken, "out0.npy"), "wb").close()
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    scratch = [tmp_path / "work" / "runs" / name for name in ("a", "b")]
    procs = [_spawn(child_env, examples_dir, wd, str(s), str(barrier)) for s in scratch]
    results = [_result(p) for p in procs]
    assert sum(r["created"] for r in results) == 1
    assert {r["dir"] for r in results} == {broken}
    assert results[0]["digest"] == results[1]["digest"]
    assert all(r["files"] == ["in0.npy", "in1.npy", "meta.json", "out0.npy"] for r in results)
    assert os.listdir(os.path.dirname(broken)) == [task.key]  # nothing else in reference/
    # each removed its unpublished copy; its reference worker's log went with the worker
    assert [p for s in scratch for p in s.rglob("*") if not p.is_dir()] == []
    ref = load_reference(broken)
    (a, b), (c,) = ref.arrays()
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5,
                               atol=1e-5)


def _worker_children() -> list:
    import psutil

    return [p for p in psutil.Process().children(recursive=True)
            if "autosched.measure.worker" in " ".join(p.cmdline())]


def test_a_reference_past_its_timeout_is_a_clear_stop_and_leaves_nothing(tmp_path, task_of):
    """A 512^3 float16 matmul takes about 5 s on the CPU here; given 1 s, its worker is
    killed and the one line names the task, where it ran and the limit."""
    task = task_of("matmul.py", M=512, N=512, K=512, dtype="float16")
    with pytest.raises(ReferenceFailed) as caught:
        ensure_reference(task, str(tmp_path / "work"), scratch_dir=str(tmp_path / "run"),
                         timeout=1.0)
    assert isinstance(caught.value, InfrastructureError)
    assert str(caught.value) == (
        "reference of matmul(M=512,N=512,K=512,dtype=float16) on the CPU did not finish "
        "within 1s; worker killed; give the workload smaller arguments (--arg K=V) or the "
        "reference a longer timeout (reference_timeout), then rerun")
    assert os.listdir(tmp_path / "work" / "reference") == []
    assert [p for p in (tmp_path / "run").rglob("*") if not p.is_dir()] == []
    assert _worker_children() == []


def test_a_reference_worker_that_dies_is_a_clear_stop(tmp_path, matmul_task):
    import dataclasses

    task = dataclasses.replace(matmul_task, func=matmul_task.func.with_attr(TEST_FAULT_ATTR,
                                                                            "crash"))
    with pytest.raises(ReferenceFailed) as caught:
        ensure_reference(task, str(tmp_path))
    line = str(caught.value)
    assert re.fullmatch(
        r"reference of matmul\(M=32,N=32,K=32,dtype=float32\) on the CPU: the reference "
        r"worker killed by signal 11 \(SIGSEGV\) \(Fatal Python error: Segmentation fault "
        r"in reference_job at job\.py:\d+\); nothing was recorded; fix the cause "
        r"and rerun", line), line
    assert os.listdir(tmp_path / "reference") == []
    assert _worker_children() == []
    ref = ensure_reference(matmul_task, str(tmp_path))  # the same task, without the fault
    assert ref.created and ref.meta["version"] == REFERENCE_VERSION
