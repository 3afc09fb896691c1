"""The operator set the benchmarks compare on, with torch implementations of each."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@dataclass(frozen=True)
class BenchOp:
    name: str
    op_file: str
    workload: str
    args: tuple[str, ...] = ()
    positive: tuple[str, ...] = ()  # inputs drawn positive (a variance)

    def task(self):
        from autosched import load_tasks

        return load_tasks(str(EXAMPLES / self.op_file), [self.workload], list(self.args))[0]


OPS = [
    BenchOp("matmul", "matmul.py", "matmul"),
    BenchOp("batch_matmul", "batch_matmul.py", "batch_matmul"),
    BenchOp("conv2d", "conv2d.py", "conv2d"),
    BenchOp("depthwise_conv2d", "conv2d.py", "depthwise_conv2d"),
    BenchOp("softmax", "softmax.py", "softmax"),
    BenchOp("layer_norm", "softmax.py", "layer_norm"),
    BenchOp("dense_bias_gelu", "dense_gelu.py", "dense_bias_gelu"),
]

# A broader set: convolution variants, norms, attention and odd shapes
# (`vs_metaschedule.py --set broad`).
BROAD_OPS = [
    BenchOp("conv1d", "conv_norm_ops.py", "conv1d"),
    BenchOp("conv3d", "conv_norm_ops.py", "conv3d"),
    BenchOp("conv2d_grouped", "conv_norm_ops.py", "conv2d_general", ("C=128", "F=128",
                                                                     "H=28", "W=28", "groups=4")),
    BenchOp("conv2d_dilated", "conv_norm_ops.py", "conv2d_general", ("pad=2", "dilation=2")),
    BenchOp("conv2d_strided", "conv_norm_ops.py", "conv2d_general", ("C=64", "F=128",
                                                                     "stride=2")),
    BenchOp("conv2d_transpose", "conv_norm_ops.py", "conv2d_transpose"),
    BenchOp("conv2d_nhwc", "conv_norm_ops.py", "conv2d_nhwc"),
    BenchOp("conv2d_bn_relu", "conv_norm_ops.py", "conv2d_bn_relu", positive=("var",)),
    BenchOp("rms_norm", "conv_norm_ops.py", "rms_norm"),
    BenchOp("layer_norm_512x768", "softmax.py", "layer_norm", ("M=512",)),
    BenchOp("softmax_777x1000", "softmax.py", "softmax", ("M=777", "N=1000")),
    BenchOp("attention_values", "batch_matmul.py", "batch_matmul", ("B=48", "M=128", "N=64",
                                                                    "K=128")),
    BenchOp("matmul_384x640x768", "matmul.py", "matmul", ("M=384", "N=640", "K=768")),
]
SETS = {"examples": OPS, "broad": BROAD_OPS}


def op_files() -> list[str]:
    """The example op files defining the benchmarked operators (of the example set)."""
    return sorted({str(EXAMPLES / o.op_file) for o in OPS})


def database_groups(db_url: str, report=None) -> list:
    """(task, target, [(candidate, result), ...]) per task of this machine's usable llvm
    records in `db_url` (see autosched.training_data.groups_from_database)."""
    from search_space import SPACE_VERSION

    from autosched import current_versions, groups_from_database, open_database

    db = open_database(db_url, create=False)
    try:
        return groups_from_database(db, op_files(), "llvm", current_versions(SPACE_VERSION),
                                    report)
    finally:
        db.close()


def torch_fn(task):
    """A torch function computing the task's operator from the task's inputs (as torch
    tensors, in the same order and layout)."""
    import torch
    import torch.nn.functional as F

    a = task.args
    fns = {
        "matmul": lambda x, w: torch.matmul(x, w),
        "batch_matmul": lambda x, w: torch.bmm(x, w),
        "conv2d": lambda x, w: F.conv2d(x, w, padding=a.get("pad", 1)),
        "depthwise_conv2d": lambda x, w: F.conv2d(x, w.unsqueeze(1), padding=a.get("pad", 1),
                                                  groups=x.shape[1]),
        "softmax": lambda x: torch.softmax(x, dim=1),
        "layer_norm": lambda x, g, b: F.layer_norm(x, (x.shape[-1],), g, b, eps=a.get("eps", 1e-5)),
        "dense_bias_gelu": lambda x, w, b: F.gelu(F.linear(x, w, b), approximate="tanh"),
        "conv1d": lambda x, w: F.conv1d(x, w, stride=a["stride"], padding=a["pad"]),
        "conv3d": lambda x, w: F.conv3d(x, w, padding=a["pad"]),
        "conv2d_general": lambda x, w: F.conv2d(x, w, stride=a["stride"], padding=a["pad"],
                                                dilation=a["dilation"], groups=a["groups"]),
        "conv2d_transpose": lambda x, w: F.conv_transpose2d(x, w, stride=a["stride"],
                                                            padding=a["pad"]),
        # NHWC data and HWIO weights, as the channels-last tensors a user holds
        "conv2d_nhwc": lambda x, w: F.conv2d(
            x.permute(0, 3, 1, 2), w.permute(3, 2, 0, 1), padding=a["pad"]
        ).permute(0, 2, 3, 1),
        "conv2d_bn_relu": lambda x, w, mean, var, g, b: F.relu(F.batch_norm(
            F.conv2d(x, w, padding=a["pad"]), mean, var, g, b, False, 0.0, a["eps"])),
        "rms_norm": lambda x, w: F.rms_norm(x, (x.shape[-1],), w, a["eps"]),
    }
    return fns[task.workload]


def recorded(db_url: str, task_key: str) -> list:
    """A task's records in `db_url`, in the order they were measured."""
    from autosched.db import open_database

    db = open_database(db_url)
    try:
        return db.records(task_key=task_key)
    finally:
        db.close()


def best_so_far(records) -> list[float]:
    """The best latency after each record (inf until one succeeds)."""
    out, best = [], float("inf")
    for rec in records:
        best = min(best, rec.latency)
        out.append(best)
    return out
