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

    def task(self):
        from autosched.workload import load_tasks

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


def op_files() -> list[str]:
    """The example op files defining the benchmarked operators."""
    return sorted({str(EXAMPLES / o.op_file) for o in OPS})


def database_groups(db_url: str, report=None) -> list:
    """(task, target, [(candidate, result), ...]) per task of this machine's usable llvm
    records in `db_url` (see autosched.training_data.groups_from_database)."""
    from search_space import SPACE_VERSION

    from autosched.db import open_database
    from autosched.training_data import groups_from_database
    from autosched.versions import current_versions

    db = open_database(db_url, create=False)
    try:
        return groups_from_database(db, op_files(), "llvm", current_versions(SPACE_VERSION),
                                    report)
    finally:
        db.close()


def torch_fn(name: str, task):
    """A torch function computing the same operator, and how to build its inputs."""
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
    }
    return fns[name]


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
