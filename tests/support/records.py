"""Well-formed fake records for database tests (no TVM build needed)."""
from __future__ import annotations

import hashlib
import json

from autosched.db.record import Record
from autosched.results import MeasureResult

TARGETS = {
    "llvm-a": {"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2},
    "llvm-b": {"kind": "llvm", "mcpu": "znver3", "num-cores": 8},
    "cuda": {"kind": "cuda", "arch": "sm_90", "max_num_threads": 1024},
}
HARDWARE = {
    "hw1": {"device": "cpu", "model": "Intel Xeon Platinum 8375C", "cores": 2},
    "hw2": {"device": "cpu", "model": "AMD EPYC 7R13", "cores": 8},
    "gpu": {"device": "gpu", "name": "NVIDIA H100", "arch": "sm_90", "driver": "580"},
}


def _h(text: str, n: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:n]


def task_key(name: str) -> str:
    return _h("task:" + name, 32)


def target_key(name: str) -> str:
    return json.dumps(TARGETS[name], sort_keys=True, separators=(",", ":"))


def hardware_key(name: str) -> str:
    return _h(json.dumps(HARDWARE[name], sort_keys=True), 16)


def versions(tvm: str = "0.27.0", space: str = "1") -> dict:
    return {"autosched": "0.1.0", "tvm": tvm, "space": space}


def make_rec(task: str = "mm", cand: int | str = 0, latency: float | None = 1e-3, *,
             target: str = "llvm-a", hw: str = "hw1", tvm: str = "0.27.0",
             space: str = "1", error: str | None = None, autosched: str = "0.1.0") -> Record:
    """A record of candidate `cand` of task `task`: correct with `latency` seconds
    (three repeats, median = latency) unless `error` names a failure kind."""
    if error is None:
        result = MeasureResult((latency * 1.01, latency, latency * 0.99), None, "", 0.5, 0.1)
    else:
        result = MeasureResult.failure(error, f"{error} of candidate {cand}", build_seconds=0.2)
    candidate = {"sketch": "tile", "decisions": {"i": [4, 8, cand], "j": [2, 16], "unroll": 16}}
    return Record(task_key=task_key(task), workload=task, args={"M": 64, "N": 32},
                  target_key=target_key(target), hardware=HARDWARE[hw],
                  hardware_key=hardware_key(hw),
                  versions={"autosched": autosched, "tvm": tvm, "space": space},
                  candidate=candidate, candidate_key=_h(f"{task}:{cand}", 24), result=result,
                  provenance={"host": "testhost", "user": "tester", "time": 1700000000.0,
                              "settings": {"repeat": 3}})


def task_json(task: str = "mm", flops: float = 2 * 64 * 32 * 16) -> dict:
    return {"workload": task, "args": {"M": 64, "N": 32}, "key": task_key(task),
            "flops": flops,
            "inputs": [{"name": "A", "shape": [64, 16], "dtype": "float32"}],
            "outputs": [{"name": "C", "shape": [64, 32], "dtype": "float32"}]}
