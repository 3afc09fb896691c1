"""Every workload of TVM's MetaSchedule benchmark module (`tvm.s_tir.meta_schedule.testing.
te_workload`), the first thing a MetaSchedule user tunes, tunes here too: wrapped as
autosched workloads at small shapes, each dry-runs on llvm and on cuda, and a few tune on
llvm with every measured kernel checked correct.

Tensor names are labels: `depthwise_conv2d_nhwc` names both inputs `placeholder`, and the
task gives the second `placeholder_1` (in the kernel, the records and the manifest), with
one warning, while the task key of a workload whose names were distinct stays the same."""
from __future__ import annotations

import json
import logging
import shutil

import pytest

from autosched.errors import UserError
from autosched.validation import distinct_names
from autosched.workload import definition, load_tasks, make_task, workload

# The workloads at small shapes: an op file as a user would write it around te_workload.
# conv2d_winograd_nhwc is left out: TVM 0.27 cannot build it (see the last test).
OP_FILE = '''
from functools import partial

from tvm import te
from tvm.s_tir.meta_schedule.testing import te_workload as tw

import autosched

SMALL = {
    "batch_matmul_nkkm": dict(B=2, N=16, M=16, K=16),
    "conv1d_nlc": dict(N=1, L=16, CI=8, CO=8, kernel_size=3, stride=2, padding=1),
    "conv2d_capsule_nhwijc": dict(N=1, H=6, W=6, CI=4, CO=4, kernel_size=3, stride=1,
                                  padding=1, capsule_size=2),
    "conv2d_nchw": dict(n=1, h=8, w=8, ci=4, co=8, kh=3, kw=3, stride=1, padding=1),
    "conv2d_nchw_bias_bn_relu": dict(n=1, h=8, w=8, ci=4, co=8, kh=3, kw=3, stride=1,
                                     padding=1),
    "conv2d_nhwc": dict(N=1, H=8, W=8, CI=4, CO=8, kernel_size=3, stride=1, padding=1),
    "conv2d_nhwc_bn_relu": dict(N=1, H=8, W=8, CI=4, CO=8, kernel_size=3, strides=1,
                                padding=1),
    "conv2d_transpose_nhwc": dict(N=1, H=4, W=4, CI=8, CO=4, kernel_size=4, stride=2,
                                  padding=1),
    "conv3d_ndhwc": dict(N=1, D=4, H=6, W=6, CI=4, CO=4, kernel_size=3, stride=1, padding=1),
    "depthwise_conv2d_nhwc": dict(N=1, H=8, W=8, C=8, kernel_size=3, stride=1, padding=1),
    "matmul": dict(n=16, m=16, k=16),
    "matmul_relu": dict(n=16, m=16, k=16),
    "max_pool2d_nchw": dict(n=1, h=8, w=8, ci=4, padding=1),
    "norm_bmn": dict(B=1, M=32, N=32),
    "softmax_mn": dict(m=16, n=16),
    "transpose_batch_matmul": dict(batch=1, seq_len=16, n_head=2, n_dim=8),
}
for _name, _kw in SMALL.items():
    globals()[_name] = autosched.workload(name=_name)(partial(getattr(tw, _name), **_kw))


@autosched.workload
def conv2d_nhwc_without_layout_rewrite(N=1, H=8, W=8, CI=4, CO=8, K=3):
    inputs = te.placeholder((N, H, W, CI), name="inputs")
    weight = te.placeholder((K, K, CI, CO), name="weight")
    return inputs, weight, tw.conv2d_nhwc_without_layout_rewrite(inputs, weight, 1, 1, 1)
'''

WORKLOADS = sorted(["batch_matmul_nkkm", "conv1d_nlc", "conv2d_capsule_nhwijc", "conv2d_nchw",
                    "conv2d_nchw_bias_bn_relu", "conv2d_nhwc", "conv2d_nhwc_bn_relu",
                    "conv2d_nhwc_without_layout_rewrite", "conv2d_transpose_nhwc",
                    "conv3d_ndhwc", "depthwise_conv2d_nhwc", "matmul", "matmul_relu",
                    "max_pool2d_nchw", "norm_bmn", "softmax_mn", "transpose_batch_matmul"])
