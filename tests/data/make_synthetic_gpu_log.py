"""Write tests/data/synthetic_gpu_sm90a.jsonl: a SYNTHETIC `db export` log of CUDA
candidates, for tests of GPU replay, export from another machine's records and the
shipped warm start until real GPU records exist (bench/gpu/logs/README.md).

Nothing in it was measured. The candidates are real: sampled (seeded) from our rules'
space for an H100-like `sm_90a` target, so they replay exactly in it. Their results are
made up, deterministically: a candidate the space's limit check refuses is `invalid` with
the check's reason (as the tuning loop records it); of the rest, one in twenty (by a hash
of its key) is a `build_error`, and every other one gets the latency of its FLOPs at a
made-up fraction of the H100's fp16 / fp32 peak that depends on its sketch (tensor cores
fastest, the unscheduled default slowest), times a hash-drawn factor in [1, 2). The
hardware fingerprint names an H100 and says `"synthetic": true`, the provenance too: a
model trained on this log must never ship (`bench/gpu/train_warm_start.py` refuses it
without `--synthetic-ok`, and never writes it into the package).

Rerun after a change of SPACE_VERSION, the TVM version or the CUDA rules (the output
is the same bytes for the same code):

    python tests/data/make_synthetic_gpu_log.py
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import random
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from autosched.db import make_record  # noqa: E402
from autosched.db.jsonl import write_records  # noqa: E402
from autosched.results import MeasureResult  # noqa: E402
from autosched.target import TargetSpec  # noqa: E402
from autosched.versions import current_versions  # noqa: E402
from autosched.workload import load_tasks  # noqa: E402
from search_space import SPACE_VERSION, Candidate, InvalidCandidate, generate_space  # noqa: E402

LOG = "tests/data/synthetic_gpu_sm90a.jsonl"
SEED = 20261206
PER_TASK = 40  # candidates a task, the default included
# What `--target '{"kind":"cuda","arch":"sm_90a"}'` resolves to on an H100 SXM.
TARGET = {"kind": "cuda", "arch": "sm_90a", "max_num_threads": 1024, "thread_warp_size": 32,
          "max_shared_memory_per_block": 49152,
          "max_dynamic_shared_memory_per_block": 232448, "registers_per_block": 65536,
          "l2_cache_size_bytes": 52428800}
HARDWARE = {"device": "gpu", "name": "NVIDIA H100 80GB HBM3 (synthetic)", "arch": "sm_90",
            "driver": "synthetic", "memory": 85520809984, "sm_count": 132,
            "max_threads_per_block": 1024, "warp_size": 32,
            "max_shared_memory_per_block": 49152,
            "max_shared_memory_per_block_optin": 232448,
            "max_registers_per_block": 65536, "l2_cache_bytes": 52428800,
            "synthetic": True}
PROVENANCE = {"host": "synthetic", "user": "tests/data/make_synthetic_gpu_log.py",
              "time": 1796515200.0, "synthetic": True,
              "settings": {"synthetic": True, "seed": SEED}}
# (op file, workload, args)
TASKS = [("examples/mixed_precision.py", "matmul_mp", ["M=128", "N=128", "K=128"]),
         ("examples/mixed_precision.py", "matmul_mp", ["M=256", "N=128", "K=128"]),
         ("examples/matmul.py", "matmul", ["M=128", "N=128", "K=128"])]
PEAK = {"float16": 990e12, "float32": 67e12}  # FLOP/s, H100 SXM dense
EFFICIENCY = {"default": 0.001, "simple": 0.01, "tile": 0.1, "simt_gemm": 0.3,
              "tensor_core": 0.3, "wgmma": 0.5}


def draw(task_key: str, cand: Candidate) -> float:
    """A number in [0, 1) fixed by the task, the candidate and SEED."""
    digest = hashlib.sha256(f"{SEED}:{task_key}:{cand.key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2 ** 64


def synthetic_result(task, cand: Candidate, reason: str | None) -> MeasureResult:
    """The made-up result of one candidate (see the module's docstring)."""
    if reason:
        return MeasureResult.failure("invalid", reason)
    u = draw(task.key, cand)
    if u < 0.05:
        return MeasureResult.failure("build_error", "synthetic build error", build_seconds=1.0)
    dtype = str(task.args.get("dtype", "float32"))
    seconds = task.flops / (PEAK[dtype] * EFFICIENCY[cand.sketch]) * (1.0 + u)
    return MeasureResult((seconds * 1.002, seconds, seconds * 0.998), None, "", 1.0, 0.1)


def candidates(space, rng: random.Random) -> list[Candidate]:
    """The default, then distinct seeded samples: PER_TASK in all."""
    out = [space.default_candidate()]
    for _ in range(PER_TASK * 20):
        if len(out) >= PER_TASK:
            break
        try:
            cand, _ = space.sample(rng)
        except InvalidCandidate:
            continue
        if cand not in out:
            out.append(cand)
    return out


def make_records() -> list:
    target = TargetSpec("cuda", dict(TARGET), dict(HARDWARE), False)
    versions = current_versions(SPACE_VERSION)
    rng = random.Random(SEED)
    records = []
    for op_file, workload, args in TASKS:
        (task,) = load_tasks(os.path.join(ROOT, op_file), [workload], args)
        space = generate_space(task, target)
        for cand in candidates(space, rng):
            result = synthetic_result(task, cand, space.check(space.apply(cand)))
            rec = make_record(task, target, cand, result, versions)
            records.append(dataclasses.replace(rec, provenance=dict(PROVENANCE)))
    return records


def main() -> int:
    path = os.path.join(ROOT, LOG)
    n = write_records(make_records(), path)
    os.chmod(path, 0o644)  # a committed data file, not a private temporary one
    print(f"wrote {n} synthetic records to {LOG}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
