"""Build small kernel libraries for the tests, in the format `autosched export` writes.

The kernels are lightly scheduled (parallel outer loops: correct, not fast): the tests are
about the torch integration, not about tuning, and `autosched export` needs tuning records.
test_export_format.py checks that a manifest written by export's own code loads the same.
"""
from __future__ import annotations

import json
from pathlib import Path

from autosched.exporting import kernel_symbols
from autosched.target import resolve_target
from autosched.versions import current_versions
from autosched.workload import load_op_file, make_task

REPO = Path(__file__).resolve().parents[2]
NN_OPS = REPO / "examples" / "nn_ops.py"


def kernel_entry(task, symbol: str, meta: dict) -> dict:
    return {"symbol": symbol, "workload": task.workload, "args": dict(task.args),
            "task_key": task.key, "inputs": [s.to_json() for s in task.inputs],
            "outputs": [s.to_json() for s in task.outputs], "record_id": None,
            "latency_s": None, "flops": task.flops, "candidate": None, "meta": meta}


def write_manifest(directory: Path, target, kernels: list[dict], **overrides) -> Path:
    import tvm_ffi

    versions = dict(current_versions("1"), tvm_ffi=tvm_ffi.__version__)
    manifest = {"format": 1, "library": "kernels.so", "target": target.config,
                "target_key": target.key, "hardware": target.fingerprint,
                "versions": versions, "kernels": kernels}
    manifest.update(overrides)
    path = Path(directory) / "manifest.json"
    path.write_text(json.dumps(manifest, indent=1))
    return path


def parallel_outer_loops(func):
    """A light schedule: each block's outermost (spatial) loop runs on the thread pool, so
    the kernels use TVM's runtime (thread pool, workspaces) like tuned ones do."""
    import tvm
    from tvm import s_tir

    sch = s_tir.Schedule(tvm.IRModule({"main": func}))
    for block in sch.get_child_blocks(sch.get_sblock("root")):
        loops = sch.get_loops(block)
        if loops:
            try:
                sch.parallel(loops[0])
            except Exception:  # e.g. a reduction as the outer loop: leave it serial
                pass
    return sch.mod["main"]


def make_tasks(selection: dict[str, list[dict]], op_file=NN_OPS):
    """Tasks of the workloads named in `selection` (workload -> argument sets, each merged
    over the workload's defaults), and each task's workload metadata."""
    defs = load_op_file(str(op_file))
    tasks = [make_task(defs[name], dict(defs[name].params, **args))
             for name, arg_sets in selection.items() for args in arg_sets]
    return tasks, [dict(defs[t.workload].meta) for t in tasks]


def compile_kernels(directory, tasks, target_text: str = "llvm", parallel: bool = True):
    """Compile `tasks` into DIR/kernels.so; (the target, each task's symbol)."""
    import tvm

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    symbols = kernel_symbols(tasks)
    light = parallel_outer_loops if parallel else (lambda f: f)
    funcs = {sym: light(t.func).with_attr("global_symbol", sym) for t, sym in zip(tasks, symbols)}
    target = resolve_target(target_text)
    tvm.compile(tvm.IRModule(funcs), target=target.tvm()).export_library(
        str(directory / "kernels.so"))
    return target, symbols


def build_library(directory, selection: dict[str, list[dict]], op_file=NN_OPS,
                  target_text: str = "llvm", parallel: bool = True) -> Path:
    """Compile the selected workloads of `op_file` into DIR/kernels.so + DIR/manifest.json."""
    tasks, metas = make_tasks(selection, op_file)
    target, symbols = compile_kernels(directory, tasks, target_text, parallel)
    kernels = [kernel_entry(t, sym, meta) for t, sym, meta in zip(tasks, symbols, metas)]
    write_manifest(Path(directory), target, kernels)
    return Path(directory)


# The library the tests use: small shapes of every op in examples/nn_ops.py.
F64 = {"dtype": "float64"}
# Two float32 linear shapes (dispatch over variants), the MLP of the training test, and a
# float64 shape per op for gradcheck.
LINEAR = [{"M": 8, "N": 6, "K": 4}, {"M": 8, "N": 3, "K": 6}, {"M": 4, "N": 3, "K": 5, **F64},
          {"M": 16, "N": 12, "K": 8}, {"M": 16, "N": 4, "K": 12}]
MATMUL = [{"M": 8, "N": 5, "K": 6}, {"M": 3, "N": 4, "K": 2, **F64}]
ROWS = [{"M": 8, "N": 16}, {"M": 4, "N": 5, **F64}, {"M": 16, "N": 12}]
MLP_SHAPES = {"batch": 16, "d_in": 8, "hidden": 12, "d_out": 4}


def _rows(shapes):
    out = []
    for s in shapes:
        r = {k: v for k, v in s.items() if k != "K"}
        if r not in out:
            out.append(r)
    return out


TEST_SELECTION = {
    "linear": LINEAR, "linear_grad_x": LINEAR, "linear_grad_w": LINEAR,
    "linear_grad_b": _rows(LINEAR),
    "matmul": MATMUL, "matmul_grad_a": MATMUL, "matmul_grad_b": MATMUL,
    "gelu": ROWS, "gelu_grad": ROWS, "softmax": ROWS, "softmax_grad": ROWS,
    "layer_norm": ROWS, "layer_norm_grad_x": ROWS, "layer_norm_grad_gamma": ROWS,
    "layer_norm_grad_beta": ROWS,
}


def write_chosen_model_library(directory, found, model_name: str):
    """A model library in `directory` with a kernel for every task extraction `found`,
    each chosen by model_ops.json (torch "recorded" at 1 s, the kernels at 1 ns); the
    kernels are the unscheduled builds (`compile_kernels`). Returns `directory`."""
    from autosched.model.choice import OpChoice, write_choices
    from autosched.model.extract import model_tasks

    tasks = model_tasks(found)
    target, symbols = compile_kernels(directory, tasks)
    write_manifest(directory, target, [kernel_entry(t, s, {}) for t, s in zip(tasks, symbols)])
    write_choices(str(directory), model_name, True, [
        OpChoice(op.workload, dict(op.params), op.count, dict(op.ops), t.key, 1.0, 1e-9, 1, 2)
        for op, t in zip(found.ops, tasks)])
    return directory