TUNED = ["depthwise_conv2d_nhwc", "conv2d_transpose_nhwc"]  # 2 trials each
DEPTHWISE_ARGS = ["placeholder", "placeholder_1", "depth_conv2d_nhwc"]


@pytest.fixture(scope="module")
def op_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("te_workload") / "te_workload_ops.py"
    path.write_text(OP_FILE)
    return str(path)


@pytest.fixture(scope="module")
def tasks(op_file):
    return {t.workload: t for t in load_tasks(op_file)}


def test_the_op_file_wraps_every_te_workload_function(tasks):
    import inspect

    from tvm.s_tir.meta_schedule.testing import te_workload as tw

    functions = {name for name, f in inspect.getmembers(tw, inspect.isfunction)
                 if f.__module__ == tw.__name__}
    # create_te_workload makes a CONFIGS entry of the others; winograd: the last test
    assert functions - set(tasks) == {"create_te_workload", "conv2d_winograd_nhwc"}
    assert sorted(tasks) == WORKLOADS


def test_repeated_names_are_numbered_in_argument_order_away_from_every_other_name():
    assert distinct_names(["a", "b", "c"]) == ["a", "b", "c"]
    assert distinct_names(["p", "p", "out"]) == ["p", "p_1", "out"]
    assert distinct_names(["p", "p", "p"]) == ["p", "p_1", "p_2"]
    assert distinct_names(["p", "p", "p_1"]) == ["p", "p_2", "p_1"]
    assert distinct_names(["p", "p"], taken={"p_1", "p_2"}) == ["p", "p_3"]
    assert distinct_names(["x", "x_1", "x"]) == ["x", "x_1", "x_2"]


def test_depthwise_inputs_get_distinct_names_and_the_key_is_the_computations(tasks):
    from tvm.s_tir.meta_schedule.testing import te_workload as tw

    from autosched.canonical import canonical_text, task_key

    task = tasks["depthwise_conv2d_nhwc"]
    assert [s.name for s in task.arg_specs] == DEPTHWISE_ARGS
    assert [str(p.name) for p in task.func.params] == DEPTHWISE_ARGS
    assert [(s.shape, s.dtype) for s in task.arg_specs] == [
        ((1, 8, 8, 8), "float32"), ((1, 3, 3, 8), "float32"), ((1, 8, 8, 8), "float32")]
    assert task.key == "4e737882ae498dffec475efd1c394c74"
    # the user's tensors, names repeated, give the same key: renaming changed no arithmetic
    original = tw.depthwise_conv2d_nhwc(**task.args)
    assert [t.op.name for t in original] == ["placeholder", "placeholder", "depth_conv2d_nhwc"]
    assert task_key(canonical_text(original[:2], original[2:]), task.args) == task.key
    assert task.to_json()["inputs"][1]["name"] == "placeholder_1"


def test_workloads_with_distinct_names_keep_their_task_keys(examples_dir):
    """Keys computed before repeated names were allowed: existing databases still match."""
    matmul = load_tasks(str(examples_dir / "matmul.py"), ["matmul"],
                        ["M=32", "N=32", "K=32"])[0]
    assert matmul.key == "daf945b49b7485263a759bc93046121c"
    convs = {t.workload: t for t in load_tasks(str(examples_dir / "conv2d.py"))}
    assert convs["conv2d"].key == "7a6d7b6308e5d0fda95302e413e7182c"
    assert convs["depthwise_conv2d"].key == "4385ac6233c4d7218aa906bf96ccf610"
    assert [s.name for s in convs["conv2d"].arg_specs] == ["data", "weight", "conv"]


def _echo(M=8):
    from tvm import te

    x = te.placeholder((M,), name="X")
    doubled = te.compute((M,), lambda i: x[i] * 2.0, name="X_1")
    return x, te.compute((M,), lambda i: doubled[i] + x[i], name="X")


