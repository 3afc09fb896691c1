"""Reference data of a task: seeded random inputs and the outputs of the unscheduled
computation, computed once per task and kept on disk for every runner and worker.

Layout: ``<work_dir>/reference/<task key>/`` holds ``meta.json`` plus one ``.npy`` per
input (``in<i>.npy``) and per expected output (``out<i>.npy``). ``meta.json`` is written
last (how a directory appears complete and is shared between processes: `store.py`).
Arrays are plain ``.npy`` loaded with ``allow_pickle=False``; dtypes numpy lacks
(bfloat16, float8) are stored as their raw bits and re-viewed on load (``storage`` in
``meta.json``).

Inputs: floats uniform in [-1, 1]; signed integers in [-3, 3]; unsigned in [0, 7];
booleans fair coin flips. The generator is seeded from the task key and a seed, so a
task's inputs are identical in every process and on every machine.

Expected outputs are computed in a reference worker (`job.py`) that is killed
after `timeout` seconds: on the CPU, the unscheduled PrimFunc built for the generic CPU
(``llvm``); for a CUDA target whose GPU is on this machine, the plain GPU schedule on
the device, trusted once it matched the CPU at a reduced shape (`device.py`).
``meta.json`` says which (``target``, ``expected``, ``check``). Either way the reference
is valid for every target: the first one made for a task is the one kept.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass

import numpy as np

from .check import Tolerance, tolerance_for

# 2: made in a worker, maybe on the device (`expected`, `check`); 3: half outputs of
# float32 sums get the tolerance of their accumulation (check.py)
REFERENCE_VERSION = 3
REFERENCE_TARGET = {"kind": "llvm"}  # the CPU reference: the generic CPU, plainest code


def np_dtype(dtype: str):
    """numpy dtype for a TVM dtype name (bfloat16 and float8 through ml_dtypes)."""
    try:
        return np.dtype(dtype)
    except TypeError:
        import ml_dtypes

        try:
            return np.dtype(getattr(ml_dtypes, dtype))
        except AttributeError:
            raise ValueError(f"no numpy dtype for {dtype!r}") from None


def _storage(dt) -> str | None:
    """Plain numpy name of the bits a dtype is saved as, when .npy cannot hold it."""
    return None if dt.kind in "biufc" else f"uint{dt.itemsize * 8}"


def random_inputs(specs, task_key: str, seed: int = 0) -> list[np.ndarray]:
    """Deterministic inputs for `specs` (TensorSpecs), seeded by task key and seed."""
    digest = int(hashlib.sha256(task_key.encode()).hexdigest()[:16], 16)
    rng = np.random.default_rng([seed, digest])
    arrays = []
    for spec in specs:
        dt = np_dtype(spec.dtype)
        if dt.kind == "b":
            a = rng.integers(0, 2, spec.shape).astype(dt)
        elif dt.kind == "i":
            a = rng.integers(-3, 4, spec.shape).astype(dt)
        elif dt.kind == "u":
            a = rng.integers(0, 8, spec.shape).astype(dt)
        else:
            a = rng.uniform(-1.0, 1.0, spec.shape).astype(dt)
        arrays.append(a)
    return arrays


def poison(spec) -> np.ndarray:
    """An output buffer prefilled with values no correct kernel leaves behind
    (NaN for floats, the dtype's maximum for integers), so unwritten elements show."""
    dt = np_dtype(spec.dtype)
    if dt.kind == "b":
        return np.ones(spec.shape, dt)
    if dt.kind in "iu":
        return np.full(spec.shape, np.iinfo(dt).max, dt)
    return np.full(spec.shape, np.nan, dtype=np.float32).astype(dt)


def longest_reduction(func) -> tuple[int, str | None]:
    """(extent, dtype) of the longest reduction in `func`: the largest product of
    reduction extents of a block, and the dtype that block accumulates in (what it
    writes); (1, None) without a reduction."""
    import tvm
    from tvm import s_tir

    sch = s_tir.Schedule(tvm.IRModule({"main": func}))
    best: tuple[int, str | None] = (1, None)

    def walk(rv):
        nonlocal best
        for child in sch.get_child_blocks(rv):
            stmt = sch.get(child)
            extent = 1
            for iv in stmt.iter_vars:
                if int(iv.iter_type) == 2:  # IterVar.CommReduce
                    extent *= int(iv.dom.extent)
            if extent > best[0] and stmt.writes:
                best = (extent, str(stmt.writes[0].source.dtype))
            walk(child)

    walk(sch.get_sblock("root"))
    return best


@dataclass(frozen=True)
class Reference:
    """A complete reference directory. `created` is True when this call computed it,
    False when it was found on disk (computed earlier, maybe by another process)."""

    directory: str
    meta: dict
    created: bool = False

    @property
    def task_key(self) -> str:
        return self.meta["task_key"]

    def specs(self) -> tuple[list, list]:
        """(input TensorSpecs, output TensorSpecs) as stored."""
        from ...task import TensorSpec

        return ([TensorSpec.from_json(e) for e in self.meta["inputs"]],
                [TensorSpec.from_json(e) for e in self.meta["outputs"]])

    def tolerances(self) -> list[Tolerance]:
        return [Tolerance.from_json(o["tolerance"]) for o in self.meta["outputs"]]

    def arrays(self) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """(inputs, expected outputs) as numpy arrays of their logical dtypes."""
        return ([_load(self.directory, e) for e in self.meta["inputs"]],
                [_load(self.directory, e) for e in self.meta["outputs"]])


def _load(directory: str, entry: dict) -> np.ndarray:
    a = np.load(os.path.join(directory, entry["file"]), allow_pickle=False)
    return a.view(np_dtype(entry["dtype"])) if entry.get("storage") else a


def _save(directory: str, file: str, spec, array: np.ndarray) -> dict:
    storage = _storage(array.dtype)
    np.save(os.path.join(directory, file), array.view(storage) if storage else array,
            allow_pickle=False)
    return {**spec.to_json(), "file": file, "storage": storage}


def reference_dir(work_dir: str, task_key: str, seed: int = 0) -> str:
    name = task_key if seed == 0 else f"{task_key}-seed{seed}"
    return os.path.join(work_dir, "reference", name)


def load_reference(directory: str) -> Reference | None:
    """The reference in `directory`, or None when it is missing, partial or outdated."""
    try:
        with open(os.path.join(directory, "meta.json")) as f:
            meta = json.load(f)
    except (OSError, ValueError):
        return None
    if meta.get("version") != REFERENCE_VERSION:
        return None
    files = [e["file"] for e in meta.get("inputs", []) + meta.get("outputs", [])]
    if not all(os.path.isfile(os.path.join(directory, f)) for f in files):
        return None
    return Reference(directory, meta)


def write_reference(directory: str, task: dict, seed: int, inputs, expected,
                    how: dict) -> dict:
    """Write the arrays and then ``meta.json`` into `directory`; returns the meta.
    `task` is the request's description (key, name, inputs, outputs, reduction_extent,
    accumulate_dtype),
    `how` what made the expected outputs (``target``, ``expected``, ``check``)."""
    from ...task import TensorSpec

    in_specs = [TensorSpec.from_json(e) for e in task["inputs"]]
    out_specs = [TensorSpec.from_json(e) for e in task["outputs"]]
    extent = int(task["reduction_extent"])
    meta = {"version": REFERENCE_VERSION, "task_key": task["key"], "task": task["name"],
            "seed": seed, **how, "reduction_extent": extent,
            "inputs": [_save(directory, f"in{i}.npy", s, a)
                       for i, (s, a) in enumerate(zip(in_specs, inputs, strict=True))],
            "outputs": []}
    for i, (spec, out) in enumerate(zip(out_specs, expected, strict=True)):
        entry = _save(directory, f"out{i}.npy", spec, out)
        entry["tolerance"] = tolerance_for(spec.dtype, extent, out,
                                           task.get("accumulate_dtype")).to_json()
        meta["outputs"].append(entry)
    with open(os.path.join(directory, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    return meta
