"""A Task: one workload instantiated with concrete arguments, ready to schedule.

The task key is a hash of our own canonical serialisation of the TE computation
(see `canonical.py`) plus the argument values. It is stable across processes,
machines and TVM's internal hashing, and changes when shape, dtype or computation change.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class TensorSpec:
    """Name, shape and dtype of one kernel argument."""

    name: str
    shape: tuple[int, ...]
    dtype: str

    def to_json(self) -> dict:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}

    @staticmethod
    def from_json(d: dict) -> "TensorSpec":
        return TensorSpec(d["name"], tuple(int(x) for x in d["shape"]), d["dtype"])


@dataclass(frozen=True, eq=False)
class Task:
    """A schedulable computation: PrimFunc, FLOP count, key and argument specs."""

    workload: str
    args: dict[str, Any]
    func: Any  # tvm.tirx.PrimFunc, global symbol "main"
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    flops: float
    key: str
    canonical: str = field(repr=False, default="")
    # the workload definition it was made from (other shapes of it are rebuilt from it
    # to learn from their records); None for a task read back from JSON
    definition: Any = field(repr=False, default=None)

    @property
    def name(self) -> str:
        """Human-readable name, e.g. ``matmul(M=512,N=512,K=512)``."""
        inner = ",".join(f"{k}={v}" for k, v in self.args.items())
        return f"{self.workload}({inner})"

    @property
    def mod(self):
        """The unscheduled IRModule ({"main": func})."""
        import tvm

        return tvm.IRModule({"main": self.func})

    @property
    def arg_specs(self) -> tuple[TensorSpec, ...]:
        return self.inputs + self.outputs

    def to_json(self) -> dict:
        """What the database stores about a workload instance (not the function itself)."""
        return {
            "workload": self.workload,
            "args": dict(self.args),
            "key": self.key,
            "flops": self.flops,
            "inputs": [t.to_json() for t in self.inputs],
            "outputs": [t.to_json() for t in self.outputs],
        }