def test_an_output_named_like_an_input_is_renamed_once_with_one_warning(caplog):
    import numpy as np
    import tvm

    wdef = definition(_echo, name="echo_named_alike")
    with caplog.at_level(logging.WARNING, logger="autosched"):
        task = make_task(wdef, {"M": 8})
        again = make_task(wdef, {"M": 8})
    # X_1 is an intermediate tensor's name: the output becomes X_2
    assert [s.name for s in task.arg_specs] == ["X", "X_2"] == [s.name for s in again.arg_specs]
    assert task.key == again.key
    assert [r.getMessage() for r in caplog.records] == [
        "workload 'echo_named_alike': tensors share a name; kernel arguments renamed: "
        "#2 'X' -> 'X_2'"]
    kernel = tvm.compile(task.mod, target="llvm").jit()
    x = tvm.runtime.tensor(np.arange(8, dtype="float32"))
    out = tvm.runtime.tensor(np.zeros(8, dtype="float32"))
    kernel["main"](x, out)
    assert out.numpy().tolist() == [3.0 * i for i in range(8)]


def _argmax_named_alike(M=4):
    import tvm
    from tvm import te

    def combine(x, y):
        keep = x[1] >= y[1]
        return tvm.tirx.Select(keep, x[0], y[0]), tvm.tirx.Select(keep, x[1], y[1])

    argmax = te.comm_reducer(combine, lambda t0, t1: (tvm.tirx.const(-1, t0),
                                                      te.min_value(t1)), name="argmax")
    values = te.placeholder((M, 6), name="A")
    index = te.placeholder((M, 6), name="A", dtype="int32")
    k = te.reduce_axis((0, 6), name="k")
    at, best = te.compute((M,), lambda i: argmax((index[i, k], values[i, k]), axis=k),
                          name="T")
    return values, index, at, best


def test_a_shared_reduction_is_rebuilt_whole_when_its_inputs_are_renamed():
    """Both outputs of one reduction (an argmax's index and value) read the renamed
    input through the one reduction TVM requires them to share."""
    import numpy as np
    import tvm

    task = make_task(definition(_argmax_named_alike, name="argmax_named_alike"), {"M": 4})
    assert [s.name for s in task.arg_specs] == ["A", "A_1", "T", "T_1"]
    values = np.array([[0, 5, 1, 2, 9, 3]] * 2 + [[7, 1, 1, 1, 1, 1]] * 2, dtype="float32")
    index = np.tile(np.arange(10, 16, dtype="int32"), (4, 1))
    out = [tvm.runtime.tensor(np.zeros(4, dtype=s.dtype)) for s in task.outputs]
    kernel = tvm.compile(task.mod, target="llvm").jit()
    kernel["main"](tvm.runtime.tensor(values), tvm.runtime.tensor(index), *out)
    assert out[0].numpy().tolist() == [14, 14, 10, 10]
    assert out[1].numpy().tolist() == [9.0, 9.0, 7.0, 7.0]


def test_a_tensor_returned_twice_is_still_refused():
    from tvm import te

    @workload
    def twice(M=8):
        a = te.placeholder((M,), name="A")
        return a, a, te.compute((M,), lambda i: a[i] + 1.0, name="B")

    with pytest.raises(UserError) as e:
        make_task(twice, {"M": 8})
    assert str(e.value) == ("workload 'twice': tensor 'A' is returned twice; return each "
                            "input and output once")


def test_every_workload_dry_runs_on_llvm(tasks):
    from autosched import dry_run_task, resolve_target

    target = resolve_target("llvm")
    reports = {name: dry_run_task(task, target, 2, seed=0) for name, task in tasks.items()}
    failed = {n: r.first_errors for n, r in reports.items() if r.failures}
    assert failed == {}
    assert {n: r.compiled == r.generated >= 1 for n, r in reports.items()} == \
        {n: True for n in WORKLOADS}


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None or shutil.which("cc") is None,
                    reason="needs nvcc and cc")
def test_every_workload_dry_runs_on_cuda_through_the_cli(op_file, tmp_path):
    """`autosched tune --dry-run` as a user runs it: one candidate a workload, checked
    against sm_90's limits and compiled by nvcc (in a process of its own: compiling CUDA
    registers TVM's CUDA runtime for good)."""
    from conftest import run_cli

    done = run_cli("tune", op_file, "--target", "cuda", "--dry-run", "--trials", "1",
                   "--work-dir", str(tmp_path / "logs"), "--db",
                   f"sqlite:///{tmp_path}/db.sqlite", cwd=tmp_path,
                   env={"XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert done.returncode == 0, done.stderr
    rows = {line.split("(")[0]: line.split(")", 1)[1].split()[:3]
            for line in done.stdout.splitlines() if line.split("(")[0] in WORKLOADS}
    assert rows == {name: ["1", "1", "1"] for name in WORKLOADS}, done.stdout + done.stderr
    warnings = [line for line in done.stderr.splitlines() if "share a name" in line]
    assert warnings == ["workload 'depthwise_conv2d_nhwc': tensors share a name; kernel "
                        "arguments renamed: #2 'placeholder' -> 'placeholder_1'"]
    assert not (tmp_path / "db.sqlite").exists()


@pytest.mark.slow
def test_a_few_tune_on_llvm_with_every_kernel_correct_and_export_keeps_the_names(
        op_file, tasks, tmp_path):
    from autosched import TuneConfig, export, open_database, tune_tasks
    from autosched.measure import MeasureSettings

    db_url = f"sqlite:///{tmp_path}/t.db"
    fast = MeasureSettings(number=1, repeat=2, min_repeat_ms=0, build_workers=2)
    config = TuneConfig(trials=2 * len(TUNED), db_url=db_url, batch_size=2, seed=0,
                        work_dir=str(tmp_path / "logs"), measure=fast)
    result = tune_tasks([tasks[n] for n in TUNED], config)
    assert {s.task.workload: (s.trials, dict(s.failures)) for s in result.tasks} == \
        {n: (2, {}) for n in TUNED}
    db = open_database(db_url)
    try:
        records = {n: db.records(task_key=tasks[n].key) for n in TUNED}
        registered = {t["workload"]: t for t in db.tasks()}
    finally:
        db.close()
    # every measured kernel ran and matched the reference (no wrong_answer, no failure)
    assert {n: [r.result.error_kind for r in rs] for n, rs in records.items()} == \
        {n: [None, None] for n in TUNED}
    depthwise = registered["depthwise_conv2d_nhwc"]
    assert depthwise["key"] == tasks["depthwise_conv2d_nhwc"].key
    assert [a["name"] for a in depthwise["inputs"] + depthwise["outputs"]] == DEPTHWISE_ARGS

    manifest = export(op_file, "llvm", str(tmp_path / "lib"), db_url,
                      workloads=["depthwise_conv2d_nhwc"])
    with open(manifest) as f:
        kernels = json.load(f)["kernels"]
    assert [[a["name"] for a in k["inputs"] + k["outputs"]] for k in kernels] == \
        [DEPTHWISE_ARGS]


def test_winograd_is_refused_in_one_line_because_tvm_cannot_build_it():
    """TVM 0.27's te_workload.conv2d_winograd_nhwc asks topi for a pre-computed weight
    transform, a path topi now always refuses: the user gets TVM's reason in one line."""
    from functools import partial

    from tvm.s_tir.meta_schedule.testing import te_workload as tw

    wdef = definition(partial(tw.conv2d_winograd_nhwc, N=1, H=8, W=8, CI=4, CO=4,
                              kernel_size=3, padding=1, tile_size=2), name="winograd")
    with pytest.raises(UserError) as e:
        make_task(wdef, dict(wdef.params))
    assert str(e.value) == (
        "workload 'winograd' failed with {'N': 1, 'H': 8, 'W': 8, 'CI': 4, 'CO': 4, "
        "'kernel_size': 3, 'stride': 1, 'padding': 1, 'dilation': 1, 'tile_size': 2}: "
        "RuntimeError: LEGACY-FLOW triggered, to be removed")
